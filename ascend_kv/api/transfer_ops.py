"""The public transfer operations: ``gather_blocks`` and ``scatter_blocks`` (KV transfer between
nodes, offload, relayout). Each normalises its arguments and calls its operator once
(``torch.ops.ascend_kv``, C++): every layer, K and V, in one call.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from . import arguments as common
from .block_ops import _tensor_list, _tensors


def gather_blocks(
    key_caches: Sequence[torch.Tensor],
    value_caches: Sequence[torch.Tensor],
    block_ids: torch.Tensor,
    out: torch.Tensor,
    *,
    cache_layout: str = "nd",
    out_layout: str = "nd",
    head_splits: int = 1,
) -> torch.Tensor:
    """Copy blocks ``block_ids`` of every layer's K and V cache into one buffer, relaid out.

    ``out[kv, layer, j]`` takes block ``block_ids[j]`` of ``(key_caches, value_caches)[kv][layer]``
    in ``out_layout``: one operator call and one kernel launch for all layers (LMCache's store,
    a disaggregated prefill's send, an HND decode side's pull).

    Parameters
    ----------
    key_caches : sequence of torch.Tensor
        One 4-D cache per layer in ``cache_layout``: ``"nd"`` ``[nb, bs, H, D]``, ``"hnd"``
        ``[nb, H, bs, D]`` or ``"nz"`` ``[nb, H*D // E, bs, E]`` (``E = 32 // itemsize``,
        ``bs % 16 == 0``); one shape, dtype and device for all (per-layer views of one buffer are fine).
    value_caches : sequence of torch.Tensor
        As many as ``key_caches``, same shape, or empty for key-only (MLA) caches.
    block_ids : torch.Tensor
        ``[n]`` int32 or int64, on the host (checked: in ``[0, nb)``, repeats allowed) or the
        caches' device (never read back: an out-of-range entry leaves ``out[:, :, j]`` untouched).
    out : torch.Tensor
        ``[KV, L, n, *block]`` (``KV`` = 2, or 1 for key-only caches) in ``out_layout``, the
        caches' dtype, on their device or on the host (pinned memory: non-blocking).
    cache_layout, out_layout : str
        ``"nd"``, ``"hnd"`` or ``"nz"``.
    head_splits : int
        ``S`` dividing H: with ``out_layout="nd"``, a block ``[S, bs, H // S, D]`` (S head groups,
        each contiguous: a TP split).

    Returns
    -------
    torch.Tensor
        ``out``.

    Raises
    ------
    TypeError
        A wrong type or dtype. Nothing is written.
    ValueError
        A wrong layout name, shape or index value. Nothing is written.

    Examples
    --------
    >>> k = [torch.randn(8, 16, 2, 16).half() for _ in range(3)]
    >>> v = [torch.randn(8, 16, 2, 16).half() for _ in range(3)]
    >>> out = torch.empty(2, 3, 2, 2, 16, 16, dtype=torch.float16)     # [KV, L, n, H*D//E, bs, E]
    >>> ascend_kv.gather_blocks(k, v, torch.tensor([5, 1]), out, out_layout="nz").shape
    torch.Size([2, 3, 2, 2, 16, 16])
    """
    keys, values = _tensor_list("key_caches", key_caches), _tensor_list("value_caches", value_caches)
    _tensors(block_ids=block_ids, out=out)
    torch.ops.ascend_kv.gather_blocks(keys, values, block_ids, out, _layout("cache_layout", cache_layout),
                                      _layout("out_layout", out_layout), _splits(head_splits))
    return out


def scatter_blocks(
    src: torch.Tensor,
    key_caches: Sequence[torch.Tensor],
    value_caches: Sequence[torch.Tensor],
    block_ids: torch.Tensor,
    *,
    src_layout: str = "nd",
    cache_layout: str = "nd",
    head_splits: int = 1,
) -> None:
    """Copy a buffer of blocks into blocks ``block_ids`` of every layer's K and V cache, relaid out.

    Block ``block_ids[j]`` of ``(key_caches, value_caches)[kv][layer]`` takes ``src[kv, layer, j]``
    read in ``src_layout``: the inverse of :func:`gather_blocks` (LMCache's load, a Mooncake
    decode side's receive of a TP-split buffer into NZ caches), one call for all layers.

    Parameters
    ----------
    src : torch.Tensor
        ``[KV, L, n, *block]`` in ``src_layout`` (with ``head_splits``), the caches' dtype, on
        their device or on the host (pinned memory: non-blocking).
    key_caches, value_caches : sequence of torch.Tensor
        As :func:`gather_blocks`; written, apart from each other and from ``src``.
    block_ids : torch.Tensor
        ``[n]`` int32 or int64: on the host in ``[0, nb)`` and distinct; on the caches' device an
        out-of-range entry writes nothing.
    src_layout, cache_layout : str
        ``"nd"``, ``"hnd"`` or ``"nz"``.
    head_splits : int
        ``S`` dividing H: with ``src_layout="nd"``, a block ``[S, bs, H // S, D]``.

    Raises
    ------
    TypeError, ValueError
        As :func:`gather_blocks`; a repeated host id too. Nothing is written.

    Examples
    --------
    >>> k = [torch.zeros(8, 16, 4, 16).half() for _ in range(3)]
    >>> staging = torch.randn(1, 3, 2, 2, 16, 2, 16).half()            # [KV, L, n, S, bs, H/S, D]
    >>> ascend_kv.scatter_blocks(staging, k, [], torch.tensor([5, 1]), head_splits=2)
    """
    keys, values = _tensor_list("key_caches", key_caches), _tensor_list("value_caches", value_caches)
    _tensors(src=src, block_ids=block_ids)
    torch.ops.ascend_kv.scatter_blocks(src, keys, values, block_ids, _layout("src_layout", src_layout),
                                       _layout("cache_layout", cache_layout), _splits(head_splits))


def _layout(name: str, value: object) -> str:
    """A layout name as the operator takes it (its rules check which one), or ``TypeError``."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str ('nd', 'hnd' or 'nz'), got {common.describe(value)}")
    return value


def _splits(value: object) -> int:
    return common.int64_argument("head_splits", value)
