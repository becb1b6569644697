"""Views of row tensors on wider elements: the same bytes, fewer elements for torch's copy loops."""

from __future__ import annotations

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
