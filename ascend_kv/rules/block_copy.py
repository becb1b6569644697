"""The rules of ``block_copy``, ``copy_blocks`` and ``swap_blocks`` (docs/semantics.md, "block_copy").

The same two steps as every operation (:mod:`ascend_kv.rules.forms`): structure ->
:class:`BlockCopyArgs` (types, dtypes, ranks, shapes, devices, aliasing), run on every call; index
values -> :class:`BlockCopyPlan` (blocks in range, ``cum_sum`` running ends, no block both a
source and a destination, no destination twice), run when the index tensors are on the host, or
with full validation. The value rules test whole lists at C speed (``min``, ``max``, ``set``,
``map``) and look for the entry to name only once a rule is broken. ``swap_blocks`` takes its
mapping on the host, so it is checked in one step. Nothing is written here.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence

import numpy as np
import torch

from . import common, memory
from .dtypes import CACHE_DTYPES, INDEX_DTYPES
from .forms import BlockCopyArgs, BlockCopyPlan, SwapBlocksPlan

_CACHE_DOC = ("a tensor [num_blocks, ...] of at least 2 dimensions (ND [num_blocks, block_size, num_heads, "
              "head_size] or NZ [num_blocks, T // E, block_size, E])")

#: How an entry of an index list is named in an error: ``name(i)`` for entry ``i``.
_Namer = Callable[[int], str]


def _cache(name: str, value: object, meta: bool) -> torch.Tensor:
    cache = common.require_tensor(name, value, allow_meta=meta)
    common.require_dtype(name, cache, CACHE_DTYPES)
    if cache.dim() < 2:
        raise ValueError(f"{name} must be {_CACHE_DOC}, got shape {tuple(cache.shape)}")
    common.require_writable(name, cache)
    return cache


def _require_caches_apart(caches: dict[str, torch.Tensor]) -> None:
    """``ValueError`` when two of the written caches may share a byte (which copy lands would be undefined).

    A sweep over the caches sorted by first address: only caches whose address ranges meet are
    compared (per-layer views of one buffer meet none but their neighbours), so many layers cost
    about one comparison each.
    """
    order = {name: k for k, name in enumerate(caches)}                   # errors name the earlier argument first
    spans = sorted((memory.memory_span(t), name) for name, t in caches.items() if t.numel())
    for k, ((_, end), name) in enumerate(spans):
        for (other_first, _), other in spans[k + 1:]:
            if other_first >= end:
                break
            first, second = sorted((name, other), key=order.__getitem__)
            memory.require_separate_outputs(first, caches[first], second, caches[second])


def _named_caches(pairs: Sequence[tuple[str, object]], meta: bool) -> dict[str, torch.Tensor]:
    """The caches checked one by one, then together: one device, one ``num_blocks``."""
    caches = {name: _cache(name, value, meta) for name, value in pairs}
    if caches:
        common.require_same_device(caches)
        (first_name, first), *rest = caches.items()
        for name, cache in rest:
            if cache.shape[0] != first.shape[0]:
                raise ValueError(f"{name}.shape[0] (num_blocks) = {cache.shape[0]} must equal "
                                 f"{first_name}.shape[0] = {first.shape[0]}")
    return caches


def _require_in_range(namer: _Namer, values: list[int], num_blocks: int, what: str) -> None:
    if values and (min(values) < 0 or max(values) >= num_blocks):
        i = next(i for i, v in enumerate(values) if not 0 <= v < num_blocks)
        raise ValueError(f"{namer(i)} = {values[i]} is out of range: {what} {num_blocks} blocks")


def _require_distinct(namer: _Namer, values: list[int]) -> None:
    if len(set(values)) != len(values):
        first: dict[int, int] = {}
        for j, v in enumerate(values):
            if v in first:
                raise ValueError(f"{namer(j)} = {v} repeats {namer(first[v])}: a block can be the destination "
                                 f"of one copy only")
            first[v] = j


def _pair_rules(src_name: _Namer, dst_name: _Namer, sources: list[int], destinations: list[int],
                num_blocks: int) -> None:
    """Blocks in range, destinations distinct, no block both a source and a destination."""
    _require_in_range(src_name, sources, num_blocks, "the caches hold")
    _require_in_range(dst_name, destinations, num_blocks, "the caches hold")
    _require_distinct(dst_name, destinations)
    both = set(sources).intersection(destinations)
    if both:
        j = next(j for j, d in enumerate(destinations) if d in both)
        i = sources.index(destinations[j])
        raise ValueError(
            f"{dst_name(j)} = {destinations[j]} is also a source ({src_name(i)}): a block cannot be both a source "
            f"and a destination, or the result would depend on the order of the copies"
        )


def _expanded_sources(sources: list[int], cum_sum: list[int], copies: int) -> list[int]:
    """``[copies]``: the source of each destination, after ``cum_sum``'s rules (running ends, the last ``copies``)."""
    if any(map(operator.gt, [0, *cum_sum[:-1]], cum_sum)):
        i = next(i for i, (before, end) in enumerate(zip([0, *cum_sum[:-1]], cum_sum)) if end < before)
        previous = f"cum_sum[{i - 1}] = {cum_sum[i - 1]}" if i else "0"
        raise ValueError(f"cum_sum[{i}] = {cum_sum[i]} is less than {previous}: cum_sum holds the running end of "
                         f"each source's destinations, so it never decreases")
    total = cum_sum[-1] if cum_sum else 0
    if total != copies:
        given = f"cum_sum[-1] = {total}" if cum_sum else "cum_sum is empty, which means 0 destinations"
        raise ValueError(f"{given}, but dst_block_indices has {copies} entries: cum_sum[-1] must equal "
                         f"len(dst_block_indices)")
    counts = np.diff(np.asarray([0, *cum_sum], dtype=np.int64)).astype(np.int64)
    expanded: list[int] = np.repeat(np.asarray(sources, dtype=np.int64), counts).tolist()
    return expanded


