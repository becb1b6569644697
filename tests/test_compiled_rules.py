"""The value rules, compiled (csrc/rules/index_values.cpp and each operation's rules in csrc/rules/),
through the public functions: index tensors read through their strides, and values at the edges of
int64, where C++ arithmetic would overflow and the messages must still say the exact numbers."""

from __future__ import annotations

import re

import pytest
import torch
from cases import bits_equal, random_bits
from hypothesis import given
from hypothesis import strategies as st

import ascend_kv
from ascend_kv.tools import reference

F16 = torch.float16
ND = ascend_kv.KvCacheCfg.K_CACHE_V_CACHE_ND


def strided(values: list[int], dtype: torch.dtype, step: int) -> torch.Tensor:
    """``values`` as a 1-D view with stride ``step`` into a larger buffer."""
    buffer = torch.full((max(len(values), 1) * step,), -7, dtype=dtype)
    view = buffer[::step][: len(values)]
    view.copy_(torch.tensor(values, dtype=dtype))
    return view


@given(data=st.data(), dtype=st.sampled_from([torch.int32, torch.int64]), step=st.integers(1, 3),
       transpose=st.booleans())
def test_a_paged_load_reads_strided_index_tensors_as_their_contiguous_copies(
        data: st.DataObject, dtype: torch.dtype, step: int, transpose: bool) -> None:
    batch, columns, block_size = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 3)), 4
    lens = data.draw(st.lists(st.integers(0, columns * block_size), min_size=batch, max_size=batch))
    table = torch.randint(0, 6, (columns, batch) if transpose else (batch, columns), dtype=dtype)
    table = table.t() if transpose else table[:, :]                               # a transposed table is strided
    cache = random_bits((6, block_size, 1, 16), F16, 1)
    lens_view = strided(lens, dtype, step)
    got = ascend_kv.paged_cache_load(cache, cache, table, lens_view, kv_cache_cfg=ND)
    expected = reference.paged_cache_load(cache, cache, table.contiguous(), torch.tensor(lens, dtype=dtype),
                                          kv_cache_cfg=ND)
    assert all(bits_equal(g, e) for g, e in zip(got, expected))


@given(dtype=st.sampled_from([torch.int32, torch.int64]), step=st.integers(2, 3))
def test_kv_cache_reads_strided_index_tensors_as_their_contiguous_copies(dtype: torch.dtype, step: int) -> None:
    past, new_kv = torch.zeros(1, 3, 8, 16, dtype=F16), random_bits((4, 16), F16, 2)
    offsets, lens = [2, 8, 1], [2, 1, 1]
    expected = reference.kv_cache(new_kv, 0, past.clone(), torch.tensor(offsets), torch.tensor(lens))
    ascend_kv.kv_cache(new_kv, 0, past, strided(offsets, dtype, step), strided(lens, dtype, step))
    assert bits_equal(past, expected)


@pytest.mark.parametrize("lens, cumsum, message", [
    ([2**62, 2**62], False, ("context_lens[0] = 4611686018427387904 takes the output past the kernels' int32 limit "
                            "of 2147483647 rows: it would have 9223372036854775808 (the sum of context_lens)")),
    ([2**63 - 1, 2**63 - 1], False, ("context_lens[0] = 9223372036854775807 takes the output past the kernels' int32 "
                                    "limit of 2147483647 rows: it would have 18446744073709551614 (the sum")),
    ([2**31 - 2, 1, 1], False, ("context_lens[2] = 1 takes the output past the kernels' int32 limit of 2147483647 rows: "
                               "it would have 2147483648 (the sum of context_lens)")),
    ([0, 2**63 - 1], True, ("context_lens[1] = 9223372036854775807 takes the output past the kernels' int32 limit of "
                           "2147483647 rows: it would have 9223372036854775807 (the last cumulative length)")),
    ([5, 2**63 - 1, 0], True, "context_lens[2] = 0 is smaller than context_lens[1] = 9223372036854775807"),
    ([-(2**63), 0], False, "context_lens[0] = -9223372036854775808 is negative"),
])
def test_paged_load_length_rules_say_exact_numbers_at_the_edges_of_int64(lens: list[int], cumsum: bool,
                                                                         message: str) -> None:
    cache = torch.zeros(4, 16, 1, 16, dtype=F16)
    batch = len(lens) - cumsum
    out = torch.zeros(4, 1, 16, dtype=F16)
    with pytest.raises(ValueError, match=re.escape(message)):
        ascend_kv.paged_cache_load(cache, cache, torch.zeros(batch, 1, dtype=torch.int64), torch.tensor(lens),
                                   kv_cache_cfg=ND, cumsum=cumsum, key=out, value=out.clone())
    assert not out.any()


def test_paged_load_column_rule_says_exact_numbers_for_a_start_near_int64_max() -> None:
    """seq_starts // block_size plus the blocks a sequence needs does not fit in int64 arithmetic unchecked."""
    cache = torch.zeros(4, 1, 1, 16, dtype=F16)                                     # block_size 1
    start = 2**63 - 1
    with pytest.raises(ValueError, match=re.escape(
            f"block_table has 2 columns, but batch entry 0 needs columns {start}..{start + 1} "
            f"(2 tokens from column {start}, block_size 1)")):
        ascend_kv.paged_cache_load(cache, cache, torch.zeros(1, 2, dtype=torch.int64), torch.tensor([2]),
                                   kv_cache_cfg=ND, seq_starts=torch.tensor([start]))


@pytest.mark.parametrize("lens, ntokens, message", [
    ([2**62, 2**62], 2, "sum(seq_len) = 9223372036854775808 must equal ntokens = 2 (rows of new_kv)"),
    ([2**63 - 1, 1], 2, "sum(seq_len) = 9223372036854775808 must equal ntokens = 2"),
    ([1, -1], 0, "seq_len[1] = -1 is negative"),
])
def test_kv_cache_sum_rule_says_exact_numbers_at_the_edges_of_int64(lens: list[int], ntokens: int,
                                                                    message: str) -> None:
    past = torch.zeros(1, 2, 8, 16, dtype=F16)
    with pytest.raises(ValueError, match=re.escape(message)):
        ascend_kv.kv_cache(torch.ones(ntokens, 16, dtype=F16), 0, past, torch.tensor([2**63 - 1] * 2),
                           torch.tensor(lens))
    assert not past.any()


def test_kv_cache_offsets_at_the_edges_of_int64_are_named() -> None:
    past = torch.zeros(1, 2, 8, 16, dtype=F16)
    with pytest.raises(ValueError, match=re.escape("token_offset[1] = -9223372036854775808 is negative")):
        ascend_kv.kv_cache(torch.ones(2, 16, dtype=F16), 0, past, torch.tensor([1, -(2**63)]), torch.tensor([1, 1]))
    with pytest.raises(ValueError, match=re.escape("token_offset[0] = 9223372036854775807 exceeds max_seq_len = 8")):
        ascend_kv.kv_cache(torch.ones(2, 16, dtype=F16), 0, past, torch.tensor([2**63 - 1, 1]), torch.tensor([1, 1]))
    assert not past.any()


def test_the_aliasing_screen_skips_absent_tensors_and_still_sees_the_present_ones() -> None:
    """Key-only reshape_and_cache (value and value_cache None) with the key inside its own cache."""
    cache = torch.zeros(2, 16, 1, 16, dtype=F16)
    key = cache.view(-1, 1, 16)[:2]
    with pytest.raises(ValueError, match="key_cache"):
        ascend_kv.reshape_and_cache(key, None, cache, None, torch.tensor([5, 6]))
