"""The public operations on sparse-attention models' caches (docs/semantics.md §15): ``scatter_nd_update``
writes rows into a cache of any strides at flat rows or ``(block, offset)`` pairs (vllm-ascend's
``npu_scatter_nd_update_v2``, torch_npu's ``npu_scatter_nd_update_``). One operator call each
(``torch.ops.ascend_kv``, C++).
"""

from __future__ import annotations

import torch

from .block_ops import _tensors


def scatter_nd_update(var: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor) -> torch.Tensor:
    """Write row ``i`` of ``updates`` to ``var[indices[i]]`` in place, and return ``var``.

    Parameters
    ----------
    var : torch.Tensor
        The cache ``[num_slots, ...]`` (k = 1) or ``[num_blocks, block_size, ...]`` (k = 2), any
        strides (padded pages, column slices and per-layer views of one buffer are written in place),
        any element type of 1, 2, 4 or 8 bytes. Only the named rows' bytes change.
    indices : torch.Tensor
        ``[n]`` or ``[n, 1]`` flat rows of ``var`` (k = 1), or ``[n, 2]`` ``(block, offset)`` pairs
        (k = 2); int32 or int64, any strides. An entry with a negative component is padding: nothing
        is written for it. On the host every other entry is checked to lie inside ``var.shape[:k]``
        (``ValueError`` naming it, before anything is written); on ``var``'s device an entry outside
        is skipped and nothing is read back. A destination named twice takes the last row naming it.
    updates : torch.Tensor
        ``[n, *var.shape[k:]]``, ``var``'s dtype and device, any strides.

    Returns
    -------
    torch.Tensor
        ``var``.

    Raises
    ------
    TypeError, ValueError
        A wrong type, dtype, shape or index value, naming it. Nothing is written.

    Examples
    --------
    >>> cache = torch.zeros(3, 2, 4)                      # [num_blocks, block_size, head_dim]
    >>> rows = torch.arange(8.0).reshape(2, 4)
    >>> _ = ascend_kv.scatter_nd_update(cache, torch.tensor([[2, 1], [-1, -1]]), rows)
    >>> cache[2, 1].tolist()
    [0.0, 1.0, 2.0, 3.0]
    >>> _ = ascend_kv.scatter_nd_update(cache.view(6, 4), torch.tensor([0]), rows[1:])
    >>> cache[0, 0].tolist()
    [4.0, 5.0, 6.0, 7.0]
    """
    _tensors(var=var, indices=indices, updates=updates)
    torch.ops.ascend_kv.scatter_nd_update(var, indices, updates)
    return var
