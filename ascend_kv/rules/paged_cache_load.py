"""The rules of ``paged_cache_load`` (docs/semantics.md, "paged_cache_load"): structure ->
:class:`PagedLoadArgs`, index values -> :class:`PagedLoadPlan`.

The outputs are the operator's to allocate (:mod:`ascend_kv.operators.library`), after every
rule has passed: :func:`args` takes them given or None, :func:`plan` says how many rows they need.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from . import common, memory
from ._values import paged_cache_load as paged_cache_load_values
from .dtypes import CACHE_DTYPES
from .forms import PagedLoadArgs, PagedLoadPlan
from .geometry import NZ, CacheGeometry, kv_cache_cfg_argument, read_geometry
from .memo import Memo


@dataclass(frozen=True)
class _Structure:
    """What the structure rules derive from a call's signature."""

    geometry: CacheGeometry
    cache_extents: tuple[int, ...]   #: :func:`.memory.extents` of key_cache, value_cache
    output_extents: tuple[int, ...]  #: of key, value (0: absent)


def _structure(key_cache: object, value_cache: object, block_table: object, context_lens: object,
               kv_cache_cfg: object, cumsum: object, seq_starts: object, key: object, value: object,
               zero_fill: object, shapes_only: bool = False) -> _Structure:
    """Every rule that needs no index value and no address. ``shapes_only``: fake or meta tensors
    (meta tensors allowed when ``key_cache`` is one)."""
    layout = kv_cache_cfg_argument(kv_cache_cfg)
    cumsum = common.bool_argument("cumsum", cumsum)
    common.bool_argument("zero_fill", zero_fill)
    meta = shapes_only and isinstance(key_cache, torch.Tensor) and key_cache.is_meta
    key_cache = common.require_tensor("key_cache", key_cache, allow_meta=meta)
    value_cache = common.require_tensor("value_cache", value_cache, allow_meta=meta)
    common.require_dtype("key_cache", key_cache, CACHE_DTYPES)
    common.require_dtype("value_cache", value_cache, CACHE_DTYPES)
    if layout == NZ and cumsum:
        raise ValueError("cumsum=True is not supported with kv_cache_cfg = NZ (ATB rejects it): use ND")
    if layout == NZ and seq_starts is not None:
        raise ValueError("seq_starts is not supported with kv_cache_cfg = NZ (ATB rejects it): use ND")
    geometry = read_geometry(layout, key_cache, value_cache)
    table = common.index_tensor("block_table", block_table, ndim=2, allow_meta=meta)
    lens = common.index_tensor("context_lens", context_lens, allow_meta=meta)
    batch = table.shape[0]
    if cumsum:
        common.require_entries("context_lens", lens, batch + 1, "batch + 1 in cumsum mode, batch = block_table.shape[0]")
    else:
        common.require_entries("context_lens", lens, batch, "batch = block_table.shape[0]")
    starts = None
    if seq_starts is not None:
        starts = common.index_tensor("seq_starts", seq_starts, allow_meta=meta)
        common.require_entries("seq_starts", starts, batch, "batch = block_table.shape[0]")
    outputs = {name: out for name, out in (("key", key), ("value", value)) if isinstance(out, torch.Tensor)}
    device = common.require_same_device({"key_cache": key_cache, "value_cache": value_cache, **outputs})
    common.require_index_devices(device, {"block_table": table, "context_lens": lens, "seq_starts": starts})
    for name, out, cache, row in (("key", key, key_cache, geometry.key_row), ("value", value, value_cache, geometry.value_row)):
        if out is not None:
            out = common.require_tensor(name, out, allow_meta=meta)
            _require_output(name, out, cache, row, lambda: None if shapes_only else _rows_on_host(lens, cumsum))
    if shapes_only:
        return _Structure(geometry, (0, 0), (0, 0))
    return _Structure(geometry, memory.extents(key_cache, value_cache), memory.extents(key, value))


def _require_output(name: str, out: torch.Tensor, cache: torch.Tensor, row: tuple[int, ...],
                    rows: Callable[[], int | None]) -> None:
    """The rules of a given output that need no index value (its row count is checked by :func:`plan`;
    ``rows()``, the rows it needs when known, is only for the message)."""
    if out.dtype != cache.dtype:
        raise TypeError(f"{name}.dtype must equal {name}_cache.dtype = {cache.dtype}, got {out.dtype}")
    if tuple(out.shape[1:]) != row or out.dim() != 1 + len(row):
        raise ValueError(f"{name} must have shape {_output_shape_doc(row, rows())}, got {tuple(out.shape)}")
    common.require_writable(name, out)


