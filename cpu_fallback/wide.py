"""Views of row tensors on wider elements: the same bytes, fewer elements for torch's copy loops."""

from __future__ import annotations

import dataclasses
from typing import TypeVar

import torch

#: The element every fast path tries first: 8 bytes (every row is a multiple of 32 bytes).
WIDE = torch.int64


def same_width_views(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``tensors`` viewed as :data:`WIDE` elements when every one of them allows it, else unchanged.

    A view needs a contiguous last dimension and 8-byte aligned offsets and strides; the bytes
    copied are the same either way.
    """
    try:
        return tuple(t.view(WIDE) for t in tensors)
    except RuntimeError:
        return tensors


#: Element types torch's CPU index kernels (``index_copy_``, ``index_select``, ``index_put_``) lack.
_NO_INDEX_KERNELS = (torch.float8_e4m3fn, torch.float8_e5m2)
_SAME_WIDTH_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32}

_Args = TypeVar("_Args")


def bit_views(args: _Args) -> _Args:
    """``args`` (a checked call's Args, a dataclass of tensors) with every fp8 tensor viewed as
    same-width integers.

    The copies move bits, so the integer view writes the same bytes; it exists because torch's
    CPU index kernels have no fp8 versions. Calls without fp8 tensors come back unchanged.
    """
    wrapped = {name: t.view(_SAME_WIDTH_INT[t.element_size()]) for name, t in vars(args).items()
               if isinstance(t, torch.Tensor) and t.dtype in _NO_INDEX_KERNELS}
    return dataclasses.replace(args, **wrapped) if wrapped else args  # type: ignore[type-var]
