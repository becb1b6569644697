"""The internal forms of a checked call, which the backends take (docs/architecture.md, section 2).

``*Args``: the tensors, with every rule that needs no index values checked; index values may
be unchecked (on the device), so a backend that takes them skips what is out of range
(docs/semantics.md#safe-semantics). ``*Call``: a call whose index values were read and
checked, held as lists of Python ints (cheaper than numpy arrays for the batch sizes of a
serving step), so a backend can trust every index it derives from them. Treat the lists as
read only. The tensors stay where the caller put them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..api.params import KvCacheCfg


@dataclass(frozen=True)
class KvCacheCall:
    """A validated ``kv_cache`` call.

    Token ``j`` of batch entry ``b`` (``0 <= j < seq_len[b]``) is row ``read_start[b] + j`` of
    ``new_kv`` and goes to ``past[layer_id, b, write_start[b] + j]``.

    Attributes
    ----------
    new_kv : torch.Tensor
        ``[ntokens, hidden]``, ``past.dtype``; any strides (a 4-D ``new_kv`` is its flat view).
    past : torch.Tensor
        ``[layers, batch, max_seq_len, hidden]``, written in place; no two of its elements
        share memory, and it shares none with ``new_kv``.
    layer_id : int
        The layer written, ``0 <= layer_id < layers``.
    seq_len : list of int
        ``[batch]``, tokens per batch entry.
    read_start : list of int
        ``[batch]``, first ``new_kv`` row of each entry (exclusive prefix sum of ``seq_len``).
    write_start : list of int
        ``[batch]``, first ``past`` position written (``token_offset - seq_len``).
    """

    new_kv: torch.Tensor
    past: torch.Tensor
    layer_id: int
    seq_len: list[int]
    read_start: list[int]
    write_start: list[int]

    @property
    def ntokens(self) -> int:
        """Rows of ``new_kv`` written."""
        return int(self.new_kv.shape[0])


@dataclass(frozen=True)
class PagedLoadCall:
    """A validated ``paged_cache_load`` call, with both length modes reduced to one.

    Token ``j`` of batch entry ``b`` (``0 <= j < lens[b]``) sits in block
    ``block_table[b, first_column[b] + j // block_size]`` at slot ``j % block_size`` and goes
    to output row ``out_start[b] + j``. Output rows are one contiguous range:
    ``[out_start[0], out_start[0] + num_tokens)`` (empty when ``num_tokens == 0``).

    Attributes
    ----------
    layout : KvCacheCfg
        ND: caches ``[num_blocks, block_size, num_heads, head_size]``, outputs
        ``[rows, num_heads, head_size]``. NZ: caches ``[num_blocks, T // E, block_size, E]``,
        outputs ``[rows, T]``.
    key_cache, value_cache : torch.Tensor
        The paged caches (read only).
    key, value : torch.Tensor
        The outputs, written in place; at least ``out_start[0] + num_tokens`` rows. No two
        elements of an output share memory, and neither shares memory with a cache.
    block_table : list of list of int
        ``[batch][columns]``: the block table's leading ``columns`` columns, as many as the
        furthest-reaching entry needs (columns no token needs are not read). Every entry a
        token needs is in ``[0, num_blocks)``.
    blocks : list of int
        ``[blocks read]``: the entries tokens need, in output order: for each batch entry
        ``b`` in turn, ``block_table[b][first_column[b] : first_column[b] + ceil(lens[b] / block_size)]``.
    lens : list of int
        ``[batch]``, tokens gathered per batch entry.
    out_start : list of int
        ``[batch]``, first output row per batch entry.
    first_column : list of int
        ``[batch]``, block-table column of each entry's first token
        (``seq_starts // block_size``, or zeros).
    block_size : int
        Token slots per cache block.
    """

    layout: KvCacheCfg
    key_cache: torch.Tensor
    value_cache: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    block_table: list[list[int]]
    blocks: list[int]
    lens: list[int]
    out_start: list[int]
    first_column: list[int]
    block_size: int

    @property
    def num_tokens(self) -> int:
        """Rows gathered into each output."""
        return sum(self.lens)

    @property
    def table_columns(self) -> int:
        """Columns of ``block_table`` held (0 for an empty batch)."""
        return len(self.block_table[0]) if self.block_table else 0

    @property
    def first_row(self) -> int:
        """The first output row written (0, or ``context_lens[0]`` in cumsum mode)."""
        return self.out_start[0] if self.out_start else 0


@dataclass(frozen=True)
class KvCacheArgs:
    """A ``kv_cache`` call whose types, dtypes, shapes, devices and aliasing were checked, but whose
    index values may not have been (they may live on the device). The kernels, the sim and the
    device fallback take this form and skip any token whose position falls outside the tensors.

    Attributes
    ----------
    new_kv : torch.Tensor
        ``[ntokens, hidden]`` (a 4-D ``new_kv`` is given as its flat view), ``past.dtype``.
    past : torch.Tensor
        ``[layers, batch, max_seq_len, hidden]``, written in place.
    layer_id : int or torch.Tensor
        The layer written: an int, or a one-element int32/int64 tensor (host or device).
    token_offset, seq_len : torch.Tensor
        ``[batch]`` int32/int64, on the host or on ``past``'s device.
    """

    new_kv: torch.Tensor
    past: torch.Tensor
    layer_id: int | torch.Tensor
    token_offset: torch.Tensor
    seq_len: torch.Tensor


@dataclass(frozen=True)
class PagedLoadArgs:
    """A ``paged_cache_load`` call in the form of :class:`KvCacheArgs`: structure checked, values maybe not.

    Attributes
    ----------
    layout : KvCacheCfg
        ND or NZ (see :class:`PagedLoadCall`).
    key_cache, value_cache : torch.Tensor
        The paged caches (read only).
    block_table : torch.Tensor
        ``[batch, max_blocks]`` int32/int64.
    context_lens : torch.Tensor
        ``[batch]`` lengths, or ``[batch + 1]`` cumulative lengths when ``cumsum``; int32/int64.
    seq_starts : torch.Tensor or None
        ``[batch]`` int32/int64 token offsets into each block-table row.
    cumsum : bool
        ``context_lens`` holds cumulative lengths.
    key, value : torch.Tensor
        The outputs, written in place: ND ``[rows, num_heads, head_size]``, NZ ``[rows, T]``.
    zero_fill : bool
        torch_npu's ``npu_gather_pa_kv_cache`` semantics: a token whose block-table column is past
        the table or whose block id is outside ``[0, num_blocks)`` gives a zero row (instead of an
        error on host values, or a skipped row on device values).
    """

    layout: KvCacheCfg
    key_cache: torch.Tensor
    value_cache: torch.Tensor
    block_table: torch.Tensor
    context_lens: torch.Tensor
    seq_starts: torch.Tensor | None
    cumsum: bool
    key: torch.Tensor
    value: torch.Tensor
    zero_fill: bool = False


@dataclass(frozen=True)
class ReshapeAndCacheArgs:
    """A ``reshape_and_cache`` call in the form of :class:`KvCacheArgs`: structure checked, values maybe not.

    Token ``i < len(slot_mapping)`` goes to slot ``slot_mapping[i]`` (block ``slot // block_size``,
    position ``slot % block_size``) of each cache; negative slots are padding.

    Attributes
    ----------
    layout : KvCacheCfg
        The caches' layout: ND ``[num_blocks, block_size, num_heads, head_size]`` or NZ
        ``[num_blocks, num_heads * head_size // E, block_size, E]``.
    key : torch.Tensor
        ``[num_tokens, num_heads, head_size_k]``, ``key_cache.dtype``; any strides.
    value : torch.Tensor or None
        ``[num_tokens, num_heads, head_size_v]``, ``value_cache.dtype``; None in key-only mode.
    key_cache : torch.Tensor
        Written in place.
    value_cache : torch.Tensor or None
        Written in place; None in key-only mode.
    slot_mapping : torch.Tensor
        ``[n]`` int32/int64, ``n <= num_tokens``, on the host or on the caches' device.
    """

    layout: KvCacheCfg
    key: torch.Tensor
    value: torch.Tensor | None
    key_cache: torch.Tensor
    value_cache: torch.Tensor | None
    slot_mapping: torch.Tensor


@dataclass(frozen=True)
class BlockCopyArgs:
    """A ``block_copy`` or ``copy_blocks`` call in the form of :class:`KvCacheArgs`: structure checked,
    values maybe not.

    Destination ``j`` (``0 <= j < len(dst)``) takes source ``i``, the pair whose range
    ``[cum_sum[i-1], cum_sum[i])`` holds ``j`` (``cum_sum`` None: ``i = j``, one pair each), and
    block ``src[i]`` of every cache is copied to its block ``dst[j]``. Index values outside
    ``[0, num_blocks)`` are skipped.

    Attributes
    ----------
    caches : tuple of torch.Tensor
        Every cache written, each ``[num_blocks, ...]`` (dim 0 the block; ND or NZ alike): a
        ``block_copy``'s key and value caches, or every layer's of a ``copy_blocks``. They share
        ``num_blocks`` and one device, and no two share a byte.
    src : torch.Tensor
        ``[pairs]`` int32/int64 source blocks (``copy_blocks``: ``block_mapping[:, 0]``).
    dst : torch.Tensor
        ``[copies]`` int32/int64 destination blocks (``copy_blocks``: ``block_mapping[:, 1]``).
    cum_sum : torch.Tensor or None
        ``[pairs]`` int32/int64 running ends of each source's destinations; None for one
        destination per source (``copies == pairs``).
    """

    caches: tuple[torch.Tensor, ...]
    src: torch.Tensor
    dst: torch.Tensor
    cum_sum: torch.Tensor | None


@dataclass(frozen=True)
class BlockCopyCall:
    """A :class:`BlockCopyArgs` whose index values were read and checked, expanded per destination.

    Attributes
    ----------
    args : BlockCopyArgs
        The call.
    sources, destinations : list of int
        ``[copies]``: block ``sources[j]`` of every cache goes to block ``destinations[j]``; all in
        ``[0, num_blocks)``, the destinations distinct and none of them a source.
    """

    args: BlockCopyArgs
    sources: list[int]
    destinations: list[int]


@dataclass(frozen=True)
class SwapBlocksArgs:
    """A checked ``swap_blocks`` call: block ``sources[i]`` of ``src`` to block ``destinations[i]`` of ``dst``.

    Attributes
    ----------
    src : torch.Tensor
        ``[src_blocks, ...]``, read.
    dst : torch.Tensor
        ``[dst_blocks, ...]`` (``src.shape[1:]``, ``src.dtype``), written; on ``src``'s device or another.
    sources, destinations : list of int
        ``[n]``, from ``block_mapping``: in range of ``src`` and of ``dst``, the destinations distinct.
    """

    src: torch.Tensor
    dst: torch.Tensor
    sources: list[int]
    destinations: list[int]
