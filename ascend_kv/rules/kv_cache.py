"""The rules of ``kv_cache`` (docs/semantics.md, "kv_cache"): structure -> :class:`KvCacheArgs`,
index values -> :class:`KvCachePlan`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch

from . import common, memory
from ._values import kv_cache as kv_cache_values
from .dtypes import CACHE_DTYPES
from .forms import KvCacheArgs, KvCachePlan
from .geometry import require_row_alignment
from .memo import Memo


@dataclass(frozen=True)
class _Structure:
    """What the structure rules derive from a call's signature."""

    flat_new_kv: bool      #: ``new_kv`` is 4-D, passed on as its ``[ntokens, hidden]`` view
    new_kv_extent: tuple[int, ...]  #: :func:`.memory.extents` of ``new_kv``
    past_extent: tuple[int, ...]


def _structure(new_kv: object, layer_id: object, past: object, token_offset: object, seq_len: object,
               shapes_only: bool = False) -> _Structure:
    """Every rule that needs no index value and no address. ``shapes_only``: fake or meta tensors
    (meta tensors allowed when ``past`` is one)."""
    meta = shapes_only and isinstance(past, torch.Tensor) and past.is_meta
    new_kv = common.require_tensor("new_kv", new_kv, allow_meta=meta)
    past = common.require_tensor("past", past, allow_meta=meta)
    common.require_dtype("past", past, CACHE_DTYPES)
    common.require_dtype("new_kv", new_kv, CACHE_DTYPES)
    if new_kv.dtype != past.dtype:
        raise TypeError(f"new_kv.dtype must equal past.dtype = {past.dtype}, got {new_kv.dtype}")
    common.require_ndim("past", past, (4,), "a 4-D tensor [layers, batch, max_seq_len, hidden]")
    common.require_ndim(
        "new_kv", new_kv, (2, 4), "a 2-D tensor [ntokens, hidden] or a 4-D tensor [batch, seq, heads, head_size]"
    )
    common.require_writable("past", past)
    layers, batch, _, hidden = past.shape
    require_row_alignment("past", hidden, past.dtype, "hidden (past.shape[3])")
    new_hidden = new_kv.shape[1] if new_kv.dim() == 2 else new_kv.shape[2] * new_kv.shape[3]
    if new_hidden != hidden:
        what = "new_kv.shape[1]" if new_kv.dim() == 2 else "new_kv.shape[2] * new_kv.shape[3]"
        raise ValueError(f"{what} = {new_hidden} must equal hidden = {hidden} (past.shape[3])")
    layer: int | torch.Tensor
    if isinstance(layer_id, torch.Tensor):
        layer = common.scalar_index_tensor("layer_id", layer_id, allow_meta=meta)
    else:
        layer = common.int_argument("layer_id", layer_id)
        require_layer_in_range(layer, layers)
    token_offset = common.index_tensor("token_offset", token_offset, allow_meta=meta)
    seq_len = common.index_tensor("seq_len", seq_len, allow_meta=meta)
    common.require_same_device({"past": past, "new_kv": new_kv})
    common.require_index_devices(past.device, {"token_offset": token_offset, "seq_len": seq_len, "layer_id": layer})
    common.require_entries("token_offset", token_offset, batch, "batch = past.shape[1]")
    common.require_entries("seq_len", seq_len, batch, "batch = past.shape[1]")
    if shapes_only:
        return _Structure(new_kv.dim() == 4, (0,), (0,))
    return _Structure(new_kv.dim() == 4, memory.extents(new_kv), memory.extents(past))


_structures = Memo(_structure, written=(2,))  # past


def args(new_kv: torch.Tensor, layer_id: int | torch.Tensor, past: torch.Tensor, token_offset: torch.Tensor,
         seq_len: torch.Tensor, *, shapes_only: bool = False) -> KvCacheArgs:
    """The rules of a ``kv_cache`` call that need no index values; see :func:`ascend_kv.kv_cache`.

    ``shapes_only``: the call only computes shapes (fake or meta tensors): the memory-sharing rule
    is skipped, and meta tensors are allowed when ``past`` is one.
    """
    derived, structure = _structures.checked((new_kv, layer_id, past, token_offset, seq_len), shapes_only)
    if not shapes_only and memory.written_ranges_meet((past,), structure.past_extent, (new_kv,),
                                                      structure.new_kv_extent):
        memory.require_apart("past", past, {"new_kv": new_kv})
    tokens = new_kv.reshape(-1, past.shape[3]) if structure.flat_new_kv else new_kv
    return KvCacheArgs(tokens, past, layer_id, token_offset, seq_len, derived)


def require_layer_in_range(layer: int, layers: int) -> None:
    """``ValueError`` unless ``0 <= layer < layers``."""
    if not 0 <= layer < layers:
        raise ValueError(f"layer_id = {layer} must be in [0, {layers}) (past.shape[0])")


def plan(args: KvCacheArgs) -> KvCachePlan:
    """The rules of a ``kv_cache`` call on its index values, read to the host (one transfer at most)."""
    offsets, lengths, layer_id = args.token_offset, args.seq_len, args.layer_id
    layer = layer_id if isinstance(layer_id, int) else 0
    if isinstance(layer_id, torch.Tensor) or not (offsets.is_cpu and lengths.is_cpu):
        host = common.host_tensors([offsets, lengths, args.layer_tensor()])
        offsets, lengths, layer_on_host = cast(torch.Tensor, host[0]), cast(torch.Tensor, host[1]), host[2]
        if layer_on_host is not None:
            layer = int(layer_on_host.item())  # a host tensor now: no transfer
            require_layer_in_range(layer, args.past.shape[0])
    seq_len, read_start, write_start = kv_cache_values(offsets, lengths, args.new_kv.shape[0], args.past.shape[2])
    return KvCachePlan(args, layer, seq_len, read_start, write_start)


def check(new_kv: torch.Tensor, layer_id: int | torch.Tensor, past: torch.Tensor, token_offset: torch.Tensor,
          seq_len: torch.Tensor) -> KvCachePlan:
    """Every rule of a ``kv_cache`` call, values included; see :func:`ascend_kv.kv_cache`."""
    return plan(args(new_kv, layer_id, past, token_offset, seq_len))
