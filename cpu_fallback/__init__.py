"""The vectorized fallback: torch operations (and a small C copier) instead of the kernels.

Installed as ``ascend_kv.cpu_fallback`` (the source folder sits at the top of the repository,
next to ``ascendc/``, but it claims no top-level import name). Two halves:

- the host path (``kv_cache``, ``paged_cache_load``, ``reshape_and_cache`` here): CPU tensors,
  index values already read and checked (:mod:`ascend_kv.rules.checks`), the fastest way that applies;
- :mod:`.on_device`: torch operations on any device (an NPU line the kernels do not support,
  or any other device), which never read an index value back to the host and skip what is out
  of range (docs/semantics.md#safe-semantics).
"""

from .kv_cache import kv_cache
from .paged_cache_load import paged_cache_load
from .reshape_and_cache import reshape_and_cache

NAME = "fallback"

__all__ = ["NAME", "kv_cache", "paged_cache_load", "reshape_and_cache"]