def block_copy_args(key_cache: object, value_cache: object, src_block_indices: object, dst_block_indices: object,
                    cum_sum: object, *, shapes_only: bool = False) -> BlockCopyArgs:
    """The rules of a ``block_copy`` call that need no index values; see :func:`ascend_kv.block_copy`.

    ``shapes_only``: fake or meta tensors (the memory-sharing rules are skipped, meta tensors
    allowed when ``key_cache`` is one).
    """
    meta = shapes_only and isinstance(key_cache, torch.Tensor) and key_cache.is_meta
    named = [("key_cache", key_cache)] + ([] if value_cache is None else [("value_cache", value_cache)])
    caches = _named_caches(named, meta)
    src = common.index_tensor("src_block_indices", src_block_indices, allow_meta=meta)
    dst = common.index_tensor("dst_block_indices", dst_block_indices, allow_meta=meta)
    ends = common.index_tensor("cum_sum", cum_sum, allow_meta=meta)
    common.require_entries("cum_sum", ends, src.shape[0], "one running end per source, len(src_block_indices)")
    common.require_index_devices(caches["key_cache"].device,
                                 {"src_block_indices": src, "dst_block_indices": dst, "cum_sum": ends})
    if not shapes_only:
        _require_caches_apart(caches)
    return BlockCopyArgs(tuple(caches.values()), src, dst, ends)


def block_copy_plan(args: BlockCopyArgs) -> BlockCopyPlan:
    """The rules of a ``block_copy`` call on its index values (read to the host, one transfer at most),
    its copies expanded per destination."""
    assert args.cum_sum is not None, "a block_copy call has cum_sum"
    sources, destinations, running_ends = common.host_values([args.src, args.dst, args.cum_sum])
    expanded = _expanded_sources(sources, running_ends, len(destinations))
    _pair_rules(lambda i: f"src_block_indices[{i}]", lambda j: f"dst_block_indices[{j}]", sources, destinations,
                args.caches[0].shape[0])
    return BlockCopyPlan(args, expanded, destinations)


