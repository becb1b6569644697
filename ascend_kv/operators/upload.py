"""Index tensors that live on the host, sent to the data's device in one copy."""

from __future__ import annotations

import dataclasses
from typing import TypeVar, Union

import torch

from ..rules.forms import BlockCopyArgs, KvCacheArgs, PagedLoadArgs, ReshapeAndCacheArgs

_Args = TypeVar("_Args", bound=Union[KvCacheArgs, PagedLoadArgs, ReshapeAndCacheArgs, BlockCopyArgs])


def to_device(tensors: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """``tensors`` (host integer tensors) as int64 tensors of the same shapes on ``device``: one
    non-blocking copy from pinned memory, of which each result is a view."""
    total = sum(t.numel() for t in tensors)
    if total == 0:  # nothing to copy
        on_device = torch.empty(0, dtype=torch.int64, device=device)
    else:
        try:
            flat = torch.empty(total, dtype=torch.int64, pin_memory=True)
        except RuntimeError:  # no pinned memory for this device: the copy is then from pageable memory
            flat = torch.empty(total, dtype=torch.int64)
        torch.cat([t.reshape(-1) for t in tensors], out=flat)  # gathered straight into the pinned buffer
        on_device = flat.to(device, non_blocking=True)
    views, start = [], 0
    for t in tensors:
        views.append(on_device[start : start + t.numel()].view(t.shape))
        start += t.numel()
    return views


def index_tensors_on_device(args: _Args) -> _Args:
    """``args`` with every index tensor on the data's device: the host ones moved in one copy, as int64."""
    device = args.device
    host = {name: value for name in args.INDEX_FIELDS
            if isinstance(value := getattr(args, name), torch.Tensor) and value.device != device}
    if not host:
        return args
    moved = dict(zip(host, to_device(list(host.values()), device)))
    return dataclasses.replace(args, **moved)  # type: ignore[arg-type]
