"""The shared suite: every host backend against the literal reference, bit for bit.

Each test runs once per backend in ``conftest.HOST_BACKENDS`` (the ``backend`` fixture chooses
it explicitly). The reference runs on clones of the same arguments.
"""

from __future__ import annotations

import pytest
import torch
from cases import ND, NZ, Case, bits_equal, kv_cache_case, kv_cache_cases, paged_case, paged_cases
from hypothesis import given

import ascend_kv
from ascend_kv.tools import reference


def run_kv_cache(case: Case) -> None:
    """Run the op and the reference on clones; assert same bits, in place, only layer touched."""
    ours, ref = case.cloned(), case.cloned()
    returned = ascend_kv.kv_cache(*ours.args)
    reference.kv_cache(*ref.args)
    past = ours.args[2]
    assert returned is past
    assert bits_equal(past, ref.args[2])


def run_paged(case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the op and the reference on clones; assert same bits and output identity."""
    ours, ref = case.cloned(), case.cloned()
    key, value = ascend_kv.paged_cache_load(*ours.args, **ours.kwargs)
    ref_key, ref_value = reference.paged_cache_load(*ref.args, **ref.kwargs)
    assert bits_equal(key, ref_key)
    assert bits_equal(value, ref_value)
    if "key" in ours.kwargs:
        assert key is ours.kwargs["key"] and value is ours.kwargs["value"]
    for cache, original in zip(ours.args[:2], case.args[:2]):
        assert bits_equal(cache, original), "the caches are read only"
    return key, value


# ----------------------------------------------------------------------------- kv_cache


@given(case=kv_cache_cases())
def test_kv_cache_matches_reference(backend: str, case: Case) -> None:
    run_kv_cache(case)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int8])
@pytest.mark.parametrize("new_kv_4d", [False, True])
def test_kv_cache_every_dtype_and_rank(backend: str, dtype: torch.dtype, new_kv_4d: bool) -> None:
    run_kv_cache(kv_cache_case(dtype, [3, 0, 5, 1], [3, 9, 16, 12], new_kv_4d=new_kv_4d, index_dtype=torch.int64))


def test_kv_cache_decode_batch(backend: str) -> None:
    """64 sequences of one token each, hidden 1024 (8 heads x 128)."""
    offsets = [(7 * i) % 100 + 1 for i in range(64)]
    run_kv_cache(kv_cache_case(torch.float16, [1] * 64, offsets, max_seq_len=128, hidden=1024, layers=4, layer_id=3))


def test_kv_cache_prefill_uneven_batch(backend: str) -> None:
    run_kv_cache(kv_cache_case(torch.bfloat16, [200, 1, 0, 37], [200, 5, 0, 256], max_seq_len=256, hidden=256))


def test_kv_cache_zero_length_and_full_cache(backend: str) -> None:
    """seq_len 0 writes nothing; token_offset == max_seq_len fills the last slot."""
    case = kv_cache_case(torch.float16, [0, 16, 0], [0, 16, 16], max_seq_len=16)
    run_kv_cache(case)


def test_kv_cache_writes_only_its_rows(backend: str) -> None:
    case = kv_cache_case(torch.int8, [2, 1], [5, 1], layers=3, layer_id=2, max_seq_len=8, hidden=32)
    before = case.args[2].clone()
    ascend_kv.kv_cache(*case.args)
    changed = (case.args[2] != before).any(dim=-1).nonzero().tolist()
    written = {(2, 0, 3), (2, 0, 4), (2, 1, 0)}
    assert {tuple(i) for i in changed} <= written


def test_kv_cache_operation_object(backend: str) -> None:
    case = kv_cache_case(torch.float16, [2, 3], [4, 3])
    ours, ref = case.cloned(), case.cloned()
    present = ascend_kv.KVCacheOperation(ascend_kv.KVCacheParam())(*ours.args)
    assert present is ours.args[2]
    assert bits_equal(present, reference.kv_cache(*ref.args))


# ----------------------------------------------------------------------------- paged_cache_load


@given(case=paged_cases())
def test_paged_cache_load_matches_reference(backend: str, case: Case) -> None:
    run_paged(case)


@pytest.mark.parametrize("layout", [ND, NZ])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int8])
@pytest.mark.parametrize("give_outputs", [False, True])
def test_paged_every_layout_and_dtype(backend: str, layout, dtype: torch.dtype, give_outputs: bool) -> None:
    head = 32 if dtype == torch.int8 else 16
    run_paged(paged_case(layout, [17, 0, 40, 5], key_dtype=dtype, head_size_k=head, head_size_v=2 * head,
                         give_outputs=give_outputs, extra_rows=3))


@pytest.mark.parametrize("value_dtype", [torch.float16, torch.bfloat16])
def test_paged_nz_int8_keys_with_16_bit_values(backend: str, value_dtype: torch.dtype) -> None:
    run_paged(paged_case(NZ, [30, 2], key_dtype=torch.int8, value_dtype=value_dtype, head_size_k=64,
                         head_size_v=32, block_size=32, give_outputs=True))


@pytest.mark.parametrize("layout", [ND, NZ])
def test_paged_mla_shape(backend: str, layout) -> None:
    """MLA: one head, K head size 512, V head size 64."""
    run_paged(paged_case(layout, [130, 64, 1], num_heads=1, head_size_k=512, head_size_v=64, block_size=64,
                         num_blocks=10))


def test_paged_cumsum_leaves_rows_before_first_untouched(backend: str) -> None:
    case = paged_case(ND, [5, 0, 20], cumsum_base=4, give_outputs=True)
    before = case.kwargs["key"][:4].clone()
    key, _ = run_paged(case)
    assert key.shape[0] == 4 + 25
    out = case.cloned()
    ascend_kv.paged_cache_load(*out.args, **out.kwargs)
    assert bits_equal(out.kwargs["key"][:4], before)


def test_paged_cumsum_allocated_rows_before_first_are_zero(backend: str) -> None:
    case = paged_case(ND, [3, 2], cumsum_base=2, block_size=4)
    key, value = ascend_kv.paged_cache_load(*case.args, **case.kwargs)
    assert key.shape[0] == 7 and not key[:2].any() and not value[:2].any()


def test_paged_seq_starts_ignores_the_remainder(backend: str) -> None:
    """seq_starts = 21 with block_size 8 starts at slot 0 of column 2, not slot 5."""
    case = paged_case(ND, [6, 9], block_size=8, seq_starts=[21, 3])
    key, _ = run_paged(case)
    key_cache, _, table, _ = case.args
    assert bits_equal(key[0], key_cache[int(table[0, 2]), 0])


def test_paged_seq_starts_with_cumsum(backend: str) -> None:
    run_paged(paged_case(ND, [7, 0, 12], block_size=4, seq_starts=[4, 0, 9], cumsum_base=1, give_outputs=True,
                         extra_rows=2, index_dtype=torch.int64))


def test_paged_all_lengths_zero(backend: str) -> None:
    key, value = run_paged(paged_case(NZ, [0, 0, 0]))
    assert key.shape == (0, 32) and value.shape == (0, 32)


def test_paged_empty_batch(backend: str) -> None:
    key, _ = run_paged(paged_case(ND, []))
    assert key.shape == (0, 2, 16)


def test_paged_operation_object(backend: str) -> None:
    case = paged_case(ND, [9, 4], block_size=4, seq_starts=[8, 0], cumsum_base=0, give_outputs=True)
    ours, ref = case.cloned(), case.cloned()
    param = ascend_kv.PagedCacheLoadParam(kv_cache_cfg=ND, is_seq_lens_cumsum_mode=True, has_seq_starts=True)
    key, value = ascend_kv.PagedCacheLoadOperation(param)(
        *ours.args, ours.kwargs["key"], ours.kwargs["value"], seq_starts=ours.kwargs["seq_starts"])
    ref_key, ref_value = reference.paged_cache_load(*ref.args, **ref.kwargs)
    assert key is ours.kwargs["key"]
    assert bits_equal(key, ref_key) and bits_equal(value, ref_value)


@pytest.mark.parametrize("cfg", ["nz", "NZ", 0, NZ])
def test_paged_layout_spellings(backend: str, cfg) -> None:
    case = paged_case(NZ, [20, 3])
    case.kwargs["kv_cache_cfg"] = cfg
    key, _ = ascend_kv.paged_cache_load(*case.args, **case.kwargs)
    ref_key, _ = reference.paged_cache_load(*case.args, kv_cache_cfg=NZ)
    assert bits_equal(key, ref_key)
