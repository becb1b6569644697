"""The two forms of a checked call, which the backends take (docs/architecture.md, section 2).

Every operation is checked in the same two steps (its module in :mod:`ascend_kv.rules`):

``args(...) -> *Args``
    The structure: types, dtypes, shapes, devices, strides and aliasing, no index value read.
    Index values may be unchecked (on the device), so a backend that takes only the Args skips
    what is out of range (docs/semantics.md#safe-semantics): the kernels, the sim and the device
    fallback.
``plan(args) -> *Plan``
    The index values, read to the host (one transfer at most) and checked, and what the host
    path derives from them, as lists of Python ints (cheaper than numpy arrays for the batch
    sizes of a serving step). A backend can trust every index it derives from a Plan; the fast
    host fallback takes this form.

An Args carries what the code around it needs to know of its operation (its ATB name, the
backends' function name, its index tensors, the token rows the kernels copy), so nothing
switches on its type. The forms are plain (not frozen) dataclasses, as they are built per call:
treat them as read only. The tensors stay where the caller put them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from ..api.params import KvCacheCfg
from .geometry import CacheGeometry, geometry_of

#: ``{name: (tensor, first dim, what those dims are)}``: dims ``first..`` of ``tensor`` hold one
#: token row, which the kernels copy whole (:mod:`ascend_kv.backends.kernel_domain`).
Rows = dict[str, tuple[torch.Tensor, int, str]]


# ----------------------------------------------------------------------------- kv_cache


@dataclass(eq=False)
class KvCacheArgs:
    """A ``kv_cache`` call, structure checked.

    Attributes
    ----------
    new_kv : torch.Tensor
        ``[ntokens, hidden]`` (a 4-D ``new_kv`` is given as its flat view), ``past.dtype``.
    past : torch.Tensor
        ``[layers, batch, max_seq_len, hidden]``, written in place; no two of its elements
        share memory, and it shares none with ``new_kv``.
    layer_id : int or torch.Tensor
        The layer written: an int in ``[0, layers)``, or a one-element integer tensor (host or device).
    token_offset, seq_len : torch.Tensor
        ``[batch]`` int32/int64, on the host or on ``past``'s device.
    derived : dict
        What later stages derived from the call's structure alone, kept per call signature
        (:data:`ascend_kv.rules.memo.Derived`); keys name the stage.
    """

    OPERATION: ClassVar[str] = "KVCacheOperation"
    FUNCTION: ClassVar[str] = "kv_cache"
    INDEX_FIELDS: ClassVar[tuple[str, ...]] = ("token_offset", "seq_len", "layer_id")

    new_kv: torch.Tensor
    past: torch.Tensor
    layer_id: int | torch.Tensor
    token_offset: torch.Tensor
    seq_len: torch.Tensor
    derived: dict[str, Any] = field(default_factory=dict)

    @property
    def device(self) -> torch.device:
        """The data's device."""
        return self.past.device

    def rows(self) -> Rows:
        """The token rows of each data tensor."""
        return {"new_kv": (self.new_kv, 1, "rows"), "past": (self.past, 3, "rows (dim 3)")}

    def layer_tensor(self) -> torch.Tensor | None:
        """``layer_id`` when it is a tensor, else None."""
        return self.layer_id if isinstance(self.layer_id, torch.Tensor) else None


@dataclass(eq=False)
class KvCachePlan:
    """A ``kv_cache`` call with its index values checked.

    Token ``j`` of batch entry ``b`` (``0 <= j < seq_len[b]``) is row ``read_start[b] + j`` of
    ``args.new_kv`` and goes to ``args.past[layer_id, b, write_start[b] + j]``.

    Attributes
    ----------
    args : KvCacheArgs
        The call.
    layer_id : int
        The layer written, ``0 <= layer_id < layers``.
    seq_len : list of int
        ``[batch]``, tokens per batch entry.
    read_start : list of int
        ``[batch]``, first ``new_kv`` row of each entry (exclusive prefix sum of ``seq_len``).
    write_start : list of int
        ``[batch]``, first ``past`` position written (``token_offset - seq_len``).
    """

    args: KvCacheArgs
    layer_id: int
    seq_len: list[int]
    read_start: list[int]
    write_start: list[int]

    @property
    def ntokens(self) -> int:
        """Rows of ``new_kv`` written."""
        return int(self.args.new_kv.shape[0])


