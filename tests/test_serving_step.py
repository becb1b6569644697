"""A serving engine's steps through the public functions, against plain torch histories.

Prefill a sequence into a paged cache, fork it for beam search (the shared full block stays
shared; the last, partly filled block is copied first: copy-on-write with ``block_copy``), decode
both beams with ``reshape_and_cache``, gather both with ``paged_cache_load``; then offload one
beam's blocks to host memory with ``swap_blocks``, let the engine reuse the NPU blocks, and bring
the beam back into other blocks. Every gathered token equals the history kept in plain tensors.
"""

from __future__ import annotations

import pytest
import torch
from cases import bits_equal, random_bits

import ascend_kv

BLOCK, HEADS, HEAD_SIZE, NUM_BLOCKS = 16, 2, 16, 8
PREFILL, DECODE = 21, 3          # 21 tokens: one full block and 5 slots of the next


def tokens(n: int, seed: int) -> torch.Tensor:
    return random_bits((n, HEADS, HEAD_SIZE), torch.bfloat16, seed)


def slots(table: list[int], positions: range) -> torch.Tensor:
    return torch.tensor([table[p // BLOCK] * BLOCK + p % BLOCK for p in positions], dtype=torch.int32)


def gathered(key_cache: torch.Tensor, value_cache: torch.Tensor, tables: list[list[int]], length: int,
             layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Each sequence's tokens ``[sequences, length, heads, head_size]`` read back through the block tables."""
    key, value = ascend_kv.paged_cache_load(key_cache, value_cache, torch.tensor(tables, dtype=torch.int32),
                                            torch.tensor([length] * len(tables), dtype=torch.int32),
                                            kv_cache_cfg=layout)
    return key.reshape(len(tables), length, HEADS, HEAD_SIZE), value.reshape(len(tables), length, HEADS, HEAD_SIZE)


@pytest.mark.parametrize("layout", ["nd", "nz"])
def test_prefill_fork_decode_gather_offload_and_back(backend: str, layout: str) -> None:
    if layout == "nd":
        caches = [torch.zeros(NUM_BLOCKS, BLOCK, HEADS, HEAD_SIZE, dtype=torch.bfloat16) for _ in range(2)]
    else:
        caches = [torch.zeros(NUM_BLOCKS, HEADS * HEAD_SIZE // 16, BLOCK, 16, dtype=torch.bfloat16) for _ in range(2)]
    key_cache, value_cache = caches
    history = {"key": tokens(PREFILL, 1), "value": tokens(PREFILL, 2)}

    # prefill: sequence 0 in blocks 5 and 2
    table = [5, 2]
    ascend_kv.reshape_and_cache(history["key"], history["value"], key_cache, value_cache,
                                slots(table, range(PREFILL)), kv_cache_cfg=layout)

    # fork: beam 1 shares block 5 (full) and gets its own copy of block 2 (partly filled) in block 6
    ascend_kv.block_copy(key_cache, value_cache, torch.tensor([2]), torch.tensor([6]), torch.tensor([1]))
    tables = [table, [5, 6]]
    beams = [{name: t.clone() for name, t in history.items()} for _ in tables]

    # decode: one token per beam per step, one call for both
    for step in range(DECODE):
        new = {"key": tokens(2, 10 + step), "value": tokens(2, 20 + step)}
        position = PREFILL + step
        mapping = torch.cat([slots(t, range(position, position + 1)) for t in tables])
        ascend_kv.reshape_and_cache(new["key"], new["value"], key_cache, value_cache, mapping, kv_cache_cfg=layout)
        for b, beam in enumerate(beams):
            for name in beam:
                beam[name] = torch.cat([beam[name], new[name][b : b + 1]])

    length = PREFILL + DECODE
    key, value = gathered(key_cache, value_cache, tables, length, layout)
    for b, beam in enumerate(beams):
        assert bits_equal(key[b], beam["key"]) and bits_equal(value[b], beam["value"])
    assert not bits_equal(key[0], key[1])                          # the beams really diverged

    # offload beam 1 (blocks 5 and 6) to host memory, reuse its NPU blocks, bring it back into 0 and 3
    host = [torch.empty((2, *key_cache.shape[1:]), dtype=key_cache.dtype) for _ in range(2)]
    for cache, offloaded in zip(caches, host):
        ascend_kv.swap_blocks(cache, offloaded, torch.tensor([[5, 0], [6, 1]]))
        cache[[5, 6]] = 0                                              # the engine hands the blocks to others
    for cache, offloaded in zip(caches, host):
        ascend_kv.swap_blocks(offloaded, cache, torch.tensor([[0, 0], [1, 3]]))
    key, value = gathered(key_cache, value_cache, [[0, 3]], length, layout)
    assert bits_equal(key[0], beams[1]["key"]) and bits_equal(value[0], beams[1]["value"])
