"""The vectorized fallback backend: torch operations on the tensors' own device.

Installed as ``ascend_kv.cpu_fallback`` (the source folder sits at the top of the
repository, next to ``ascendc/``, but it claims no top-level import name). It runs wherever
torch runs: on the host, and as torch operations on an NPU whose product line the kernels do
not support. Every function takes a validated call from :mod:`ascend_kv.checks`.
"""

from .kv_cache import kv_cache
from .paged_cache_load import paged_cache_load

NAME = "fallback"

__all__ = ["NAME", "kv_cache", "paged_cache_load"]
