"""Paged cache write: token ``i`` of ``key`` (and ``value``) into slot ``slots[i]`` of each cache, by the fastest way that applies.

Each cache is written on its own, by the first path that applies:

``native``
    Host tensors, the compiled copier built, the copied items contiguous and a multiple of 32
    bytes (ND token rows, NZ 32-byte fractal rows): one C call copies every token, one run
    each, to the slot as destination index (the copier skips the negative ones: padding).
``rows`` (ND only)
    The cache viewable as ``[num_blocks * block_size, row]``: one ``index_copy_`` with the
    slots as row numbers (padding dropped).
``general``
    Anything else (unaligned rows in strided caches, NZ without the copier): the device
    fallback (:func:`.on_device.reshape_and_cache`), one ``index_put_``, which honours any
    strides.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

from ascend_kv.api.params import KvCacheCfg
from ascend_kv.rules.forms import ReshapeAndCacheArgs, ReshapeAndCachePlan
from ascend_kv.rules.geometry import CacheGeometry

from . import native, on_device
from .strides import merged_rows, rows_contiguous
from .wide import bit_views, same_width_views

ND = KvCacheCfg.K_CACHE_V_CACHE_ND

#: Bytes written (both caches together) from which the copier streams them past the CPU caches
#: (see :func:`.native.copy_runs`): as with ``kv_cache``, the tokens land in a cache of many
#: steps and layers and are read back only by a later attention step.
STREAM_MIN_BYTES = 1 << 20


def paths(args: ReshapeAndCacheArgs) -> tuple[str, ...]:
    """The names of the paths :func:`reshape_and_cache` takes for the key cache (and the value cache)."""
    routes = _native_routes(args)
    return tuple("native" if route is not None else _other_path(args.layout, cache)
                 for route, (_, cache) in zip(routes, args.written()))


def reshape_and_cache(plan: ReshapeAndCachePlan) -> None:
    """Write ``key`` (and ``value``) into the caches in place, token ``i`` to slot ``plan.slots[i]``
    (each negative, padding: skipped, or in ``[0, num_blocks * block_size)``; a slot named twice
    takes the later token)."""
    slots, geometry = plan.slots, plan.args.geometry
    if not slots or geometry.capacity == 0:                                      # no slot to write
        return
    routes = _native_routes(plan.args)
    written = len(slots) * _token_bytes(plan.args)
    stream_min_bytes = 0 if written >= STREAM_MIN_BYTES else STREAM_MIN_BYTES    # both caches, or neither
    args = plan.args if all(routes) else bit_views(plan.args)
    for route, (tokens, cache) in zip(routes, args.written()):
        if route is not None:
            _native(route, tokens, cache, slots, geometry.block_size, stream_min_bytes)
        elif _other_path(args.layout, cache) == "rows":
            _rows(tokens, cache, slots)
        else:
            on_device.reshape_and_cache(ReshapeAndCacheArgs(args.layout, tokens, None, cache, None, args.slot_mapping))


class _NativeRoute(NamedTuple):
    """The copier's route for one cache written (a function of the call's structure)."""

    steps: native.Steps     #: ``dst_index`` in units of ``steps.dst_index`` bytes
    block_step: int         #: bytes per block of the cache
    slot_step: int          #: bytes per slot of a block
    slots_as_index: bool    #: blocks back to back in slot steps: a slot is its own ``dst_index``


def _native_routes(args: ReshapeAndCacheArgs) -> tuple[_NativeRoute | None, ...]:
    """Per cache written, the copier's route when it takes that cache, else None; what the
    structure decides is kept per call signature (``args.derived``)."""
    if not native.AVAILABLE:
        return (None,) * len(args.written())
    if "native" not in args.derived:
        args.derived["native"] = tuple(_native_route(args.geometry, row, tokens, cache)
                                       for row, (tokens, cache) in zip(_rows_of(args.geometry), args.written()))
    routes: tuple[_NativeRoute | None, ...] = args.derived["native"]
    return routes


def _native_route(geometry: CacheGeometry, row: tuple[int, ...], tokens: torch.Tensor, cache: torch.Tensor
                  ) -> _NativeRoute | None:
    """The route when the copier's items are contiguous in ``tokens`` and ``cache`` (one token ``row``),
    and whole 32-byte blocks."""
    nd = geometry.nd
    if not (tokens.is_cpu and cache.is_cpu and rows_contiguous(tokens)):
        return None
    if nd and not (_row_bytes(row, cache) % 32 == 0 and rows_contiguous(cache[:, 0])):
        return None
    if not nd and cache.stride(3) != 1:
        return None
    size = cache.element_size()
    block_step, slot_step = cache.stride(0) * size, cache.stride(geometry.slot_dim) * size
    slots_as_index = block_step == geometry.block_size * slot_step
    unit = slot_step if slots_as_index else math.gcd(block_step, slot_step) or 1
    row_step = tokens.stride(0) * size
    if nd:                                                                       # items: token rows
        steps = native.Steps(row_step, unit, 0, _row_bytes(row, cache), row_step, slot_step, 1, 0, 0)
    else:                                                                        # items: 32-byte fractal rows
        fractal = cache.shape[3] * size
        steps = native.Steps(row_step, unit, 0, fractal, row_step, slot_step, cache.shape[1], fractal,
                             cache.stride(1) * size)
    return _NativeRoute(steps, block_step, slot_step, slots_as_index)


def _other_path(layout: KvCacheCfg, cache: torch.Tensor) -> str:
    """The path for a cache the copier does not take."""
    return "rows" if layout == ND and merged_rows(cache) is not None else "general"


def _native(route: _NativeRoute, tokens: torch.Tensor, cache: torch.Tensor, slots: list[int], block_size: int,
            stream_min_bytes: int) -> None:
    """One run of one item per token: from ``tokens[i]`` to the address of slot ``slots[i]`` (none for padding)."""
    destination = slots if route.slots_as_index else _offsets(slots, block_size, route)
    native.copy_with(route.steps, tokens.data_ptr(), cache.data_ptr(), None, destination, None, stream_min_bytes)


def _rows(tokens: torch.Tensor, cache: torch.Tensor, slots: list[int]) -> None:
    """One ``index_copy_`` into the ``[num_blocks * block_size, row]`` view, slots as row numbers."""
    if min(slots) < 0:                                                           # padding
        values = np.asarray(slots, dtype=np.int64)
        kept = np.flatnonzero(values >= 0)                                       # tokens written
        index = torch.from_numpy(values[kept])
        source = tokens.index_select(0, torch.from_numpy(kept).to(tokens.device))
    else:
        index = torch.tensor(slots, dtype=torch.int64)
        source = tokens[: len(slots)]
    flat = merged_rows(cache)
    assert flat is not None  # _path() checked
    dst, src = same_width_views(flat, source.flatten(1))
    dst.index_copy_(0, index.to(cache.device), src)


def _offsets(slots: list[int], block_size: int, route: _NativeRoute) -> list[int]:
    """Each slot's byte offset in a cache whose blocks are strided apart (or NZ), in units of
    ``route.steps.dst_index`` (the steps' greatest common divisor, so aligned steps keep streaming
    possible), computed whole-array; padding stays negative, so the copier skips it."""
    unit = route.steps.dst_index
    values = np.asarray(slots, dtype=np.int64)
    blocks, positions = np.divmod(values, block_size)
    offsets = blocks * (route.block_step // unit) + positions * (route.slot_step // unit)
    result: list[int] = np.where(values >= 0, offsets, -1).tolist()
    return result


def _token_bytes(args: ReshapeAndCacheArgs) -> int:
    """Bytes one token writes into the caches together; kept per call signature (``args.derived``)."""
    if "token_bytes" not in args.derived:
        args.derived["token_bytes"] = sum(_row_bytes(row, cache)
                                          for row, (_, cache) in zip(_rows_of(args.geometry), args.written()))
    token_bytes: int = args.derived["token_bytes"]
    return token_bytes


def _rows_of(geometry: CacheGeometry) -> tuple[tuple[int, ...], ...]:
    """The token row of each cache written, as :meth:`ReshapeAndCacheArgs.written` orders them."""
    return (geometry.key_row, geometry.value_row)


def _row_bytes(row: tuple[int, ...], cache: torch.Tensor) -> int:
    return math.prod(row) * cache.element_size()
