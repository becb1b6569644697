"""Which validated calls the AscendC kernels take (the NPU build and the host build alike).

:mod:`ascend_kv.checks` defines what a valid call is; the kernels take a subset of it. A call
outside that subset is still valid: ``auto`` runs it on the fallback, an explicit kernel
backend refuses it with this module's reason.
"""

from __future__ import annotations

import torch

from ..calls import KvCacheCall, PagedLoadCall


def _tensors(call: KvCacheCall | PagedLoadCall) -> dict[str, torch.Tensor]:
    if isinstance(call, KvCacheCall):
        return {"new_kv": call.new_kv, "past": call.past}
    return {"key_cache": call.key_cache, "value_cache": call.value_cache, "key": call.key, "value": call.value}


def outside_reason(call: KvCacheCall | PagedLoadCall) -> str | None:
    """Why the kernels cannot take ``call``, or None when they can.

    The kernels address every tensor as a dense row-major buffer, so each must be contiguous
    (a 4-D ``new_kv`` counts as its ``[ntokens, hidden]`` view).
    """
    for name, tensor in _tensors(call).items():
        if not tensor.is_contiguous():
            strides = tuple(tensor.stride())
            return f"{name} is not contiguous (strides {strides}); the kernels take dense row-major tensors"
    return None