def copy_blocks_args(key_caches: object, value_caches: object, block_mapping: object, *,
                     shapes_only: bool = False) -> BlockCopyArgs:
    """The rules of a ``copy_blocks`` call that need no index values; see :func:`ascend_kv.copy_blocks`."""
    layers = _cache_list("key_caches", key_caches)
    values = _cache_list("value_caches", value_caches)
    if values and len(values) != len(layers):
        raise ValueError(f"value_caches must have one cache per layer ({len(layers)}, as key_caches) or none "
                         f"(key-only caches), got {len(values)}")
    meta = shapes_only and bool(layers) and isinstance(layers[0], torch.Tensor) and layers[0].is_meta
    named = [(f"key_caches[{i}]", c) for i, c in enumerate(layers)] + [
        (f"value_caches[{i}]", c) for i, c in enumerate(values)]
    caches = _named_caches(named, meta)
    mapping = _block_mapping(block_mapping, meta)
    if caches:
        common.require_index_devices(next(iter(caches.values())).device, {"block_mapping": mapping})
    if not shapes_only:
        _require_caches_apart(caches)
    return BlockCopyArgs(tuple(caches.values()), mapping[:, 0], mapping[:, 1], None)


def copy_blocks_plan(args: BlockCopyArgs) -> BlockCopyPlan:
    """The rules of a ``copy_blocks`` call on its pairs (read to the host, one transfer at most)."""
    sources, destinations = common.host_values([args.src, args.dst])
    if args.caches:
        _pair_rules(lambda i: f"block_mapping[{i}, 0]", lambda j: f"block_mapping[{j}, 1]", sources, destinations,
                    args.caches[0].shape[0])
    return BlockCopyPlan(args, sources, destinations)


def _block_mapping(value: object, meta: bool) -> torch.Tensor:
    """vLLM's ``[n, 2]`` (src, dst) pairs, structure checked."""
    mapping = common.require_tensor("block_mapping", value, allow_meta=meta)
    common.require_dtype("block_mapping", mapping, INDEX_DTYPES)
    if mapping.dim() != 2 or mapping.shape[1] != 2:
        raise ValueError(f"block_mapping must be a 2-D tensor [n, 2] of (src, dst) pairs, got shape "
                         f"{tuple(mapping.shape)}")
    return mapping


def _cache_list(name: str, value: object) -> list[object]:
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{name} must be a list of tensors (one per layer), got {common.describe(value)}")
    return list(value)


def swap_blocks(src: object, dst: object, block_mapping: object, *, shapes_only: bool = False) -> SwapBlocksPlan:
    """Validate a ``swap_blocks`` call; see :func:`ascend_kv.swap_blocks`.

    ``block_mapping`` lives on the host, so its values are always read, except with
    ``shapes_only`` (fake or meta tensors), which returns empty lists.
    """
    meta = shapes_only and isinstance(src, torch.Tensor) and src.is_meta
    source = common.require_tensor("src", src, allow_meta=meta)
    common.require_dtype("src", source, CACHE_DTYPES)
    target = _cache("dst", dst, meta)
    if source.dim() < 2:
        raise ValueError(f"src must be {_CACHE_DOC}, got shape {tuple(source.shape)}")
    if source.dtype != target.dtype:
        raise TypeError(f"dst.dtype must equal src.dtype = {source.dtype}, got {target.dtype}")
    if tuple(source.shape[1:]) != tuple(target.shape[1:]):
        raise ValueError(f"dst.shape[1:] (one block) = {tuple(target.shape[1:])} must equal src.shape[1:] = "
                         f"{tuple(source.shape[1:])}")
    mapping = _block_mapping(block_mapping, meta)
    if not mapping.is_cpu and not meta:
        raise ValueError(f"block_mapping must be on the host (cpu), as vLLM keeps it, got {mapping.device}")
    if shapes_only:
        return SwapBlocksPlan(source, target, [], [])
    memory.require_apart("dst", target, {"src": source})
    (flat,) = common.host_values([mapping])
    sources, destinations = flat[0::2], flat[1::2]
    _require_in_range(lambda i: f"block_mapping[{i}, 0]", sources, source.shape[0], "src holds")
    _require_in_range(lambda i: f"block_mapping[{i}, 1]", destinations, target.shape[0], "dst holds")
    _require_distinct(lambda j: f"block_mapping[{j}, 1]", destinations)
    return SwapBlocksPlan(source, target, sources, destinations)
