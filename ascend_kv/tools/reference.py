"""The operations as docs/semantics.md states them (Huawei's pseudo-code, literally): plain loops, one row at a time.

This is the oracle every backend is tested against, bit for bit. It is slow on purpose and
never on the hot path. It assumes valid arguments (the tests pass it the same arguments
they pass the backends after those were accepted).
"""

from __future__ import annotations

import ctypes
import math

import torch

from ..api.params import KvCacheCfg


def kv_cache(
    new_kv: torch.Tensor,
    layer_id: int | torch.Tensor,
    past: torch.Tensor,
    token_offset: torch.Tensor,
    seq_len: torch.Tensor,
) -> torch.Tensor:
    """KVCacheOperation's pseudo-code; writes ``past`` in place and returns it.

    ``new_kv`` ``[ntokens, hidden]`` or ``[b, s, heads, head_size]``; ``past``
    ``[layers, batch, max_seq_len, hidden]``; ``token_offset``, ``seq_len`` ``[batch]``.
    """
    newkv = new_kv.reshape(-1, past.shape[-1])
    layer = int(layer_id)
    batch = past.shape[1]
    prefix_ntokens = 0
    for i in range(batch):
        for j in range(int(seq_len[i])):
            past[layer][i][int(token_offset[i]) - int(seq_len[i]) + j][:] = newkv[prefix_ntokens + j][:]
        prefix_ntokens += int(seq_len[i])
    return past


def _token(cache: torch.Tensor, blk: int, slot: int, layout: KvCacheCfg) -> torch.Tensor:
    """Token ``(blk, slot)`` of a cache: ``[num_heads, head_size]`` (ND) or ``[T]`` (NZ)."""
    if layout == KvCacheCfg.K_CACHE_V_CACHE_ND:
        return cache[blk, slot]
    return cache[blk, :, slot, :].reshape(-1)


