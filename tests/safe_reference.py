"""The safe semantics, literally: what the index-reading backends do with index values nobody checked.

Index tensors on a device are not read back by a call, so the kernels and the device fallback
skip every token whose block-table column, block id, source or destination row is out of range
(docs/semantics.md, "Index values nobody checked"). For every in-domain call this is the seed's
pseudo-code (:mod:`ascend_kv.tools.reference`). Plain loops, one row at a time: the oracle, never fast.
Index arithmetic is Python ints, so nothing wraps; ``//`` is floor division.
"""

from __future__ import annotations

import torch
from calls import KvCacheArgs, PagedLoadArgs, ReshapeAndCacheArgs

from ascend_kv.api.params import KvCacheCfg


def _ints(t: torch.Tensor) -> list[int]:
    return [int(v) for v in t.reshape(-1).tolist()]


def kv_cache(args: KvCacheArgs) -> None:
    """Write ``args.past`` in place as the kernels do, skipping out-of-range tokens."""
    past, new_kv = args.past, args.new_kv
    layers, batch, max_seq_len, _ = past.shape
    ntokens = new_kv.shape[0]
    layer = int(args.layer_id) if not isinstance(args.layer_id, torch.Tensor) else _ints(args.layer_id)[0]
    if not 0 <= layer < layers:
        return
    offsets, lengths = _ints(args.token_offset), _ints(args.seq_len)
    prefix = 0
    for b in range(batch):
        n = min(max(lengths[b], 0), ntokens)
        start = offsets[b] - lengths[b]
        for j in range(n):
            src, dst = prefix + j, start + j
            if src < ntokens and 0 <= dst < max_seq_len:
                past[layer, b, dst] = new_kv[src]
        prefix += n


def _token(cache: torch.Tensor, block: int, slot: int, layout: KvCacheCfg) -> torch.Tensor:
    if layout == KvCacheCfg.K_CACHE_V_CACHE_ND:
        return cache[block, slot]
    return cache[block, :, slot, :].reshape(-1)


def paged_cache_load(args: PagedLoadArgs) -> None:
    """Write ``args.key`` and ``args.value`` in place as the kernels do, skipping out-of-range tokens."""
    table = [_ints(row) for row in args.block_table]
    batch, columns = args.block_table.shape
    nd = args.layout == KvCacheCfg.K_CACHE_V_CACHE_ND
    num_blocks = args.key_cache.shape[0]
    block_size = args.key_cache.shape[1] if nd else args.key_cache.shape[2]
    key_rows, value_rows = args.key.shape[0], args.value.shape[0]
    limit = max(key_rows, value_rows)
    lens = _ints(args.context_lens)
    starts = _ints(args.seq_starts) if args.seq_starts is not None else [0] * batch
    prefix = 0
    for b in range(batch):
        if args.cumsum:
            n, first_row = min(max(lens[b + 1] - lens[b], 0), limit), lens[b]
        else:
            n, first_row = min(max(lens[b], 0), limit), prefix
            prefix += n
        first_column = starts[b] // block_size
        for j in range(n):
            column = first_column + j // block_size
            if not 0 <= column < columns:
                continue
            block = table[b][column]
            if not 0 <= block < num_blocks:
                continue
            row = first_row + j
            if 0 <= row < key_rows:
                args.key[row] = _token(args.key_cache, block, j % block_size, args.layout)
            if 0 <= row < value_rows:
                args.value[row] = _token(args.value_cache, block, j % block_size, args.layout)


def _put(cache: torch.Tensor, block: int, slot: int, row: torch.Tensor, layout: KvCacheCfg) -> None:
    if layout == KvCacheCfg.K_CACHE_V_CACHE_ND:
        cache[block, slot] = row
    else:
        cache[block, :, slot, :] = row.reshape(cache.shape[1], cache.shape[3])


def reshape_and_cache(args: ReshapeAndCacheArgs) -> None:
    """Write ``args.key_cache`` (and ``args.value_cache``) in place as the kernels do, skipping out-of-range slots.

    A slot several tokens name ends up with the last of them (the kernels leave one of them).
    """
    nd = args.layout == KvCacheCfg.K_CACHE_V_CACHE_ND
    num_blocks = args.key_cache.shape[0]
    block_size = args.key_cache.shape[1] if nd else args.key_cache.shape[2]
    for i, s in enumerate(_ints(args.slot_mapping)):
        if not 0 <= s < num_blocks * block_size:
            continue
        _put(args.key_cache, s // block_size, s % block_size, args.key[i], args.layout)
        if args.value is not None and args.value_cache is not None:
            _put(args.value_cache, s // block_size, s % block_size, args.value[i], args.layout)
