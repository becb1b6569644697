"""A request's block address lists between two transfer-ready caches: ``(src_addrs, dst_addrs,
lengths)`` for a transfer engine, built in C++ by ``torch.ops.ascend_kv.block_ranges``
(docs/semantics.md §17.2).
"""

from __future__ import annotations

import torch

from ..api import arguments as common
from .descriptor import CacheDescriptor

#: The fields two descriptors must share for their blocks to be copied byte for byte.
GEOMETRY = ("layout", "dtype", "num_layers", "block_size", "num_heads", "head_size", "head_start")


def block_address_lists(
    src: CacheDescriptor,
    dst: CacheDescriptor,
    src_block_ids: torch.Tensor,
    dst_block_ids: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The byte ranges that copy blocks ``src_block_ids`` of ``src`` into ``dst_block_ids`` of ``dst``.

    Every segment (K, V, scale caches) of every layer: block ``src_block_ids[j]`` of each goes to
    block ``dst_block_ids[j]`` of the same segment and layer. Runs of consecutive blocks on both
    sides are merged into one range, so a request of contiguous blocks is one range per (layer,
    segment); the lists are sorted by destination address.

    Parameters
    ----------
    src, dst : CacheDescriptor
        The two sides (a remote prefill's and the local decode's for a pull): the same geometry
        (``layout``, ``dtype``, layers, block size, heads, head size, segments).
    src_block_ids, dst_block_ids : torch.Tensor
        ``[n]`` int32 or int64 on the host: ids in ``[0, num_blocks)`` of each side, destinations distinct.

    Returns
    -------
    (torch.Tensor, torch.Tensor, torch.Tensor)
        ``src_addrs``, ``dst_addrs``, ``lengths``: ``[m]`` int64, ``m <= n * layers * segments``.

    Raises
    ------
    TypeError
        A descriptor that is not one, an id table of another dtype.
    ValueError
        Different geometry (naming the field), an id out of range, a repeated destination,
        overlapping destination rows; before anything moves.

    Examples
    --------
    >>> a = ascend_kv.transfer.allocate_transfer_caches(2, 8, 16, 2, 16, alignment=64).descriptor
    >>> b = ascend_kv.transfer.allocate_transfer_caches(2, 8, 16, 2, 16, alignment=64).descriptor
    >>> src, dst, lengths = ascend_kv.transfer.block_address_lists(a, b, torch.tensor([3, 4, 7]), torch.tensor([0, 1, 2]))
    >>> lengths.tolist()   # 4 caches (2 layers, K and V): blocks 3-4 -> 0-1 merged, then 7 -> 2
    [2048, 1024, 2048, 1024, 2048, 1024, 2048, 1024]
    """
    rows = geometry_rows(src, dst)
    for name, value in (("src_block_ids", src_block_ids), ("dst_block_ids", dst_block_ids)):
        common.tensor_argument(name, value)
    src_side, dst_side = zip(*rows) if rows else ((), ())
    return torch.ops.ascend_kv.block_ranges(*_tables(src_side), src_block_ids, src.num_blocks,
                                            *_tables(dst_side), dst_block_ids, dst.num_blocks)


def geometry_rows(src: CacheDescriptor, dst: CacheDescriptor) -> list[tuple[tuple[int, int, int], tuple[int, int, int]]]:
    """Per (segment, layer), each side's ``(base, block stride, block bytes)``; ``ValueError`` naming
    the first field of ``dst`` that differs from ``src``'s."""
    for name, value in (("src", src), ("dst", dst)):
        if not isinstance(value, CacheDescriptor):
            raise TypeError(f"{name} must be a CacheDescriptor, got {common.describe(value)}")
    for field in GEOMETRY:
        if getattr(src, field) != getattr(dst, field):
            raise ValueError(f"dst.{field} = {getattr(dst, field)!r} differs from src.{field} = "
                             f"{getattr(src, field)!r}: blocks are copied byte for byte (relayout goes through "
                             f"a staging buffer, TransferAgent.pull)")
    names = [s.name for s in src.segments]
    if [s.name for s in dst.segments] != names:
        raise ValueError(f"dst.segments {[s.name for s in dst.segments]} differ from src.segments {names}")
    rows = []
    for a, b in zip(src.segments, dst.segments):
        if (a.dtype, a.block_shape) != (b.dtype, b.block_shape):
            raise ValueError(f"dst segment {b.name!r} holds {b.dtype} blocks {b.block_shape}, src's "
                             f"{a.dtype} blocks {a.block_shape}")
        rows += [((x, a.block_stride, a.block_bytes), (y, b.block_stride, b.block_bytes))
                 for x, y in zip(a.bases, b.bases)]
    return rows


def _tables(side: tuple[tuple[int, int, int], ...]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(bases, strides, lengths)`` int64 tables of one side's rows."""
    table = torch.tensor(side, dtype=torch.int64).reshape(-1, 3)
    return table[:, 0].contiguous(), table[:, 1].contiguous(), table[:, 2].contiguous()
