"""``python -m ascend_kv``: the ``ascend-kv`` command."""

from .cli import main

raise SystemExit(main())
