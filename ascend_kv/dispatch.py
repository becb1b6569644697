"""Which backend runs a call: the explicit choice, else the automatic policy.

Backends are modules with ``NAME``, ``kv_cache(call)`` and ``paged_cache_load(call)``.
The choice comes from :func:`use_backend` (a context manager), else the environment
variable ``ASCEND_KV_BACKEND`` (``auto``, ``npu``, ``sim`` or ``fallback``), else ``auto``.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import os
from collections.abc import Iterator
from types import ModuleType

from .calls import KvCacheCall, PagedLoadCall

BACKEND_CHOICES = ("auto", "npu", "sim", "fallback")
_MODULES = {"fallback": "ascend_kv.cpu_fallback", "sim": "ascend_kv.backends.sim", "npu": "ascend_kv.backends.npu"}

_chosen: contextvars.ContextVar[str | None] = contextvars.ContextVar("ascend_kv_backend", default=None)


class BackendUnavailableError(RuntimeError):
    """An explicitly chosen backend cannot run here; the message says why."""


def _check_choice(name: str, source: str) -> str:
    if name not in BACKEND_CHOICES:
        raise ValueError(f"{source} must be one of {', '.join(BACKEND_CHOICES)}, got {name!r}")
    return name


def requested_backend() -> str:
    """The backend asked for: :func:`use_backend`, else ``ASCEND_KV_BACKEND``, else ``"auto"``."""
    chosen = _chosen.get()
    if chosen is not None:
        return chosen
    return _check_choice(os.environ.get("ASCEND_KV_BACKEND", "auto").strip().lower() or "auto", "ASCEND_KV_BACKEND")


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Run the calls inside the ``with`` block on backend ``name`` (or ``"auto"``).

    Examples
    --------
    >>> with ascend_kv.use_backend("fallback"):
    ...     ascend_kv.kv_cache(new_kv, 0, past, token_offset, seq_len)
    """
    token = _chosen.set(_check_choice(name, "backend"))
    try:
        yield
    finally:
        _chosen.reset(token)


def _load(name: str) -> ModuleType:
    try:
        return importlib.import_module(_MODULES[name])
    except ImportError as error:
        raise BackendUnavailableError(f"backend {name!r} is not available: {error}") from error


def select(call: KvCacheCall | PagedLoadCall) -> ModuleType:
    """The backend module that runs ``call``."""
    name = requested_backend()
    if name == "auto":
        name = "fallback"
    return _load(name)
