"""The public ``reshape_and_cache`` (ATB ReshapeAndCacheOperation): every backend against the
reference, every rule at its boundary, the ATB-style object, and a write read back by the load."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from cases import Case, bits_equal, random_bits, reshape_and_cache_case, reshape_and_cache_cases
from hypothesis import given

import ascend_kv
from ascend_kv import ReshapeAndCacheOperation, ReshapeAndCacheParam
from ascend_kv.tools import reference

CFG = ReshapeAndCacheParam.KvCacheCfg


def expected_of(case: Case) -> tuple[torch.Tensor, torch.Tensor | None]:
    return reference.reshape_and_cache(*case.cloned().args, **case.kwargs)


@given(case=reshape_and_cache_cases())
def test_matches_the_reference_in_place(backend: str, case: Case) -> None:
    expected = expected_of(case)
    key_cache, value_cache = case.args[2], case.args[3]
    result = ascend_kv.reshape_and_cache(*case.args, **case.kwargs)
    assert result[0] is key_cache and result[1] is value_cache
    assert bits_equal(key_cache, expected[0])
    assert value_cache is None or bits_equal(value_cache, expected[1])


@pytest.mark.parametrize("layout", ["nd", "nz"])
def test_a_write_is_read_back_by_paged_cache_load(backend: str, layout: str) -> None:
    case = reshape_and_cache_case(layout, [37, 5, 16, 63], block_size=16, num_blocks=4)
    key, value, key_cache, value_cache, _ = case.args
    ascend_kv.reshape_and_cache(*case.args, **case.kwargs)
    table = torch.tensor([[2, 0, 1, 3]], dtype=torch.int32)        # sequence: blocks 2, 0, 1, 3
    loaded_key, loaded_value = ascend_kv.paged_cache_load(key_cache, value_cache, table, torch.tensor([64]),
                                                          kv_cache_cfg=layout)
    # slot s (block s // 16) is read at row 16 * (the block's column in the table) + s % 16
    rows = {37: 0 * 16 + 5, 5: 1 * 16 + 5, 16: 2 * 16 + 0, 63: 3 * 16 + 15}
    for i, slot in enumerate([37, 5, 16, 63]):
        row = rows[slot]
        assert bits_equal(loaded_key[row].reshape(key[i].shape), key[i])
        assert bits_equal(loaded_value[row].reshape(value[i].shape), value[i])


@pytest.mark.parametrize("layout", ["nd", "nz"])
@pytest.mark.parametrize("slots", [[3, 9, 3], [0, 7, 0, 0], [-1, 5, 5, -1]])
def test_a_slot_named_twice_keeps_its_last_token(backend: str, layout: str, slots: list[int]) -> None:
    """SGLang pads a batch by sending its dummy tokens to slot 0: accepted, the last token wins, whole."""
    case = reshape_and_cache_case(layout, slots, num_tokens=len(slots))
    key, value, key_cache, value_cache, _ = case.args
    ascend_kv.reshape_and_cache(*case.args, **case.kwargs)
    table = torch.tensor([[0, 1, 2, 3]], dtype=torch.int32)
    loaded_key, loaded_value = ascend_kv.paged_cache_load(key_cache, value_cache, table, torch.tensor([64]),
                                                          kv_cache_cfg=layout)
    for slot in {s for s in slots if s >= 0}:
        last = max(i for i, s in enumerate(slots) if s == slot)
        assert bits_equal(loaded_key[slot].reshape(key[last].shape), key[last])
        assert bits_equal(loaded_value[slot].reshape(value[last].shape), value[last])


# ----------------------------------------------------------------------------- rules at their boundaries


def judge(case: Case) -> Exception | None:
    """The call's error (None when accepted); on error, nothing may have been written."""
    before = [t.clone() for t in case.args[2:4] if t is not None]
    try:
        ascend_kv.reshape_and_cache(*case.args, **case.kwargs)
    except (TypeError, ValueError) as error:
        after = [t for t in case.args[2:4] if t is not None]
        assert all(bits_equal(a, b) for a, b in zip(after, before)), "a rejected call wrote"
        return error
    return None


def replaced(case: Case, index: int, value: Any) -> Case:
    args = list(case.args)
    args[index] = value
    return Case(tuple(args), dict(case.kwargs))


def nd(slots: list[int], **kw: Any) -> Case:
    return reshape_and_cache_case("nd", slots, **kw)


def nz(slots: list[int], **kw: Any) -> Case:
    return reshape_and_cache_case("nz", slots, **kw)


def one_cache_twice(case: Case) -> Case:
    return replaced(case, 3, case.args[2])


