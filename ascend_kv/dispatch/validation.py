"""How much a call checks when its index tensors live on the device (docs/semantics.md#validate-full).

``"device"`` (the default): a call with any index tensor on the device reads no value back to
the host; only the rules that need no values run, and the kernels or the device fallback skip
out-of-range values. ``"full"``: every value rule runs for such calls too, with one
synchronisation per call, raising the errors a call with host index tensors raises. Set by
:func:`validate` (a context manager), else ``ASCEND_KV_VALIDATE``, read once.
"""

from __future__ import annotations

import contextlib

from . import settings

VALIDATE_ENV = "ASCEND_KV_VALIDATE"
MODE = settings.Setting(VALIDATE_ENV, ("device", "full"), "device", "mode", "validate")
environment_mode = MODE.environment
"""``ASCEND_KV_VALIDATE``, or ``"device"`` when unset; read once (``environment_mode.cache_clear()`` reads it again)."""


def full() -> bool:
    """Whether calls with device index tensors run every value check."""
    return MODE.current() == "full"


def validate(mode: str = "full") -> contextlib.AbstractContextManager[None]:
    """Check index values of device tensors too (``"full"``), or not (``"device"``), inside the block.

    Examples
    --------
    >>> with ascend_kv.validate("full"):       # debugging: one sync per call, host-case errors
    ...     ascend_kv.kv_cache(new_kv, 0, past, token_offset_on_npu, seq_len_on_npu)
    """
    return MODE.use(mode)
