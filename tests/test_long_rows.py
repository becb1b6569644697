"""Rows longer than one DataCopyPad block may move (65,535 bytes, docs/host_model.md): the kernels
split them, and every host backend stays bit-exact against the reference.

Each call would otherwise issue a longer block: a strided run of 80,000-byte rows (a column slice of
a wider buffer, so the rows are not one contiguous run), or reshape_and_cache's 131,072-byte rows,
which move in segments of a UB buffer (93,696 bytes with the default UB)."""

from __future__ import annotations

import pytest
import torch
from cases import bits_equal, random_bits

import ascend_kv
from ascend_kv.tools import reference

H = torch.float16
LONG = 40_000  # float16 elements: 80,000-byte rows, a whole number of 32-byte blocks


def test_kv_cache_into_a_column_slice_with_long_rows(backend: str) -> None:
    buffer = random_bits((1, 2, 4, LONG + 16), H, 1)
    new_kv = random_bits((3, LONG), H, 2)
    offsets, lengths = torch.tensor([2, 1]), torch.tensor([2, 1])
    expected = reference.kv_cache(new_kv, 0, buffer.clone()[..., :LONG], offsets, lengths)
    untouched = buffer[..., LONG:].clone()
    ascend_kv.kv_cache(new_kv, 0, buffer[..., :LONG], offsets, lengths)
    assert bits_equal(buffer[..., :LONG], expected) and bits_equal(buffer[..., LONG:], untouched)


def test_paged_cache_load_of_column_sliced_caches_with_long_rows(backend: str) -> None:
    buffer = random_bits((3, 4, 1, 2 * LONG), H, 3)
    key_cache, value_cache = buffer[..., :LONG], buffer[..., LONG:]
    table, lens = torch.tensor([[2, 0], [1, -1]], dtype=torch.int32), torch.tensor([6, 3], dtype=torch.int32)
    key, value = ascend_kv.paged_cache_load(key_cache, value_cache, table, lens, kv_cache_cfg="nd")
    expected = reference.paged_cache_load(key_cache, value_cache, table, lens, kv_cache_cfg=1)
    assert bits_equal(key, expected[0]) and bits_equal(value, expected[1])


@pytest.mark.parametrize("head_size", [LONG + 3, 65_536])  # a strided 80,006-byte row; 131,072-byte rows
def test_reshape_and_cache_of_long_rows(backend: str, head_size: int) -> None:
    fused = random_bits((3, 2 * head_size + 8), H, 4)  # key and value column slices of one buffer
    key = fused[:, :head_size].unflatten(1, (1, head_size))
    value = fused[:, head_size:2 * head_size].unflatten(1, (1, head_size))
    key_cache, value_cache = (random_bits((2, 4, 1, head_size), H, seed) for seed in (5, 6))
    slots = torch.tensor([1, 2, 7])  # a run of two consecutive slots, then one in the next block
    expected = reference.reshape_and_cache(key, value, key_cache.clone(), value_cache.clone(), slots)
    ascend_kv.reshape_and_cache(key, value, key_cache, value_cache, slots)
    assert bits_equal(key_cache, expected[0]) and bits_equal(value_cache, expected[1])