# ----------------------------------------------------------------------------- paged_cache_load


class _OnCachePair:
    """What the Args of the two operations on a paged key/value cache pair share."""

    layout: KvCacheCfg
    key_cache: torch.Tensor
    value_cache: torch.Tensor | None

    @functools.cached_property
    def geometry(self) -> CacheGeometry:
        """Block count, block size and row shapes, read off the caches by their layout."""
        return geometry_of(self.layout, self.key_cache, self.value_cache)

    @property
    def device(self) -> torch.device:
        """The data's device."""
        return self.key_cache.device




@dataclass(eq=False)
class PagedLoadArgs(_OnCachePair):
    """A ``paged_cache_load`` call, structure checked.

    Attributes
    ----------
    layout : KvCacheCfg
        ND: caches ``[num_blocks, block_size, num_heads, head_size]``, outputs
        ``[rows, num_heads, head_size]``. NZ: caches ``[num_blocks, T // E, block_size, E]``,
        outputs ``[rows, T]``. :attr:`geometry` has the sizes.
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
    key, value : torch.Tensor or None
        The outputs, written in place: ``[rows, *geometry.key_row]``, ``[rows, *geometry.value_row]``,
        apart from the caches and from each other. None until the operator allocates them.
    zero_fill : bool
        torch_npu's ``npu_gather_pa_kv_cache`` semantics: a token whose block-table column is past
        the table or whose block id is outside ``[0, num_blocks)`` gives a zero row (instead of an
        error on host values, or a skipped row on device values).
    derived : dict
        What later stages derived from the call's structure alone (as :class:`KvCacheArgs`'s).
    """

    OPERATION: ClassVar[str] = "PagedCacheLoadOperation"
    FUNCTION: ClassVar[str] = "paged_cache_load"
    INDEX_FIELDS: ClassVar[tuple[str, ...]] = ("block_table", "context_lens", "seq_starts")

    layout: KvCacheCfg
    key_cache: torch.Tensor
    value_cache: torch.Tensor
    block_table: torch.Tensor
    context_lens: torch.Tensor
    seq_starts: torch.Tensor | None
    cumsum: bool
    key: torch.Tensor | None
    value: torch.Tensor | None
    zero_fill: bool = False
    derived: dict[str, Any] = field(default_factory=dict)

    def outputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(key, value)``, once given or allocated."""
        assert self.key is not None and self.value is not None, "the outputs are given or allocated"
        return self.key, self.value

    def rows(self) -> Rows:
        """The token rows of each data tensor (the outputs once given or allocated)."""
        dim, what = self.geometry.row_dims
        rows: Rows = {"key_cache": (self.key_cache, dim, what), "value_cache": (self.value_cache, dim, what)}
        rows.update({name: (out, 1, "rows") for name, out in (("key", self.key), ("value", self.value))
                     if out is not None})
        return rows


@dataclass(eq=False)
class PagedLoadPlan:
    """A ``paged_cache_load`` call with its index values checked, both length modes reduced to one.

    Token ``j`` of batch entry ``b`` (``0 <= j < lens[b]``) sits in block
    ``block_table[b][first_column[b] + j // block_size]`` at slot ``j % block_size`` and goes
    to output row ``out_start[b] + j``. Output rows are one contiguous range:
    ``[first_row, first_row + num_tokens)``.

    Attributes
    ----------
    args : PagedLoadArgs
        The call (its outputs given or allocated).
    blocks : list of int
        ``[blocks read]``: the entries tokens need, in output order, each in ``[0, num_blocks)``;
        for each batch entry ``b`` in turn,
        ``block_table[b][first_column[b] : first_column[b] + ceil(lens[b] / block_size)]``.
    lens : list of int
        ``[batch]``, tokens gathered per batch entry.
    out_start : list of int
        ``[batch]``, first output row per batch entry.
    first_column : list of int
        ``[batch]``, block-table column of each entry's first token (``seq_starts // block_size``, or zeros).
    end_row : int
        Rows the outputs need: ``sum(lens)``, or ``context_lens[-1]`` in cumsum mode.
    """

    args: PagedLoadArgs
    blocks: list[int]
    lens: list[int]
    out_start: list[int]
    first_column: list[int]
    end_row: int

    @property
    def num_tokens(self) -> int:
        """Rows gathered into each output."""
        return sum(self.lens)

    @property
    def first_row(self) -> int:
        """The first output row written (0, or ``context_lens[0]`` in cumsum mode)."""
        return self.out_start[0] if self.out_start else 0

    @property
    def block_table(self) -> list[list[int]]:
        """``[batch][columns]``: the block table's leading columns, as many as the furthest-reaching
        entry needs; empty with ``zero_fill``. Read afresh, for inspection: no backend needs it."""
        if self.args.zero_fill:
            return []
        size = self.args.geometry.block_size
        columns = max((first + -(-n // size) for first, n in zip(self.first_column, self.lens)), default=0)
        rows: list[list[int]] = self.args.block_table[:, :columns].tolist()
        return rows


# ----------------------------------------------------------------------------- reshape_and_cache


@dataclass(eq=False)
class ReshapeAndCacheArgs(_OnCachePair):
    """A ``reshape_and_cache`` call, structure checked.

    Token ``i < len(slot_mapping)`` goes to slot ``slot_mapping[i]`` (block ``slot // block_size``,
    position ``slot % block_size``) of each cache; negative slots are padding.

    Attributes
    ----------
    layout : KvCacheCfg
        The caches' layout: ND ``[num_blocks, block_size, num_heads, head_size]`` or NZ
        ``[num_blocks, num_heads * head_size // E, block_size, E]``. :attr:`geometry` has the sizes.
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
    derived : dict
        What later stages derived from the call's structure alone (as :class:`KvCacheArgs`'s).
    """

    OPERATION: ClassVar[str] = "ReshapeAndCacheOperation"
    FUNCTION: ClassVar[str] = "reshape_and_cache"
    INDEX_FIELDS: ClassVar[tuple[str, ...]] = ("slot_mapping",)

    layout: KvCacheCfg
    key: torch.Tensor
    value: torch.Tensor | None
    key_cache: torch.Tensor
    value_cache: torch.Tensor | None
    slot_mapping: torch.Tensor
    derived: dict[str, Any] = field(default_factory=dict)

    def written(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``(tokens, cache)`` per cache written: the key's, and the value's unless key-only."""
        if self.value is None or self.value_cache is None:
            return [(self.key, self.key_cache)]
        return [(self.key, self.key_cache), (self.value, self.value_cache)]

    def rows(self) -> Rows:
        """The token rows of each data tensor (the absent ones of the key-only mode have none)."""
        dim, what = self.geometry.row_dims
        rows: Rows = {}
        for (tokens, cache), name in zip(self.written(), ("key", "value")):
            rows[name] = (tokens, 1, "token rows (dims 1, 2)")
            rows[f"{name}_cache"] = (cache, dim, what)
        return rows


@dataclass(eq=False)
class ReshapeAndCachePlan:
    """A ``reshape_and_cache`` call with its slots checked.

    Attributes
    ----------
    args : ReshapeAndCacheArgs
        The call.
    slots : list of int
        ``[n]``, ``slot_mapping``'s values: each negative (padding: skipped) or below
        ``num_blocks * block_size``; a slot named twice takes the later token.
    """

    args: ReshapeAndCacheArgs
    slots: list[int]


# ----------------------------------------------------------------------------- block_copy, copy_blocks, swap_blocks


@dataclass(eq=False)
class BlockCopyArgs:
    """A ``block_copy`` or ``copy_blocks`` call, structure checked.

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
    derived : dict
        What later stages derived from the call's structure alone (as :class:`KvCacheArgs`'s).
    """

    OPERATION: ClassVar[str] = "BlockCopyOperation"
    FUNCTION: ClassVar[str] = "block_copy"
    INDEX_FIELDS: ClassVar[tuple[str, ...]] = ("src", "dst", "cum_sum")

    caches: tuple[torch.Tensor, ...]
    src: torch.Tensor
    dst: torch.Tensor
    cum_sum: torch.Tensor | None
    derived: dict[str, Any] = field(default_factory=dict)

    @property
    def device(self) -> torch.device:
        """The caches' device (the host for a call without caches)."""
        return self.caches[0].device if self.caches else torch.device("cpu")


@dataclass(eq=False)
class BlockCopyPlan:
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


@dataclass(eq=False)
class SwapBlocksPlan:
    """A checked ``swap_blocks`` call: block ``sources[i]`` of ``src`` to block ``destinations[i]`` of ``dst``
    (``block_mapping`` lives on the host, so its values are always read).

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
