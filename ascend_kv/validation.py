"""How much a call checks when its index tensors live on the device (docs/semantics.md#validate-full).

``"device"`` (the default): a call with any index tensor on the device reads no value back to
the host; only the rules that need no values run, and the kernels or the device fallback skip
out-of-range values. ``"full"``: every value rule runs for such calls too, with one
synchronisation per call, raising the errors a call with host index tensors raises. Set by
:func:`validate` (a context manager), else ``ASCEND_KV_VALIDATE``, read once.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
from collections.abc import Iterator

VALIDATE_ENV = "ASCEND_KV_VALIDATE"
MODES = ("device", "full")

_chosen: contextvars.ContextVar[str | None] = contextvars.ContextVar("ascend_kv_validate", default=None)


def _check_mode(mode: str, source: str) -> str:
    if mode not in MODES:
        raise ValueError(f"{source} must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


@functools.cache
def environment_mode() -> str:
    """``ASCEND_KV_VALIDATE``, or ``"device"`` when unset; read once (``environment_mode.cache_clear()``
    reads it again)."""
    return _check_mode(os.environ.get(VALIDATE_ENV, "").strip().lower() or "device", VALIDATE_ENV)


def full() -> bool:
    """Whether calls with device index tensors run every value check."""
    chosen = _chosen.get()
    return (chosen if chosen is not None else environment_mode()) == "full"


@contextlib.contextmanager
def validate(mode: str = "full") -> Iterator[None]:
    """Check index values of device tensors too (``"full"``), or not (``"device"``), inside the block.

    Examples
    --------
    >>> with ascend_kv.validate("full"):       # debugging: one sync per call, host-case errors
    ...     ascend_kv.kv_cache(new_kv, 0, past, token_offset_on_npu, seq_len_on_npu)
    """
    token = _chosen.set(_check_mode(mode, "mode"))
    try:
        yield
    finally:
        _chosen.reset(token)