def _rows_on_host(context_lens: torch.Tensor, cumsum: bool) -> int | None:
    """The rows the outputs need, when ``context_lens`` is on the host and valid; else None."""
    if not context_lens.is_cpu:
        return None
    values: list[int] = context_lens.tolist()
    if min(values, default=0) < 0 or (cumsum and not values):
        return None
    return values[-1] if cumsum else sum(values)


def _output_shape_doc(row: tuple[int, ...], rows: int | None) -> str:
    return f"[rows{'' if rows is None else f' >= {rows}'}, {', '.join(map(str, row))}]"


_structures = Memo(_structure, written=(7, 8))  # key, value


def args(key_cache: torch.Tensor, value_cache: torch.Tensor, block_table: torch.Tensor, context_lens: torch.Tensor,
         kv_cache_cfg: object = NZ, cumsum: bool = False, seq_starts: torch.Tensor | None = None,
         zero_fill: bool = False, *, key: torch.Tensor | None = None, value: torch.Tensor | None = None,
         shapes_only: bool = False) -> PagedLoadArgs:
    """The rules of a ``paged_cache_load`` call that need no index values; see
    :func:`ascend_kv.paged_cache_load`. The options in the operator's order; ``key``/``value``:
    the outputs, or None to allocate.

    ``shapes_only``: the call only computes shapes (fake or meta tensors): the memory-sharing
    rules are skipped, and meta tensors are allowed when ``key_cache`` is one.
    """
    arguments = (key_cache, value_cache, block_table, context_lens, kv_cache_cfg, cumsum, seq_starts, key, value,
                 zero_fill)
    derived, structure = _structures.checked(arguments, shapes_only)
    if not shapes_only:
        _require_outputs_apart(key_cache, value_cache, key, value, structure)
    args = PagedLoadArgs(structure.geometry.layout, key_cache, value_cache, block_table, context_lens, seq_starts,
                         bool(cumsum), key, value, bool(zero_fill), derived)
    args.geometry = structure.geometry  # checked, so the Args need not read it again
    return args


def _require_outputs_apart(key_cache: torch.Tensor, value_cache: torch.Tensor, key: torch.Tensor | None,
                           value: torch.Tensor | None, structure: _Structure) -> None:
    """Each given output apart from both caches, and the two outputs apart (the full rules only
    where address ranges meet)."""
    if not memory.written_ranges_meet((key, value), structure.output_extents, (key_cache, value_cache),
                                      structure.cache_extents):
        return
    caches = {"key_cache": key_cache, "value_cache": value_cache}
    for name, out in (("key", key), ("value", value)):
        if out is not None:
            memory.require_apart(name, out, caches)
    if key is not None and value is not None:
        memory.require_separate_outputs("key", key, "value", value)


def plan(args: PagedLoadArgs) -> PagedLoadPlan:
    """The rules of a ``paged_cache_load`` call on its index values, read to the host (one transfer at
    most), and the rows its outputs need. With ``zero_fill`` block-table entries are not checked
    (tokens with a missing column or an invalid block id load zeros): the plan's ``blocks`` are then
    empty, and only the backends that take the Args run it."""
    table = None if args.zero_fill else args.block_table
    lens, starts, table = common.host_tensors([args.context_lens, args.seq_starts, table])
    geometry = args.geometry
    blocks, lens_read, out_start, first_column, end_row = paged_cache_load_values(
        lens, starts, table, args.cumsum, geometry.block_size, geometry.num_blocks)
    for name, out, row in (("key", args.key, geometry.key_row), ("value", args.value, geometry.value_row)):
        if out is not None and out.shape[0] < end_row:
            raise ValueError(f"{name} must have shape {_output_shape_doc(row, end_row)}, got {tuple(out.shape)}")
    return PagedLoadPlan(args, blocks, lens_read, out_start, first_column, end_row)


def check(key_cache: torch.Tensor, value_cache: torch.Tensor, block_table: torch.Tensor, context_lens: torch.Tensor,
          **options: object) -> PagedLoadPlan:
    """Every rule of a ``paged_cache_load`` call into given outputs (``key=``, ``value=``), values
    included; see :func:`ascend_kv.paged_cache_load`."""
    return plan(args(key_cache, value_cache, block_table, context_lens, **options))  # type: ignore[arg-type]
