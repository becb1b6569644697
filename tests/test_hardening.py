"""Inputs from the wild through the public API: strides, wrong arguments, huge offsets, threads, fuzzing.

Every call either matches ascend_kv/reference.py bit for bit, or raises TypeError/ValueError
naming an argument and leaves every tensor as it was.
"""

from __future__ import annotations

import torch

import ascend_kv
from ascend_kv import reference
from cases import ND, bits_equal


def test_cumsum_with_no_batch_entries_still_has_context_lens_last_rows() -> None:
    """cumsum mode: the output has context_lens[-1] rows even when block_table has no rows."""
    cache = torch.zeros(2, 16, 1, 16, dtype=torch.float16)
    table, context_lens = torch.zeros(0, 0, dtype=torch.int32), torch.tensor([3], dtype=torch.int32)
    key, value = ascend_kv.paged_cache_load(cache, cache, table, context_lens, kv_cache_cfg=ND, cumsum=True)
    expected = reference.paged_cache_load(cache, cache, table, context_lens, kv_cache_cfg=ND, cumsum=True)
    assert key.shape == (3, 1, 16) and bits_equal(key, expected[0]) and bits_equal(value, expected[1])
