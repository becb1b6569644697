"""Paged cache load as one gather of whole token rows per cache."""

from __future__ import annotations

import numpy as np
import torch

from ascend_kv.calls import PagedLoadCall
from ascend_kv.params import KvCacheCfg


def token_sources(call: PagedLoadCall) -> tuple[np.ndarray, np.ndarray]:
    """``(block, slot)`` of every gathered token, in output-row order; each ``[num_tokens]`` int64."""
    batch = len(call.lens)
    entry = np.repeat(np.arange(batch, dtype=np.int64), call.lens)                 # [num_tokens]
    first_token = np.repeat(call.out_start - call.first_row, call.lens)            # [num_tokens]
    j = np.arange(call.num_tokens, dtype=np.int64) - first_token                   # token index within its entry
    column = np.repeat(call.first_column, call.lens) + j // call.block_size
    return call.block_table[entry, column], j % call.block_size


def _gather(cache: torch.Tensor, block: torch.Tensor, slot: torch.Tensor, layout: KvCacheCfg) -> torch.Tensor:
    """Token rows ``[n, num_heads, head_size]`` (ND) or ``[n, T]`` (NZ) of ``cache``."""
    if layout == KvCacheCfg.K_CACHE_V_CACHE_ND:
        return cache[block, slot]
    return cache[block, :, slot, :].reshape(len(block), -1)


def paged_cache_load(call: PagedLoadCall) -> None:
    """Gather every requested token of both caches into ``call.key`` and ``call.value``."""
    if call.num_tokens == 0:
        return
    block, slot = token_sources(call)
    device = call.key_cache.device
    block_t, slot_t = torch.from_numpy(block).to(device), torch.from_numpy(slot).to(device)
    rows = slice(call.first_row, call.first_row + call.num_tokens)
    call.key[rows] = _gather(call.key_cache, block_t, slot_t, call.layout)
    call.value[rows] = _gather(call.value_cache, block_t, slot_t, call.layout)
