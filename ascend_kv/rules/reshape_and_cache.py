"""The rules of ``reshape_and_cache`` (docs/semantics.md, "reshape_and_cache"): structure ->
:class:`ReshapeAndCacheArgs`, slot values -> :class:`ReshapeAndCachePlan`."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import common, memory
from .dtypes import CACHE_DTYPES
from .forms import ReshapeAndCacheArgs, ReshapeAndCachePlan
from .geometry import ND, CacheGeometry, require_cache_ndim, reshape_and_cache_cfg_argument, write_geometry
from .memo import Memo


@dataclass(frozen=True)
class _Structure:
    """What the structure rules derive from a call's signature."""

    geometry: CacheGeometry
    cache_extents: tuple[int, ...]  #: :func:`.memory.extents` of key_cache, value_cache (0: key-only)
    token_extents: tuple[int, ...]  #: of key, value (0: key-only)


def _structure(key: object, value: object, key_cache: object, value_cache: object, slot_mapping: object,
               kv_cache_cfg: object, shapes_only: bool = False) -> _Structure:
    """Every rule that needs no index value and no address. ``shapes_only``: fake or meta tensors
    (meta tensors allowed when ``key_cache`` is one)."""
    layout, _ = reshape_and_cache_cfg_argument(kv_cache_cfg)
    meta = shapes_only and isinstance(key_cache, torch.Tensor) and key_cache.is_meta
    key = common.require_tensor("key", key, allow_meta=meta)
    key_cache = common.require_tensor("key_cache", key_cache, allow_meta=meta)
    if (value is None) != (value_cache is None):
        given, missing = ("value", "value_cache") if value_cache is None else ("value_cache", "value")
        raise ValueError(f"{missing} is None but {given} is given: pass both, or neither for the key-only mode")
    if value is None and layout != ND:
        raise ValueError("the key-only mode (value and value_cache None) is ND only, got kv_cache_cfg = NZ")
    written = [("key", key, key_cache)]
    if value is not None:
        written.append(("value", common.require_tensor("value", value, allow_meta=meta),
                        common.require_tensor("value_cache", value_cache, allow_meta=meta)))
    for name, tokens, cache in written:
        common.require_dtype(f"{name}_cache", cache, CACHE_DTYPES)
        if tokens.dtype != cache.dtype:
            raise TypeError(f"{name}.dtype must equal {name}_cache.dtype = {cache.dtype}, got {tokens.dtype}")
        common.require_ndim(name, tokens, (3,), f"a 3-D tensor [num_tokens, num_heads, head_size_{name[0]}]")
        require_cache_ndim(f"{name}_cache", cache, layout)
    if len(written) == 2:
        value_tokens = written[1][1]
        for i, what in ((0, "num_tokens"), (1, "num_heads")):
            if value_tokens.shape[i] != key.shape[i]:
                raise ValueError(f"value.shape[{i}] ({what}) = {value_tokens.shape[i]} must equal "
                                 f"key.shape[{i}] = {key.shape[i]}")
    geometry = write_geometry(layout, written)
    slots = common.index_tensor("slot_mapping", slot_mapping, allow_meta=meta)
    if slots.shape[0] > key.shape[0]:
        raise ValueError(f"slot_mapping has {slots.shape[0]} entries, more than num_tokens = {key.shape[0]} "
                         f"(key.shape[0]): at most one slot per token")
    device = common.require_same_device({name: t for pair in written
                                         for name, t in ((pair[0], pair[1]), (f"{pair[0]}_cache", pair[2]))})
    common.require_index_devices(device, {"slot_mapping": slots})
    for name, _, cache in written:
        common.require_writable(f"{name}_cache", cache)
    if shapes_only:
        return _Structure(geometry, (0, 0), (0, 0))
    value_pair = len(written) == 2
    return _Structure(geometry, memory.extents(key_cache, value_cache if value_pair else None),
                      memory.extents(key, value if value_pair else None))


_structures = Memo(_structure, written=(2, 3))  # key_cache, value_cache


def args(key: torch.Tensor, value: torch.Tensor | None, key_cache: torch.Tensor, value_cache: torch.Tensor | None,
         slot_mapping: torch.Tensor, kv_cache_cfg: object = "nd", *, shapes_only: bool = False) -> ReshapeAndCacheArgs:
    """The rules of a ``reshape_and_cache`` call that need no index values; see :func:`ascend_kv.reshape_and_cache`.

    ``shapes_only``: the call only computes shapes (fake or meta tensors): the memory-sharing
    rules are skipped, and meta tensors are allowed when ``key_cache`` is one.
    """
    arguments = (key, value, key_cache, value_cache, slot_mapping, kv_cache_cfg)
    derived, structure = _structures.checked(arguments, shapes_only)
    if not shapes_only:
        _require_caches_apart(key, value, key_cache, value_cache, structure)
    args = ReshapeAndCacheArgs(structure.geometry.layout, key, value, key_cache, value_cache, slot_mapping, derived)
    args.geometry = structure.geometry  # checked, so the Args need not read it again
    return args


def _require_caches_apart(key: torch.Tensor, value: torch.Tensor | None, key_cache: torch.Tensor,
                          value_cache: torch.Tensor | None, structure: _Structure) -> None:
    """Each cache apart from the tokens the call reads, and the two caches apart (the full rules
    only where address ranges meet)."""
    if not memory.written_ranges_meet((key_cache, value_cache), structure.cache_extents, (key, value),
                                      structure.token_extents):
        return
    if value is None or value_cache is None:
        memory.require_apart("key_cache", key_cache, {"key": key})
        return
    memory.require_apart("key_cache", key_cache, {"key": key, "value": value})
    memory.require_apart("value_cache", value_cache, {"key": key, "value": value})
    memory.require_separate_outputs("key_cache", key_cache, "value_cache", value_cache)


def plan(args: ReshapeAndCacheArgs) -> ReshapeAndCachePlan:
    """The rule of a ``reshape_and_cache`` call on its slots, read to the host (one transfer at most)."""
    slots: list[int] = args.slot_mapping.tolist() if args.slot_mapping.is_cpu else common.host_values([args.slot_mapping])[0]
    capacity = args.geometry.capacity
    if max(slots, default=-1) >= capacity:
        i = next(i for i, s in enumerate(slots) if s >= capacity)
        raise ValueError(
            f"slot_mapping[{i}] = {slots[i]} is out of range: the caches hold {capacity} slots "
            f"(num_blocks {args.geometry.num_blocks} x block_size {args.geometry.block_size})"
        )
    return ReshapeAndCachePlan(args, slots)


def check(key: torch.Tensor, value: torch.Tensor | None, key_cache: torch.Tensor, value_cache: torch.Tensor | None,
          slot_mapping: torch.Tensor, *, kv_cache_cfg: object = "nd") -> ReshapeAndCachePlan:
    """Every rule of a ``reshape_and_cache`` call, values included; see :func:`ascend_kv.reshape_and_cache`."""
    return plan(args(key, value, key_cache, value_cache, slot_mapping, kv_cache_cfg=kv_cache_cfg))