def tokens_in_cache(case: Case, token: int, cache: int) -> Case:
    """``case`` with its key (``token`` 0) or value (1) read from the first rows of a cache (``cache`` 2 or 3)."""
    tokens = case.args[token]
    rows = case.args[cache].reshape(-1, *tokens.shape[1:])[: tokens.shape[0]]
    return replaced(case, token, rows)


RULES: list[tuple[str, Callable[[], Case], type | None, str]] = [
    # slots: the last in range and the first out; padding; duplicates
    ("last slot", lambda: nd([63]), None, ""),
    ("one past the last slot", lambda: nd([64]), ValueError,
     "slot_mapping[0] = 64 is out of range: the caches hold 64 slots (num_blocks 4 x block_size 16)"),
    ("padding -1", lambda: nd([-1, 3]), None, ""),
    ("padding repeated", lambda: nd([-1, -1]), None, ""),
    ("duplicate slot", lambda: nd([3, 9, 3]), None, ""),
    ("every token to slot 0", lambda: nd([0, 0, 0]), None, ""),
    ("slots == tokens", lambda: nd([1, 2], num_tokens=2), None, ""),
    ("fewer slots than tokens", lambda: nd([1], num_tokens=2), None, ""),
    ("more slots than tokens", lambda: replaced(nd([1], num_tokens=1), 4, torch.tensor([1, 2])), ValueError,
     "slot_mapping has 2 entries, more than num_tokens = 1"),
    ("float slots", lambda: replaced(nd([1]), 4, torch.tensor([1.0])), TypeError, "slot_mapping must have dtype"),
    ("2-D slots", lambda: replaced(nd([1]), 4, torch.tensor([[1]])), ValueError,
     "slot_mapping must be [n] flat slots or [n, 2] (block, offset) pairs, got shape (1, 1)"),
    ("zero tokens", lambda: nd([]), None, ""),
    # layouts and modes
    ("bare int layout", lambda: Case(nd([1]).args, {"kv_cache_cfg": 0}), TypeError, "an int is ambiguous"),
    ("unknown layout", lambda: Case(nd([1]).args, {"kv_cache_cfg": "hnd"}), ValueError, "'nd' or 'nz'"),
    ("key-only ND", lambda: nd([1], key_only=True), None, ""),
    ("key-only NZ", lambda: nz([1], key_only=True), ValueError, "key-only mode (value and value_cache None) is ND"),
    ("value without value_cache", lambda: replaced(nd([1]), 3, None), ValueError,
     "value_cache is None but value is given"),
    ("bypass with a value", lambda: Case(nd([1]).args, {"kv_cache_cfg": CFG.K_CACHE_V_BYPASS}), ValueError,
     "K_CACHE_V_BYPASS writes the key cache only"),
    ("NZ enum", lambda: Case(nz([1]).args, {"kv_cache_cfg": CFG.K_CACHE_V_CACHE_NZ}), None, ""),
    # dtypes
    ("ND mixed dtypes", lambda: nd([1], value_dtype=torch.bfloat16), None, ""),
    ("ND float32 and float8", lambda: nd([1], key_dtype=torch.float32, value_dtype=torch.float8_e5m2), None, ""),
    ("NZ int8 keys, float16 values", lambda: nz([1], key_dtype=torch.int8, value_dtype=torch.float16,
                                              head_size_k=32), None, ""),
    ("NZ int8 values", lambda: nz([1], key_dtype=torch.float16, value_dtype=torch.int8, head_size_v=32), None, ""),
    ("NZ int8 K and V (C8)", lambda: nz([1], key_dtype=torch.int8, value_dtype=torch.int8, head_size_k=32,
                                        head_size_v=32), None, ""),
    ("NZ float32 keys (E = 8)", lambda: nz([1], key_dtype=torch.float32, head_size_k=8), None, ""),
    ("key not the cache's dtype", lambda: replaced(nd([1]), 0, torch.zeros(1, 2, 16, dtype=torch.bfloat16)),
     TypeError, "key.dtype must equal key_cache.dtype"),
    # shapes
    ("ND unaligned rows (head 7)", lambda: nd([1], head_size_k=7, head_size_v=7), None, ""),
    ("MLA 512 + 64", lambda: nd([1], num_heads=1, head_size_k=512, head_size_v=64), None, ""),
    ("ND head size mismatch", lambda: replaced(nd([1]), 0, torch.zeros(1, 2, 8, dtype=torch.float16)), ValueError,
     "key_cache.shape[2:] (num_heads, head_size) = (2, 16) must equal key.shape[1:] = (2, 8)"),
    ("num_tokens differ", lambda: replaced(nd([1]), 1, torch.zeros(2, 2, 16, dtype=torch.float16)), ValueError,
     "value.shape[0] (num_tokens) = 2 must equal key.shape[0] = 1"),
    ("NZ head of 32 bytes", lambda: nz([1], head_size_k=16, head_size_v=16), None, ""),
    ("NZ head of 16 bytes", lambda: nz([1], num_heads=2, head_size_k=8, head_size_v=16), ValueError,
     "key: head_size * itemsize must be a positive multiple of 32 bytes below 98304 in NZ, got 16"),
    ("NZ block 16", lambda: nz([1], block_size=16), None, ""),
    ("NZ block 8", lambda: nz([1], block_size=8), ValueError, "block_size) = 8 must be a multiple of 16"),
    # aliasing
    ("key_cache is value_cache", lambda: one_cache_twice(nd([1])), ValueError,
     "value_cache shares memory with key_cache"),
    ("key read from key_cache", lambda: tokens_in_cache(nd([5]), 0, 2), ValueError,
     "key_cache shares memory with key, which the operation reads"),
    ("value read from value_cache", lambda: tokens_in_cache(nd([5]), 1, 3), ValueError,
     "value_cache shares memory with value, which the operation reads"),
    ("key read from value_cache", lambda: tokens_in_cache(nd([5]), 0, 3), ValueError,
     "value_cache shares memory with key, which the operation reads"),
]


