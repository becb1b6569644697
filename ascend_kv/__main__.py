"""``python -m ascend_kv``: the ``ascend-kv`` command."""

from .tools.cli import main

raise SystemExit(main())