def paged_cache_load(
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    context_lens: torch.Tensor,
    *,
    kv_cache_cfg: KvCacheCfg | int = KvCacheCfg.K_CACHE_V_CACHE_NZ,
    cumsum: bool = False,
    seq_starts: torch.Tensor | None = None,
    key: torch.Tensor | None = None,
    value: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PagedCacheLoadOperation's semantics (docs/semantics.md §4), one token at a time.

    Outputs are written in place when given, else allocated zero-filled with
    ``sum(context_lens)`` rows (``context_lens[-1]`` in cumsum mode).
    """
    layout = KvCacheCfg(int(kv_cache_cfg))
    batch = block_table.shape[0]
    if cumsum:
        lens = [int(context_lens[b + 1]) - int(context_lens[b]) for b in range(batch)]
        out_start = [int(context_lens[b]) for b in range(batch)]
        num_tokens = int(context_lens[-1])
    else:
        lens = [int(n) for n in context_lens]
        out_start = [sum(lens[:b]) for b in range(batch)]
        num_tokens = sum(lens)
    key_row: tuple[int, ...]
    value_row: tuple[int, ...]
    if layout == KvCacheCfg.K_CACHE_V_CACHE_ND:
        key_row, value_row = tuple(key_cache.shape[2:]), tuple(value_cache.shape[2:])
    else:
        key_row = (key_cache.shape[1] * key_cache.shape[3],)
        value_row = (value_cache.shape[1] * value_cache.shape[3],)
    if key is None:
        key = torch.zeros((num_tokens, *key_row), dtype=key_cache.dtype)
    if value is None:
        value = torch.zeros((num_tokens, *value_row), dtype=value_cache.dtype)
    block_size = key_cache.shape[1] if layout == KvCacheCfg.K_CACHE_V_CACHE_ND else key_cache.shape[2]
    for b in range(batch):
        col0 = int(seq_starts[b]) // block_size if seq_starts is not None else 0
        for j in range(lens[b]):
            blk = int(block_table[b, col0 + j // block_size])
            key[out_start[b] + j] = _token(key_cache, blk, j % block_size, layout)
            value[out_start[b] + j] = _token(value_cache, blk, j % block_size, layout)
    return key, value


def _put(cache: torch.Tensor, blk: int, slot: int, row: torch.Tensor, layout: KvCacheCfg) -> None:
    """Write ``row`` to token ``(blk, slot)`` of a cache: the inverse of :func:`_token`."""
    if layout == KvCacheCfg.K_CACHE_V_CACHE_ND:
        cache[blk, slot] = row
    else:
        cache[blk, :, slot, :] = row.reshape(cache.shape[1], cache.shape[3])


def reshape_and_cache(
    key: torch.Tensor,
    value: torch.Tensor | None,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor | None,
    slot_mapping: torch.Tensor,
    *,
    kv_cache_cfg: KvCacheCfg | str = "nd",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """ReshapeAndCacheOperation's semantics (docs/semantics.md §5), one token at a time.

    ``key`` ``[num_tokens, num_heads, head_size_k]``, ``value`` likewise or None (key only);
    caches ND ``[num_blocks, block_size, num_heads, head_size]`` or NZ
    ``[num_blocks, T // E, block_size, E]``; ``slot_mapping`` ``[n]``, ``n <= num_tokens``.
    ``kv_cache_cfg`` is ``"nd"``, ``"nz"`` or a :class:`KvCacheCfg`. Writes the caches in place
    and returns them.
    """
    if isinstance(kv_cache_cfg, str):
        layout = {"nd": KvCacheCfg.K_CACHE_V_CACHE_ND, "nz": KvCacheCfg.K_CACHE_V_CACHE_NZ}[kv_cache_cfg.lower()]
    else:
        layout = KvCacheCfg(kv_cache_cfg)
    block_size = key_cache.shape[1] if layout == KvCacheCfg.K_CACHE_V_CACHE_ND else key_cache.shape[2]
    for i in range(slot_mapping.shape[0]):
        s = int(slot_mapping[i])
        if s < 0:
            continue
        blk, slot = s // block_size, s % block_size
        _put(key_cache, blk, slot, key[i], layout)
        if value is not None and value_cache is not None:
            _put(value_cache, blk, slot, value[i], layout)
    return key_cache, value_cache


def block_copy(
    key_cache: torch.Tensor,
    value_cache: torch.Tensor | None,
    src_block_indices: torch.Tensor,
    dst_block_indices: torch.Tensor,
    cum_sum: torch.Tensor,
) -> None:
    """BlockCopyOperation's pseudo-code; writes the caches ``[num_blocks, ...]`` in place."""
    start = 0
    for i in range(len(src_block_indices)):
        for j in range(start, int(cum_sum[i])):
            key_cache[int(dst_block_indices[j])] = key_cache[int(src_block_indices[i])]
            if value_cache is not None:
                value_cache[int(dst_block_indices[j])] = value_cache[int(src_block_indices[i])]
        start = int(cum_sum[i])


def copy_blocks(key_caches: list[torch.Tensor], value_caches: list[torch.Tensor], block_mapping: torch.Tensor) -> None:
    """vLLM's ``copy_blocks``: each ``(src, dst)`` pair of ``block_mapping`` ``[n, 2]`` in every layer's caches."""
    for cache in [*key_caches, *value_caches]:
        for src, dst in block_mapping.tolist():
            cache[dst] = cache[src]


def copy_pairs(src_block_indices: torch.Tensor, dst_block_indices: torch.Tensor,
               cum_sum: torch.Tensor) -> list[tuple[int, int]]:
    """``block_copy``'s ``(source, destination)`` pairs: ``src[i]`` to ``dst[cum_sum[i-1]:cum_sum[i]]``."""
    src, dst, ends = src_block_indices.tolist(), dst_block_indices.tolist(), cum_sum.tolist()
    return [(src[i], dst[j]) for i in range(len(src)) for j in range(ends[i - 1] if i else 0, ends[i])]


def simultaneous_copy(caches: list[torch.Tensor], pairs: list[tuple[int, int]]) -> None:
    """docs/semantics.md §11.1: in each distinct cache (identical views once), every in-range pair's source
    block read first, then written to its destination; out-of-range pairs skipped."""
    distinct: list[torch.Tensor] = []
    for cache in caches:
        if not any(_identical(cache, kept) for kept in distinct):
            distinct.append(cache)
    for cache in distinct:
        n = cache.shape[0]
        ok = [(s, d) for s, d in pairs if 0 <= s < n and 0 <= d < n]
        snap = [cache[s].clone() for s, _ in ok]
        for (_, d), block in zip(ok, snap):
            cache[d] = block


def _identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.device, a.data_ptr(), a.dtype, a.shape, a.stride()) == (b.device, b.data_ptr(), b.dtype, b.shape,
                                                                       b.stride())


def swap_blocks_bytes(src: torch.Tensor, dst: torch.Tensor, block_size_in_bytes: int,
                      block_mapping: torch.Tensor) -> None:
    """vLLM's 4-argument ``swap_blocks``: bytes ``[s*B, (s+1)*B)`` of ``src`` to ``[d*B, (d+1)*B)`` of ``dst``."""
    b = block_size_in_bytes
    sb, db = src.reshape(-1).view(torch.uint8), dst.reshape(-1).view(torch.uint8)
    for s, d in block_mapping.tolist():
        db[d * b:(d + 1) * b] = sb[s * b:(s + 1) * b].to(db.device)


def swap_blocks_batch(src_ptrs: torch.Tensor, dst_ptrs: torch.Tensor, sizes: torch.Tensor) -> None:
    """vLLM's ``swap_blocks_batch`` on host memory: ``memcpy(dst_ptrs[i], src_ptrs[i], sizes[i])`` for each ``i``."""
    for s, d, n in zip(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist()):
        ctypes.memmove(d, s, n)


def swap_blocks(src: torch.Tensor, dst: torch.Tensor, block_mapping: torch.Tensor) -> None:
    """vLLM's ``swap_blocks``: block ``block_mapping[i, 0]`` of ``src`` to block ``block_mapping[i, 1]`` of ``dst``."""
    for s, d in block_mapping.tolist():
        dst[d] = src[s].to(dst.device)


def _to_nd(x: torch.Tensor, layout: str, heads: int, head_size: int, head_splits: int = 1) -> torch.Tensor:
    """One block in ``layout`` (``"nd"`` with ``head_splits``) as ND ``[bs, H, D]`` (docs/semantics.md §12)."""
    if layout == "hnd":
        return x.transpose(0, 1)
    if layout == "nz":
        return x.permute(1, 0, 2).reshape(x.shape[1], heads, head_size)
    if head_splits > 1:
        return x.permute(1, 0, 2, 3).reshape(x.shape[1], heads, head_size)
    return x


def _from_nd(y: torch.Tensor, layout: str, head_splits: int = 1) -> torch.Tensor:
    """An ND block ``[bs, H, D]`` in ``layout`` (the inverse of :func:`_to_nd`)."""
    bs, heads, head_size = y.shape
    if layout == "hnd":
        return y.transpose(0, 1)
    if layout == "nz":
        e = 32 // y.element_size()
        return y.reshape(bs, heads * head_size // e, e).permute(1, 0, 2)
    if head_splits > 1:
        return y.reshape(bs, head_splits, heads // head_splits, head_size).permute(1, 0, 2, 3)
    return y


def _heads(cache_block: torch.Size, cache_layout: str, buffer_block: torch.Size, buffer_layout: str,
           head_splits: int) -> tuple[int, int]:
    """(H, D) of a block: from the side not in NZ (both NZ: ``T // E`` rows of ``E``)."""
    if cache_layout == "nd":
        return cache_block[1], cache_block[2]
    if cache_layout == "hnd":
        return cache_block[0], cache_block[2]
    if buffer_layout == "hnd":
        return buffer_block[0], buffer_block[2]
    if buffer_layout == "nd":
        return (buffer_block[2] * head_splits, buffer_block[3]) if head_splits > 1 else (buffer_block[1], buffer_block[2])
    return cache_block[0], cache_block[2]


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def gather_blocks(key_caches: list[torch.Tensor], value_caches: list[torch.Tensor], block_ids: torch.Tensor,
                  out: torch.Tensor, *, cache_layout: str = "nd", out_layout: str = "nd",
                  head_splits: int = 1) -> torch.Tensor:
    """docs/semantics.md §12's gather: ``out[kv, layer, j]`` = block ``block_ids[j]`` relaid out (out-of-range skipped)."""
    bits = _bits(out)
    for kv, caches in enumerate([key_caches] + ([value_caches] if value_caches else [])):
        for layer, cache in enumerate(caches):
            heads, head_size = _heads(cache.shape[1:], cache_layout, out.shape[3:], out_layout, head_splits)
            for j, b in enumerate(block_ids.tolist()):
                if not 0 <= b < cache.shape[0]:
                    continue
                nd = _to_nd(_bits(cache)[b], cache_layout, heads, head_size)
                bits[kv, layer, j] = _from_nd(nd, out_layout, head_splits).to(out.device)
    return out


def scatter_blocks(src: torch.Tensor, key_caches: list[torch.Tensor], value_caches: list[torch.Tensor],
                   block_ids: torch.Tensor, *, src_layout: str = "nd", cache_layout: str = "nd",
                   head_splits: int = 1) -> None:
    """docs/semantics.md §12's scatter: block ``block_ids[j]`` = ``src[kv, layer, j]`` relaid out (out-of-range skipped)."""
    bits = _bits(src)
    for kv, caches in enumerate([key_caches] + ([value_caches] if value_caches else [])):
        for layer, cache in enumerate(caches):
            heads, head_size = _heads(cache.shape[1:], cache_layout, src.shape[3:], src_layout, head_splits)
            for j, b in enumerate(block_ids.tolist()):
                if not 0 <= b < cache.shape[0]:
                    continue
                nd = _to_nd(bits[kv, layer, j], src_layout, heads, head_size, head_splits)
                _bits(cache)[b] = _from_nd(nd, cache_layout).to(cache.device)


# Hybrid models' state caches (docs/semantics.md §14): slot by slot, byte ranges by memmove.


def copy_state_slots(states: list[torch.Tensor], src_indices: torch.Tensor, dst_indices: torch.Tensor,
                     simultaneous: bool = False) -> None:
    """docs/semantics.md §14.1: slot ``src[i]`` to slot ``dst[i]`` of every state (identical views once); a
    pair with an index outside ``[0, num_slots)`` (padding: negative) skipped; simultaneous: sources read first."""
    pairs = list(zip(src_indices.tolist(), dst_indices.tolist()))
    if simultaneous:
        simultaneous_copy(states, pairs)
        return
    distinct: list[torch.Tensor] = []
    for state in states:
        if not any(_identical(state, kept) for kept in distinct):
            distinct.append(state)
    for state in distinct:
        for s, d in pairs:
            if 0 <= s < state.shape[0] and 0 <= d < state.shape[0]:
                state[d] = state[s]


def in_memory_order(state: torch.Tensor) -> torch.Tensor:
    """``state`` with dims 1.. ordered by decreasing stride (a stable sort): a slot's elements by address."""
    strides = state.stride()
    order = [0, *sorted(range(1, state.dim()), key=lambda d: -strides[d])]
    return state.permute(order)


def _slot_bytes(state: torch.Tensor, slot: int) -> torch.Tensor:
    """The bytes of one slot of ``state`` in the order of their addresses."""
    return _bits(in_memory_order(state)[slot].contiguous()).reshape(-1).view(torch.uint8)


def gather_state_slots(states: list[torch.Tensor], slot_ids: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """docs/semantics.md §14.2: row ``j`` of ``out`` the bytes of slot ``slot_ids[j]`` of each state in turn
    (by address); an id outside ``[0, num_slots)`` leaves its row."""
    for j, slot in enumerate(slot_ids.tolist()):
        if not states or not 0 <= slot < states[0].shape[0]:
            continue
        at = 0
        for state in states:
            piece = _slot_bytes(state, slot)
            out[j, at:at + piece.numel()] = piece.to(out.device)
            at += piece.numel()
    return out


def scatter_state_slots(src: torch.Tensor, states: list[torch.Tensor], slot_ids: torch.Tensor) -> None:
    """docs/semantics.md §14.2: the inverse of :func:`gather_state_slots`."""
    for j, slot in enumerate(slot_ids.tolist()):
        if not states or not 0 <= slot < states[0].shape[0]:
            continue
        at = 0
        for state in states:
            ordered = in_memory_order(state)
            size = ordered[0].numel() * ordered.element_size()
            piece = src[j, at:at + size].to(state.device).clone()
            _bits(ordered)[slot] = piece.view(_bits(ordered).dtype).reshape(ordered.shape[1:])
            at += size


def batch_memcpy(src_ptrs: torch.Tensor, dst_ptrs: torch.Tensor, sizes: torch.Tensor) -> None:
    """vLLM's ``batch_memcpy`` on host memory: ``memcpy(dst_ptrs[i], src_ptrs[i], sizes[i])`` for each
    ``sizes[i] > 0``."""
    for s, d, n in zip(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist()):
        if n > 0:
            ctypes.memmove(d, s, n)


# Sparse-attention caches (docs/semantics.md §15): row by row, in order.


def scatter_nd_update(var: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor) -> None:
    """docs/semantics.md §15.1: row ``i`` of ``updates`` to ``var[tuple(indices[i])]``, in order (the last
    naming a place wins); an index tuple with a component outside ``[0, var.shape[d])`` (padding:
    negative) writes nothing."""
    tuples = (indices.reshape(-1, 1) if indices.dim() == 1 else indices).tolist()
    for i, index in enumerate(tuples):
        if all(0 <= v < var.shape[d] for d, v in enumerate(index)):
            _bits(var)[tuple(index)] = _bits(updates[i]).to(var.device)


# Quantized caches (docs/semantics.md §13): the pseudo-code, as plain torch on whole token tensors.


def per(t: torch.Tensor, heads: int, head_size: int) -> torch.Tensor:
    """A scale or offset of docs/semantics.md §13.1's shapes as ``[1, 1]``, ``[H, 1]`` or ``[H, D]``."""
    if t.numel() == 1:
        return t.reshape(1, 1)
    if (t.dim() == 1 and t.numel() == heads) or (t.dim() >= 2 and t.shape[-1] == 1):
        return t.reshape(heads, 1)
    return t.reshape(heads, head_size)


def codes(t: torch.Tensor, dt: torch.dtype) -> torch.Tensor:
    """Q: int8 rounds half to even, saturates, NaN -> 0; fp8 clamps to +-max, rounds to nearest even."""
    if dt == torch.int8:
        r = torch.round(t).clamp(-128, 127)
        return torch.where(torch.isnan(r), torch.zeros_like(r), r).to(torch.int8)
    m = torch.finfo(dt).max
    return t.clamp(-m, m).to(dt)


def quantize_static(x: torch.Tensor, dt: torch.dtype, scale: torch.Tensor | None = None,
                    inv_scale: torch.Tensor | None = None, offset: torch.Tensor | None = None) -> torch.Tensor:
    """Codes of ``x`` ``[N, H, D]``: ``Q(x / scale [+ offset])`` or ``Q(x * inv_scale [+ offset])``,
    each operation rounded to ``promote_types`` of the dtypes given."""
    heads, head_size = x.shape[1], x.shape[2]
    s = scale if scale is not None else inv_scale
    assert s is not None
    ct = torch.promote_types(x.dtype, s.dtype)
    if offset is not None:
        ct = torch.promote_types(ct, offset.dtype)
    sc = per(s, heads, head_size).to(ct)
    t = x.to(ct) / sc if scale is not None else x.to(ct) * sc
    if offset is not None:
        t = t + per(offset, heads, head_size).to(ct)
    return codes(t, dt)


def quantize_dynamic(x: torch.Tensor, dt: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Codes of ``x`` ``[N, H, D]`` per (token, head) row, and the rows' float32 scales ``[N, H]``."""
    xf = x.float()
    a = xf.abs().amax(-1, keepdim=True)
    if dt == torch.int8:
        multiplier = torch.full_like(a, 127.0) / a  # a float32 division (127.0 / a would be a reciprocal)
        return codes(xf * multiplier, dt), (a * torch.tensor(1 / 127, dtype=torch.float32)).squeeze(-1)
    s = a * torch.tensor(1 / torch.finfo(dt).max, dtype=torch.float32)
    y = xf / s
    return codes(torch.where(torch.isnan(y), torch.zeros_like(y), y), dt), s.squeeze(-1)


def dequantize(q: torch.Tensor, out_dtype: torch.dtype, scale: torch.Tensor | None = None,
               offset: torch.Tensor | None = None, row_scale: torch.Tensor | None = None) -> torch.Tensor:
    """Codes ``q`` ``[N, H, D]`` in float32, rounded once to ``out_dtype``; ``row_scale`` ``[N, H]``."""
    y = q.float()
    if row_scale is not None:
        return (y * row_scale.float()[..., None]).to(out_dtype)
    assert scale is not None
    heads, head_size = q.shape[1], q.shape[2]
    if offset is not None:
        y = y - per(offset, heads, head_size).float()
    return (y * per(scale, heads, head_size).float()).to(out_dtype)


def _quantized_side(x: torch.Tensor, cache: torch.Tensor, scale: torch.Tensor | None,
                    inv_scale: torch.Tensor | None, offset: torch.Tensor | None,
                    scale_cache: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The rows one side writes: codes (or ``x`` itself unquantized) and the dynamic row scales."""
    if scale_cache is not None:
        q, s = quantize_dynamic(x, cache.dtype)
        return q, s.to(scale_cache.dtype)
    if scale is None and inv_scale is None:
        return x, None
    return quantize_static(x, cache.dtype, scale, inv_scale, offset), None


def reshape_and_cache_quant(
    key: torch.Tensor, value: torch.Tensor | None, key_cache: torch.Tensor, value_cache: torch.Tensor | None,
    slot_mapping: torch.Tensor, *, kv_cache_cfg: KvCacheCfg | str = "nd",
    k_scale: torch.Tensor | None = None, k_inv_scale: torch.Tensor | None = None,
    k_offset: torch.Tensor | None = None, k_scale_cache: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None, v_inv_scale: torch.Tensor | None = None,
    v_offset: torch.Tensor | None = None, v_scale_cache: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A quantizing reshape_and_cache (docs/semantics.md §13): the rows of each side quantized, then the slot
    loop of :func:`reshape_and_cache`, a dynamic side's scales written to ``scale_cache[slot // bs,
    slot % bs, h]`` by the same loop (a duplicated slot keeps the last token's codes and scale)."""
    n = slot_mapping.shape[0]
    k_rows, k_scales = _quantized_side(key[:n], key_cache, k_scale, k_inv_scale, k_offset, k_scale_cache)
    v_rows, v_scales = (None, None) if value is None or value_cache is None else _quantized_side(
        value[:n], value_cache, v_scale, v_inv_scale, v_offset, v_scale_cache)
    reshape_and_cache(k_rows, v_rows, key_cache, value_cache, slot_mapping, kv_cache_cfg=kv_cache_cfg)
    for scales, scale_cache in ((k_scales, k_scale_cache), (v_scales, v_scale_cache)):
        if scales is None or scale_cache is None:
            continue
        sc = scale_cache if scale_cache.dim() == 3 else scale_cache[..., 0]
        block_size = sc.shape[1]
        for i in range(n):
            s = int(slot_mapping[i])
            if s >= 0:
                sc[s // block_size, s % block_size] = scales[i]
    return key_cache, value_cache


def paged_cache_load_dequant(
    key_cache: torch.Tensor, value_cache: torch.Tensor, block_table: torch.Tensor, context_lens: torch.Tensor, *,
    kv_cache_cfg: KvCacheCfg | int = KvCacheCfg.K_CACHE_V_CACHE_NZ, cumsum: bool = False,
    seq_starts: torch.Tensor | None = None, key: torch.Tensor | None = None, value: torch.Tensor | None = None,
    k_scale: torch.Tensor | None = None, k_offset: torch.Tensor | None = None,
    k_scale_cache: torch.Tensor | None = None, v_scale: torch.Tensor | None = None,
    v_offset: torch.Tensor | None = None, v_scale_cache: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None, heads: tuple[int, int] = (1, 1),
) -> tuple[torch.Tensor, torch.Tensor]:
    """A dequantizing paged_cache_load (docs/semantics.md §13): each token's codes gathered as
    :func:`paged_cache_load` does, a side with a scale dequantized. ``heads``: each side's head
    count for NZ rows with per-head scales (ND rows give their own)."""
    layout = KvCacheCfg(int(kv_cache_cfg))
    nd = layout == KvCacheCfg.K_CACHE_V_CACHE_ND
    sides = []
    for cache, out, scale, offset, scale_cache, h in ((key_cache, key, k_scale, k_offset, k_scale_cache, heads[0]),
                                                      (value_cache, value, v_scale, v_offset, v_scale_cache, heads[1])):
        quantized = scale is not None or scale_cache is not None
        dtype = (out.dtype if out is not None else out_dtype or torch.float32) if quantized else cache.dtype
        sides.append((cache, out, scale, offset, scale_cache, h, quantized, dtype))
    # The codes and the row scales, gathered as bytes by the load's own loop.
    gathered = paged_cache_load(key_cache, value_cache, block_table, context_lens, kv_cache_cfg=kv_cache_cfg,
                                cumsum=cumsum, seq_starts=seq_starts)
    rows = gathered[0].shape[0]
    covered = torch.zeros(rows, dtype=torch.bool)  # rows a token fills (others stay as they are)
    batch = block_table.shape[0]
    for b in range(batch):
        start = int(context_lens[b]) if cumsum else sum(int(n) for n in context_lens[:b])
        end = int(context_lens[b + 1]) if cumsum else start + int(context_lens[b])
        covered[start:end] = True
    results = []
    for (cache, out, scale, offset, scale_cache, h, quantized, dtype), q in zip(sides, gathered):
        if out is None:
            out = torch.zeros((rows, *q.shape[1:]), dtype=dtype)
        if not quantized:
            out[:rows][covered] = q[covered]
            results.append(out)
            continue
        if scale_cache is not None:
            sc = scale_cache if scale_cache.dim() == 3 else scale_cache[..., 0]
            h = sc.shape[2]
            s = paged_cache_load(sc[..., None], sc[..., None], block_table, context_lens, kv_cache_cfg=1,
                                 cumsum=cumsum, seq_starts=seq_starts)[0][..., 0]
            y = dequantize(q.reshape(rows, h, math.prod(q.shape[1:]) // h), dtype, row_scale=s)
        else:
            hh = q.shape[1] if nd else h
            y = dequantize(q.reshape(rows, hh, math.prod(q.shape[1:]) // hh), dtype, scale=scale, offset=offset)
        out[:rows][covered] = y.reshape(q.shape)[covered]
        results.append(out)
    return results[0], results[1]


# ----------------------------------------------------------------------------- vLLM's cache ops (§16)

#: vLLM's kv_cache_dtype strings of fp8 caches and the code type each names.
VLLM_FP8 = {"fp8": torch.float8_e4m3fn, "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


def _as_codes(cache: torch.Tensor, dt: torch.dtype) -> torch.Tensor:
    return cache.view(dt) if cache.dtype == torch.uint8 else cache


def vllm_reshape_and_cache(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                           slot_mapping: torch.Tensor, kv_cache_dtype: str, k_scale: torch.Tensor,
                           v_scale: torch.Tensor) -> None:
    """vLLM's paged-attention write: key ``[nb, H, D // x, bs, x]``, value ``[nb, H, D, bs]``, one token at a time."""
    dt = VLLM_FP8.get(kv_cache_dtype)
    kc, vc = (key_cache, value_cache) if dt is None else (_as_codes(key_cache, dt), _as_codes(value_cache, dt))
    heads, head_size, bs, x = key.shape[1], key.shape[2], key_cache.shape[3], key_cache.shape[4]
    for t in range(slot_mapping.shape[0]):
        s = int(slot_mapping[t])
        if s < 0:
            continue
        k, v = key[t], value[t]
        if dt is not None:
            k = codes(k.float() / per(k_scale.float(), heads, head_size), dt)
            v = codes(v.float() / per(v_scale.float(), heads, head_size), dt)
        kc[s // bs, :, :, s % bs, :] = k.reshape(heads, head_size // x, x)
        vc[s // bs, :, :, s % bs] = v


def convert_fp8(output: torch.Tensor, input: torch.Tensor, scale: float, kv_dtype: str) -> None:
    """vLLM's convert_fp8: floats to fp8 codes ``Q(x / scale)``, or codes to ``float(code) * scale``."""
    dt = VLLM_FP8[kv_dtype]
    if input.dtype.is_floating_point and input.dtype.itemsize > 1:
        _as_codes(output, dt).copy_(codes(input.float() / scale, dt))
    else:
        output.copy_((_as_codes(input, dt).float() * scale).to(output.dtype))


def gather_cache(src_cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor, cu_seq_lens: torch.Tensor,
                 seq_starts: torch.Tensor | None = None, kv_cache_dtype: str = "auto",
                 scale: torch.Tensor | None = None) -> torch.Tensor:
    """vLLM's gather: row ``cu_seq_lens[b] + j`` takes token ``seq_starts[b] + j`` of sequence ``b``."""
    dt = VLLM_FP8.get(kv_cache_dtype)
    bs = src_cache.shape[1]
    for b in range(block_table.shape[0]):
        first = 0 if seq_starts is None else int(seq_starts[b])
        for j in range(int(cu_seq_lens[b + 1]) - int(cu_seq_lens[b])):
            p = first + j
            row = src_cache[int(block_table[b, p // bs]), p % bs]
            if dt is not None:
                assert scale is not None, "an fp8 gather needs its scale"
                row = (_as_codes(row, dt).float() * scale).to(dst.dtype)
            dst[int(cu_seq_lens[b]) + j] = row
    return dst


def concat_and_cache_mla(kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                         kv_cache_dtype: str, scale: torch.Tensor) -> None:
    """vLLM's MLA write, one token at a time; ``"fp8_ds_mla"`` builds DeepSeek's 656/528-byte row."""
    bs = kv_cache.shape[1]
    for t in range(slot_mapping.shape[0]):
        s = int(slot_mapping[t])
        if s < 0:
            continue
        row = kv_cache[s // bs, s % bs]
        if kv_cache_dtype == "fp8_ds_mla":
            x = kv_c[t].float().reshape(4, 128)
            amax = x.abs().nan_to_num(0.0).amax(-1, keepdim=True)
            tile = torch.exp2(torch.ceil(torch.log2((amax / 448.0).clamp_min(1e-4))))
            row[:512] = codes(x / tile, torch.float8_e4m3fn).view(torch.uint8).flatten()
            row[512:528] = tile.flatten().view(torch.uint8)
            if row.shape[0] == 656:
                row[528:] = k_pe[t].view(torch.uint8) if k_pe.shape[1] else 0
            continue
        dt = VLLM_FP8.get(kv_cache_dtype)
        whole = torch.cat([kv_c[t], k_pe[t]])
        if dt is None:
            row.copy_(whole)
        else:
            _as_codes(row, dt).copy_(codes(whole.float() / scale.float(), dt))


def indexer_k_quant_and_cache(k: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                              scale_fmt: str) -> None:
    """vLLM's indexer K write, one token at a time: per block, codes of its bs tokens, then their float32 scales."""
    bs, d = kv_cache.shape[1], k.shape[1]
    blocks = kv_cache.reshape(kv_cache.shape[0], -1)
    for t in range(slot_mapping.shape[0]):
        s = int(slot_mapping[t])
        if s < 0:
            continue
        b, p = s // bs, s % bs
        x = k[t].float().reshape(-1, 128)
        scale = x.abs().nan_to_num(0.0).amax(-1, keepdim=True).clamp_min(1e-4) / 448.0
        if scale_fmt in ("ue8m0", "mxfp8"):
            scale = torch.exp2(torch.ceil(torch.log2(scale)))
        blocks[b, p * d:(p + 1) * d] = codes(x / scale, torch.float8_e4m3fn).view(torch.uint8).flatten()
        raw = scale.flatten().view(torch.uint8)
        if scale_fmt == "mxfp8":
            raw = ((scale.flatten().view(torch.int32) >> 23) & 0xFF).to(torch.uint8).repeat_interleave(4)
        g = raw.shape[0]
        blocks[b, bs * d + p * g:bs * d + (p + 1) * g] = raw


def cp_gather_indexer_k_quant_cache(kv_cache: torch.Tensor, dst_k: torch.Tensor, dst_scale: torch.Tensor,
                                    block_table: torch.Tensor, cu_seq_lens: torch.Tensor) -> None:
    """vLLM's indexer gather: token ``j`` of sequence ``b`` into row ``cu_seq_lens[b] + j`` of both outputs."""
    bs, d, g = kv_cache.shape[1], dst_k.shape[1], dst_scale.shape[1]
    blocks = kv_cache.reshape(kv_cache.shape[0], -1)
    for b in range(block_table.shape[0]):
        for j in range(int(cu_seq_lens[b + 1]) - int(cu_seq_lens[b])):
            blk, p, row = int(block_table[b, j // bs]), j % bs, int(cu_seq_lens[b]) + j
            dst_k.view(torch.uint8)[row] = blocks[blk, p * d:(p + 1) * d]
            dst_scale[row] = blocks[blk, bs * d + p * g:bs * d + (p + 1) * g]