@pytest.mark.parametrize(("name", "make", "error", "message"), RULES, ids=[r[0] for r in RULES])
def test_each_rule_at_its_boundary(name: str, make: Callable[[], Case], error: type | None, message: str) -> None:
    found = judge(make())
    if error is None:
        assert found is None, f"{name}: {found}"
    else:
        assert isinstance(found, error) and message in str(found), f"{name}: {type(found).__name__}: {found}"


def test_nz_head_bytes_limit() -> None:
    # A head below 98304 bytes is the rule: 49136 float16 values (98272 bytes) pass, 49152 (98304) do not.
    for head, ok in ((49136, True), (49152, False)):
        key = torch.zeros(1, 1, head, dtype=torch.float16)
        cache = torch.zeros(1, head // 16, 16, 16, dtype=torch.float16)
        found = judge(Case((key, key, cache, cache.clone(), torch.tensor([0])), {"kv_cache_cfg": "nz"}))
        assert (found is None) is ok, found
        if not ok:
            assert isinstance(found, ValueError) and "below 98304" in str(found)


# ----------------------------------------------------------------------------- ATB-style object


def test_operation_object_with_each_cache_cfg() -> None:
    case = nd([5, -1, 9])
    expected = expected_of(case)
    out = ReshapeAndCacheOperation(ReshapeAndCacheParam())(*case.args)
    assert out[0] is case.args[2] and bits_equal(out[0], expected[0]) and bits_equal(out[1], expected[1])
    key_only = nd([5, 9], key_only=True)
    expected = expected_of(key_only)
    bypass = ReshapeAndCacheParam(kv_cache_cfg=CFG.K_CACHE_V_BYPASS)
    out = ReshapeAndCacheOperation(bypass)(key_only.args[0], key_only.args[2], key_only.args[4])
    assert out is key_only.args[2] and bits_equal(out, expected[0])
    with pytest.raises(TypeError, match=r"takes \(key, key_cache, slot_mapping\), got 5 arguments"):
        ReshapeAndCacheOperation(bypass)(*case.args)
    nz_case = nz([3])
    out = ReshapeAndCacheOperation(ReshapeAndCacheParam(kv_cache_cfg=CFG.K_CACHE_V_CACHE_NZ))(*nz_case.cloned().args)
    assert bits_equal(out[0], expected_of(nz_case)[0])


@pytest.mark.parametrize("compress", [ReshapeAndCacheParam.CompressType.COMPRESS_TYPE_KVHEAD,
                                      ReshapeAndCacheParam.CompressType.COMPRESS_TYPE_KVHEAD_ROPE])
def test_head_compression_is_refused(compress: ReshapeAndCacheParam.CompressType) -> None:
    with pytest.raises(ValueError, match="compress_type .* is not supported"):
        ReshapeAndCacheOperation(ReshapeAndCacheParam(compress_type=compress))


def test_param_numbering_is_atbs() -> None:
    assert [int(c) for c in CFG] == [0, 1, 2] and [c.name for c in CFG] == [
        "K_CACHE_V_CACHE", "K_CACHE_V_BYPASS", "K_CACHE_V_CACHE_NZ"]
    assert [int(c) for c in ReshapeAndCacheParam.CompressType] == [0, 1, 2]


def test_tokens_past_the_slots_and_padding_write_nothing(backend: str) -> None:
    key = random_bits((4, 2, 16), torch.float16, 1)
    cache = torch.zeros(2, 16, 2, 16, dtype=torch.float16)
    ascend_kv.reshape_and_cache(key, None, cache, None, torch.tensor([-1, 20]))
    assert bits_equal(cache[1, 4], key[1]) and int((cache != 0).flatten(1).any(1).sum()) == 1
