"""Running a checked call (:mod:`ascend_kv.rules.forms`): which backend, and handing it the call.

On host tensors the policy's choice is the fast host fallback (given as a function of the Plan)
or, when chosen explicitly, the kernels' host build. On a device the host index tensors go there
first, in one copy, then the kernels (NPU only, where the policy allows) or the device fallback
run; neither reads an index value back to the host.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Optional, Union

import torch

from ..backends import kernel_domain, npu
from ..cpu_fallback import on_device as device_fallback
from ..dispatch import device as runtime
from ..dispatch import policy, validation
from ..rules.forms import BlockCopyArgs, KvCacheArgs, PagedLoadArgs, ReshapeAndCacheArgs
from . import upload

Args = Union[KvCacheArgs, PagedLoadArgs, ReshapeAndCacheArgs, BlockCopyArgs]
#: Run on the tensors just before the kernels (or their host build) take a call, or None.
BeforeKernels = Optional[Callable[[Args], None]]


def decision(args: Args) -> policy.Decision:
    """What runs a checked call, and why (the decision the implementations take)."""
    device = args.device
    return policy.decide(args.OPERATION, device, _outside_reason(args, device))


def _choose(args: Args) -> str:
    """The backend that runs a checked call (a fallback on an NPU warns once per reason)."""
    device = args.device
    return policy.choose(args.OPERATION, device, _outside_reason(args, device))


def _outside_reason(args: Args, device: torch.device) -> str | None:
    """Why the kernels cannot take the call in place, or None; asked on an NPU only (elsewhere no
    kernel runs in place), and kept per call signature (``args.derived``)."""
    if not runtime.is_npu(device):
        return None
    if "outside" not in args.derived:
        args.derived["outside"] = kernel_domain.outside_reason(args)
    reason: str | None = args.derived["outside"]
    return reason


def reads_values(args: Args) -> bool:
    """Whether a call on the device checks its index values: all on the host, or full validation."""
    if "index_on_host" not in args.derived:  # the index tensors' devices are in the call's signature
        args.derived["index_on_host"] = all(not isinstance(t, torch.Tensor) or t.is_cpu
                                            for t in map(args.__getattribute__, args.INDEX_FIELDS))
    return bool(args.derived["index_on_host"]) or validation.full()


def on_host(args: Args, host_fallback: Callable[[], None], before_kernels: BeforeKernels = None) -> None:
    """Run a call on host tensors: the host build when ``sim`` is chosen, else ``host_fallback()``."""
    if policy.choose_on_host(args.OPERATION) == "sim":
        if before_kernels is not None:
            before_kernels(args)
        getattr(importlib.import_module("ascend_kv.backends.sim"), args.FUNCTION)(args)  # may compile on first use
    else:
        host_fallback()


def on_device(args: Args, before_kernels: BeforeKernels = None) -> None:
    """Run a call on device tensors: host index tensors uploaded in one copy, then the kernels or the
    device fallback."""
    args = upload.index_tensors_on_device(args)
    if _choose(args) == "npu":
        if before_kernels is not None:
            before_kernels(args)
        getattr(npu, args.FUNCTION)(args)
    else:
        getattr(device_fallback, args.FUNCTION)(args)
