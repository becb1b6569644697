"""Inputs from the wild through the public API: strides, wrong arguments, huge offsets, threads, fuzzing.

Every call either matches ascend_kv/reference.py bit for bit, or raises TypeError/ValueError
naming an argument and leaves every tensor as it was.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
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


# ----------------------------------------------------------------------------- non-contiguous tensors


def test_outputs_whose_elements_share_memory_are_rejected_before_any_write() -> None:
    """An expand() view as past/key/value would make one write overwrite another: ValueError."""
    new_kv = torch.ones(2, 16, dtype=torch.float16)
    past = torch.zeros(1, 1, 4, 16, dtype=torch.float16).expand(1, 2, 4, 16)
    with pytest.raises(ValueError, match=r"past is written in place.*strides \(64, 0, 16, 1\)"):
        ascend_kv.kv_cache(new_kv, 0, past, torch.tensor([1, 1]), torch.tensor([1, 1]))
    assert not past.any()
    cache = torch.ones(2, 16, 1, 16, dtype=torch.float16)
    key = torch.zeros(1, 1, 16, dtype=torch.float16).expand(16, 1, 16)
    for name in ("key", "value"):
        outputs = {"key": torch.zeros(16, 1, 16, dtype=torch.float16), "value": torch.zeros(16, 1, 16, dtype=torch.float16)}
        outputs[name] = key
        with pytest.raises(ValueError, match=f"{name} is written in place"):
            ascend_kv.paged_cache_load(cache, cache, torch.tensor([[0]]), torch.tensor([16]), kv_cache_cfg=ND, **outputs)
        assert not any(t.any() for t in outputs.values())


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: ascend_kv.nd_to_nz(None), TypeError, "cache must be a torch.Tensor, got NoneType"),
        (lambda: ascend_kv.nd_to_nz([[1.0]]), TypeError, "cache must be a torch.Tensor, got list"),
        (lambda: ascend_kv.nz_to_nd(torch.zeros(1, 2, 16, 16, dtype=torch.float16), "2"), TypeError,
         "num_heads must be an int"),
        (lambda: ascend_kv.nz_to_nd(torch.zeros(1, 2, 16, 16, dtype=torch.float16), 2.0), TypeError,
         "num_heads must be an int"),
        (lambda: ascend_kv.nz_to_nd(torch.zeros(1, 2, 16, 16, dtype=torch.float16).to("meta"), 2), TypeError,
         "cache must hold data"),
    ],
)
def test_layout_helpers_reject_what_is_not_a_cache(call: Callable[[], object], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        call()
