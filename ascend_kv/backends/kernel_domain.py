"""Which validated calls the AscendC kernels take (the NPU build and the host build alike).

:mod:`ascend_kv.checks` defines what a valid call is; the kernels take a subset of it. A call
outside that subset is still valid: ``auto`` runs it on the fallback, an explicit kernel
backend refuses it with this module's reason.
"""

from __future__ import annotations

import torch

from ..calls import KvCacheCall, PagedLoadCall


def _tensors(call: KvCacheCall | PagedLoadCall) -> dict[str, torch.Tensor]:
    """The tensors the kernels address in place. ``new_kv`` is not one: it is read only and
    ``ntokens`` rows, so the kernel backends pass ``new_kv.contiguous()`` (a fused-QKV slice
    costs one small copy, not a trip to the fallback)."""
    if isinstance(call, KvCacheCall):
        return {"past": call.past}
    return {"key_cache": call.key_cache, "value_cache": call.value_cache, "key": call.key, "value": call.value}


def outside_reason(call: KvCacheCall | PagedLoadCall) -> str | None:
    """Why the kernels cannot take ``call``, or None when they can.

    The kernels address the caches and outputs as dense row-major buffers, so each must be
    contiguous.
    """
    for name, tensor in _tensors(call).items():
        if not tensor.is_contiguous():
            strides = tuple(tensor.stride())
            return f"{name} is not contiguous (strides {strides}); the kernels take dense row-major tensors"
    return None
