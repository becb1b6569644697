"""The reshape_and_cache kernel on the host model (sim backend), bit for bit against the reference.

Calls go through ``ascend_kv.reshape_and_cache`` with the sim backend requested (:func:`test_sim.on_the_sim`)
under core counts 1, 2, 7, 40 and 48 and UB sizes small enough to force many groups, row
segments and staged windows. ND rows of any byte size (7 and 33 float16 elements are not
32-byte multiples), MLA's 512 + 64, key-only, NZ in ATB's six dtype pairs with block sizes 16
and 128; key/value as column slices of a fused QKV buffer and caches as views of wider buffers,
written in place with the bytes around them watched. Then raw slot values (the safe semantics): slots
nobody checked reach the kernels on the fake NPU (:func:`test_sim.on_the_kernels`, the host build as
the NPU kernel library); the operator's checks before the kernels, and the tiling.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from typing import Any

import pytest
import safe_reference
import torch
from calls import ReshapeAndCacheArgs
from cases import (
    DTYPE_PAIRS,
    EXTREMES,
    ND,
    NZ,
    Case,
    bits_equal,
    cloned,
    garbage,
    random_bits,
    reshape_and_cache_case,
    reshape_and_cache_cases,
)
from hypothesis import given
from hypothesis import strategies as st
from test_kernels_safe import INDEX_DTYPES
from test_sim import (
    CORES,
    DEFAULT_UB,
    SIM,
    UB_SIZES,
    assert_gaps_unchanged,
    kernels_on_the_fake_npu,
    on_the_kernels,
    on_the_sim,
    outside_reason,
    ran_on,
)

import ascend_kv
from ascend_kv.backends import sim
from ascend_kv.tools import reference


def reshape_args(case: Case) -> ReshapeAndCacheArgs:
    key, value, key_cache, value_cache, slot_mapping = case.args
    layout = ND if case.kwargs["kv_cache_cfg"] == "nd" else NZ
    return ReshapeAndCacheArgs(layout, key, value, key_cache, value_cache, slot_mapping)


def assert_reshape_matches(case: Case) -> None:
    """The kernel writes the caches as the reference does (views in place when the kernel domain
    takes them, else through contiguous copies)."""
    ref = case.cloned()
    key, value, key_cache, value_cache, slots = ref.args
    expected_key, expected_value = reference.reshape_and_cache(
        key, value, key_cache.contiguous(), None if value_cache is None else value_cache.contiguous(), slots,
        **ref.kwargs)
    args = reshape_args(case.cloned())
    on_the_sim(args)
    assert bits_equal(args.key_cache, expected_key)
    assert args.value_cache is None or bits_equal(args.value_cache, expected_value)


# ----------------------------------------------------------------------------- fixed workloads


def workloads() -> list[Case]:
    some = [5, 6, 7, -1, 40, 0, 63, 16, 17, 18, 19, 2]  # runs of consecutive slots, padding, block ends
    return [
        reshape_and_cache_case("nd", some, seed=1),
        reshape_and_cache_case("nd", some, key_dtype=torch.bfloat16, index_dtype=torch.int64, seed=2),
        reshape_and_cache_case("nd", some, key_dtype=torch.int8, head_size_k=32, head_size_v=64, seed=3),
        # rows of 2 * 7 * 2 = 28 and 2 * 33 * 2 = 132 bytes: not 32-byte multiples
        reshape_and_cache_case("nd", some, head_size_k=7, head_size_v=33, seed=4),
        reshape_and_cache_case("nd", some, num_heads=1, head_size_k=7, head_size_v=1, block_size=3, num_blocks=22,
                               seed=5),
        reshape_and_cache_case("nd", [9, -1, 30, 31, 0], num_tokens=9, num_heads=1, head_size_k=512,
                               head_size_v=64, seed=6),  # MLA, fewer slots than tokens
        reshape_and_cache_case("nd", some, key_only=True, num_heads=1, head_size_k=576, seed=7),
        reshape_and_cache_case("nd", [], num_tokens=3, seed=8),
        reshape_and_cache_case("nd", [], num_tokens=0, seed=9),
        reshape_and_cache_case("nd", [-1, -5, -(2**31)], seed=10),
        reshape_and_cache_case("nd", list(range(64, 0, -1)), num_blocks=5, seed=11),
        reshape_and_cache_case("nz", some, seed=12),
        reshape_and_cache_case("nz", [200, 201, 202, 203, 5, -1, 511, 128], block_size=128, num_blocks=4,
                               key_dtype=torch.int8, value_dtype=torch.bfloat16, head_size_k=64, seed=13),
        reshape_and_cache_case("nz", [3, 4, 5], num_tokens=5, num_heads=1, head_size_k=512, head_size_v=64,
                               index_dtype=torch.int64, seed=14),
    ]


@pytest.mark.parametrize("ub", UB_SIZES)
@pytest.mark.parametrize("cores", CORES)
def test_fixed_workloads_on_every_core_count_and_ub_size(configure, cores: int, ub: int) -> None:
    configure(cores, ub)
    for case in workloads():
        assert_reshape_matches(case)


@pytest.mark.parametrize("block_size", [16, 128])
@pytest.mark.parametrize(("key_dtype", "value_dtype"), DTYPE_PAIRS)
def test_nz_each_dtype_pair_and_block_size(configure, key_dtype: torch.dtype, value_dtype: torch.dtype,
                                           block_size: int) -> None:
    configure(7, 1024)
    slots = [block_size + 3, block_size + 4, 1, -1, 3 * block_size - 1, 0, 2 * block_size]
    for strided in (False, True):
        assert_reshape_matches(reshape_and_cache_case(
            "nz", slots, num_tokens=9, key_dtype=key_dtype, value_dtype=value_dtype, num_heads=2,
            head_size_k=32 // key_dtype.itemsize * 2, head_size_v=32 // value_dtype.itemsize, block_size=block_size,
            num_blocks=3, strided=strided, seed=block_size))


@given(case=reshape_and_cache_cases(), cores=st.sampled_from(CORES), ub=st.sampled_from(UB_SIZES + [512, 4096]))
def test_any_case_any_config(configure, case: Case, cores: int, ub: int) -> None:
    configure(cores, ub)
    assert_reshape_matches(case)


def test_prefill_runs_longer_than_a_buffer(configure) -> None:
    """2048 tokens into consecutive slots of 16 blocks of 128: long runs split over cores and buffers."""
    configure(40, DEFAULT_UB)
    assert_reshape_matches(reshape_and_cache_case("nd", list(range(2048)), num_heads=8, head_size_k=128,
                                                  head_size_v=128, block_size=128, num_blocks=16, seed=20))


# ----------------------------------------------------------------------------- strided views, in place


@pytest.mark.parametrize("layout", ["nd", "nz"])
@pytest.mark.parametrize("cores", [1, 2, 7])
def test_fused_qkv_slices_and_cache_views_in_place(configure, layout: str, cores: int) -> None:
    """key/value column slices of one QKV buffer; the caches block by block in one buffer whose other
    bytes (and those of every buffer read) must not change."""
    configure(cores, 2048)
    nb, bs, heads, hs = 4, 16, 2, 16
    row = heads * hs  # [tokens, 5 + q + k + v]: key and value rows contiguous, 101 elements apart
    qkv = random_bits((11, 5 + 3 * row), torch.float16, 1)
    key = qkv[:, 5 + row:5 + 2 * row].unflatten(1, (heads, hs))
    value = qkv[:, 5 + 2 * row:].unflatten(1, (heads, hs))
    shape = (nb, 2, bs, row + 3) if layout == "nd" else (nb, 2, row // 16 + 1, bs, 16)
    buffer = random_bits(shape, torch.float16, 2)
    if layout == "nd":  # token rows 1 element into 35-element slots, K and V block by block
        key_cache, value_cache = (buffer[:, k, :, 1:1 + row].unflatten(-1, (heads, hs)) for k in (0, 1))
    else:
        key_cache, value_cache = buffer[:, 0, 1:], buffer[:, 1, :-1]
    slots = torch.tensor([17, 18, 19, -1, 63, 0, 30, 31, 32, 2], dtype=torch.int64)
    args = ReshapeAndCacheArgs(ND if layout == "nd" else NZ, key, value, key_cache, value_cache, slots)
    assert outside_reason(ascend_kv.reshape_and_cache, key, value, key_cache, value_cache, slots,
                          kv_cache_cfg=layout) is None
    expected_key, expected_value = reference.reshape_and_cache(key, value, key_cache.clone(), value_cache.clone(),
                                                               slots, kv_cache_cfg=layout)
    cache_before, qkv_before = buffer.clone(), qkv.clone()
    on_the_sim(args)
    assert bits_equal(key_cache, expected_key) and bits_equal(value_cache, expected_value)
    assert_gaps_unchanged(buffer, cache_before, key_cache, value_cache)
    assert bits_equal(qkv, qkv_before)


def test_nd_slots_strided_and_rows_unaligned_in_place(configure) -> None:
    """Slots two rows apart, rows of 66 bytes inside 80-byte slots: DataCopyPad's exact bytes only."""
    configure(3, 512)
    buffer = random_bits((3, 8, 1, 40), torch.float16, 3)
    cache = buffer[:, ::2, :, 2:35]  # [3, 4, 1, 33]
    key = random_bits((6, 1, 33), torch.float16, 4)
    slots = torch.tensor([1, 2, 3, 11, -3, 4], dtype=torch.int32)
    args = ReshapeAndCacheArgs(ND, key, None, cache, None, slots)
    assert outside_reason(ascend_kv.reshape_and_cache, key, None, cache, None, slots) is None
    expected, _ = reference.reshape_and_cache(key, None, cache.clone(), None, slots)
    before = buffer.clone()
    on_the_sim(args)
    assert bits_equal(cache, expected)
    assert_gaps_unchanged(buffer, before, cache)


def test_outside_the_domain_runs_on_contiguous_copies(configure) -> None:
    """Token rows that are not contiguous (heads and head dims transposed) give the reference's
    answer, written back into the caller's caches."""
    configure(7, 1024)
    case = reshape_and_cache_case("nd", [4, 9, -1, 2], seed=30)
    expected_key, expected_value = reference.reshape_and_cache(*case.cloned().args, **case.kwargs)
    key, value, key_cache, value_cache, slots = case.args
    transposed = key.transpose(1, 2).contiguous().transpose(1, 2)
    args = ReshapeAndCacheArgs(ND, transposed, value, key_cache, value_cache, slots)
    reason = outside_reason(ascend_kv.reshape_and_cache, transposed, value, key_cache, value_cache, slots)
    assert "key has sizes (4, 2, 16)" in (reason or "")
    on_the_sim(args)
    assert bits_equal(key_cache, expected_key) and bits_equal(value_cache, expected_value)


# ----------------------------------------------------------------------------- raw slot values


@pytest.fixture(scope="module")
def kernels() -> Iterator[None]:
    """Calls on the fake NPU run the kernels (the host build as the NPU kernel library)."""
    with kernels_on_the_fake_npu():
        yield



def widened(cache: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(buffer, view)``: ``cache``'s values in a view of a random-bits buffer, one slot (ND) or
    piece (NZ) wider before and two after in every block."""
    shape = list(cache.shape)
    shape[1] += 3
    buffer = random_bits(tuple(shape), cache.dtype, seed)
    view = buffer.narrow(1, 1, cache.shape[1])
    view.copy_(cache)
    return buffer, view


@st.composite
def raw_calls(draw: st.DrawFn) -> tuple[ReshapeAndCacheArgs, list[torch.Tensor]]:
    """``(args with slots nobody checked, the buffers the caches are views of)``; no slot twice."""
    args = reshape_args(draw(reshape_and_cache_cases()))
    dtype = draw(st.sampled_from(INDEX_DTYPES))
    slots = draw(st.lists(st.one_of(st.integers(-3, 600), garbage(dtype)), min_size=args.slot_mapping.numel(),
                          max_size=args.slot_mapping.numel(), unique=True))
    key_buffer, key_cache = widened(args.key_cache.contiguous(), 1)
    buffers, value_cache = [key_buffer], None
    if args.value_cache is not None:
        value_buffer, value_cache = widened(args.value_cache.contiguous(), 2)
        buffers.append(value_buffer)
    args = dataclasses.replace(args, key_cache=key_cache, value_cache=value_cache,
                               slot_mapping=torch.tensor(slots, dtype=dtype))
    return args, buffers


@st.composite
def duplicated_calls(draw: st.DrawFn) -> tuple[ReshapeAndCacheArgs, list[torch.Tensor]]:
    """``raw_calls`` whose slot_mapping names some slots several times (garbage values included)."""
    args, buffers = draw(raw_calls())
    slots = args.slot_mapping.tolist()
    if slots:
        repeats = draw(st.lists(st.tuples(st.integers(0, len(slots) - 1), st.integers(0, len(slots) - 1)),
                                min_size=1, max_size=len(slots)))
        for target, source in repeats:
            slots[target] = slots[source]
    return dataclasses.replace(args, slot_mapping=torch.tensor(slots, dtype=args.slot_mapping.dtype)), buffers


def assert_safe_reference_result(args: ReshapeAndCacheArgs, buffers: list[torch.Tensor]) -> None:
    """The kernel writes the caches (views of ``buffers``) as the safe reference does, bit for bit,
    and no byte of the buffers around them."""
    expected = cloned(args)
    safe_reference.reshape_and_cache(expected)
    before = [b.clone() for b in buffers]
    on_the_kernels(args)
    assert bits_equal(args.key_cache, expected.key_cache)
    assert args.value_cache is None or bits_equal(args.value_cache, expected.value_cache)
    for buffer, old, cache in zip(buffers, before, (args.key_cache, args.value_cache)):
        assert cache is not None
        assert_gaps_unchanged(buffer, old, cache)


@given(call=raw_calls(), cores=st.sampled_from(CORES), ub=st.sampled_from(UB_SIZES))
def test_raw_slots_follow_the_safe_semantics(configure, kernels: None, call, cores: int, ub: int) -> None:
    configure(cores, ub)
    assert_safe_reference_result(*call)


@given(call=duplicated_calls(), cores=st.sampled_from(CORES), ub=st.sampled_from(UB_SIZES))
def test_duplicate_raw_slots_keep_the_last_token(configure, kernels: None, call, cores: int, ub: int) -> None:
    """A slot named several times holds the whole row of the last token naming it, on every core
    count: its one owning core writes the tokens in order (two writing cores would be a race the
    host model reports)."""
    configure(cores, ub)
    assert_safe_reference_result(*call)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_slots_at_the_integer_limits_write_nothing(configure, kernels: None, index_dtype: torch.dtype) -> None:
    configure(2, DEFAULT_UB)
    info = torch.iinfo(index_dtype)
    limits = sorted({v for v in EXTREMES if info.min <= v <= info.max} | {4 * 16, 4 * 16 + 1})  # 64 slots: first out
    case = reshape_and_cache_case("nd", limits, index_dtype=index_dtype, seed=40)
    key, value, key_cache, value_cache, slots = case.args
    before = key_cache.clone(), value_cache.clone()
    on_the_kernels(ReshapeAndCacheArgs(ND, key, value, key_cache, value_cache, slots))
    assert bits_equal(key_cache, before[0]) and bits_equal(value_cache, before[1])


DUPLICATES = {
    # slots 5 and 40 named by several tokens, among distinct ones and padding
    "scattered": [5, 40, 6, 5, 7, 40, 8, 5, 40, -1],
    # a run of consecutive slots written twice over (a prefill repeated), the second time shifted
    "runs": [16, 17, 18, 19, 20, 21, 16, 17, 18, 19, 20, 21, 17, 18, 19],
    # one slot for every token, and garbage around it
    "one slot": [9, 9, 2**31 - 1, 9, -(2**31), 9, 64, 9],
}


@pytest.mark.parametrize("cores", CORES)
@pytest.mark.parametrize("layout", ["nd", "nz"])
@pytest.mark.parametrize("slots", DUPLICATES.values(), ids=DUPLICATES.keys())
def test_a_slot_named_twice_holds_its_last_token(configure, kernels: None, slots: list[int], layout: str,
                                                 cores: int) -> None:
    """Exactly the safe reference: the last token naming a slot is in it, whole; every other slot
    as usual."""
    configure(cores, 1024)
    args = reshape_args(reshape_and_cache_case(layout, slots, num_tokens=len(slots), seed=50))
    assert args.value_cache is not None
    key_buffer, key_cache = widened(args.key_cache, 3)
    value_buffer, value_cache = widened(args.value_cache, 4)
    args = dataclasses.replace(args, key_cache=key_cache, value_cache=value_cache)
    assert_safe_reference_result(args, [key_buffer, value_buffer])


# ----------------------------------------------------------------------------- the operator's checks before the kernels
#
# The kernel library checks nothing (ascendc/host/kernel_library.h): the operator's rules refuse a bad
# call before the sim runs, naming the tensor, and write nothing; tensors outside the kernels' domain
# (token rows not contiguous, strided slots) are no longer refused but run on contiguous copies.


def _call() -> dict[str, object]:
    return {"key": random_bits((3, 2, 7), torch.float16, 1), "value": random_bits((3, 2, 5), torch.float16, 2),
            "key_cache": random_bits((4, 8, 2, 7), torch.float16, 3),
            "value_cache": random_bits((4, 8, 2, 5), torch.float16, 4),
            "slot_mapping": torch.tensor([1, 9, -1]), "layout": 1}


def _public(call: dict[str, Any]) -> None:
    layout = {1: "nd", 0: "nz"}.get(call["layout"], call["layout"])
    ascend_kv.reshape_and_cache(call["key"], call["value"], call["key_cache"], call["value_cache"],
                                call["slot_mapping"], kv_cache_cfg=layout)


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"value": None}, ValueError, "value is None but value_cache is given: pass both, or neither for the key-only mode"),
        ({"value_cache": random_bits((3, 8, 2, 5), torch.float16, 5)}, ValueError,
         "value_cache.shape[0] (num_blocks) = 3 must equal key_cache.shape[0] = 4"),
        ({"key": random_bits((3, 2, 8), torch.float16, 6)}, ValueError,
         "key_cache.shape[2:] (num_heads, head_size) = (2, 7) must equal key.shape[1:] = (2, 8)"),
        ({"value": random_bits((3, 2, 5), torch.bfloat16, 7)}, TypeError,
         "value.dtype must equal value_cache.dtype = torch.float16, got torch.bfloat16"),
        ({"slot_mapping": torch.tensor([1, 2, 3, 4])}, ValueError,
         "slot_mapping has 4 entries, more than num_tokens = 3 (key.shape[0])"),
        ({"value": random_bits((2, 2, 5), torch.float16, 8), "slot_mapping": torch.tensor([1, 2, 3])}, ValueError,
         "value.shape[0] (num_tokens) = 2 must equal key.shape[0] = 3"),
        ({"slot_mapping": torch.tensor([1.0, 2.0])}, TypeError, "slot_mapping must have dtype int32 or int64, got float32"),
        ({"slot_mapping": torch.tensor([[1, 2, 0]])}, ValueError,
         "slot_mapping must be [n] flat slots or [n, 2] (block, offset) pairs, got shape (1, 3)"),
        ({"key_cache": torch.zeros((1, 8, 2, 7), dtype=torch.float16).expand(4, 8, 2, 7)}, ValueError,
         ("key_cache is written in place, so each element needs its own memory, but shape (4, 8, 2, 7) with strides "
          "(0, 14, 7, 1)")),
        ({"value_cache": torch.zeros(4 * 8 * 10, dtype=torch.float16).as_strided((4, 8, 2, 5), (79, 10, 5, 1))},
         ValueError, "value_cache is written in place, so each element needs its own memory"),
        # outside the kernels' domain: run on contiguous copies
        ({"slot_mapping": torch.tensor([1, 5, 2, 6])[::2]}, None, None),
        ({"key": random_bits((3, 7, 2), torch.float16, 9).transpose(1, 2)}, None, None),
        ({"key_cache": random_bits((4, 8, 7, 2), torch.float16, 10).transpose(2, 3)}, None, None),
        ({"layout": "bogus"}, ValueError, "kv_cache_cfg must be 'nd' or 'nz', got 'bogus'"),
        ({"layout": 0}, ValueError, "key_cache.shape[3] must be E = 16 for float16 in NZ, got 7"),
        # rows of no bytes: taken, as on the host paths (tests/test_empty_rows.py: every route)
        ({"key": torch.zeros((3, 2, 0), dtype=torch.float16), "key_cache": torch.zeros((4, 8, 2, 0),
                                                                                        dtype=torch.float16)},
         None, None),
    ],
)
def test_checks_every_tensor_before_the_sim(change: dict[str, object], error: type[Exception] | None,
                                            message: str | None) -> None:
    call: dict[str, Any] = {**_call(), **change}
    if error is None:  # accepted: the sim's result is the reference's
        expected = reference.reshape_and_cache(call["key"], call["value"], call["key_cache"].contiguous(),
                                               call["value_cache"].contiguous(), call["slot_mapping"])
        with ran_on(SIM), ascend_kv.use_backend("sim"):
            _public(call)
        assert bits_equal(call["key_cache"], expected[0]) and bits_equal(call["value_cache"], expected[1])
        return
    before = {k: v.clone() for k, v in call.items() if isinstance(v, torch.Tensor)}
    with ascend_kv.use_backend("sim"), pytest.raises(error, match=re.escape(message)):
        _public(call)
    assert all(bits_equal(call[k], v) for k, v in before.items())  # nothing written


def test_written_caches_whose_elements_just_do_not_overlap_are_taken() -> None:
    """value_cache blocks 80 elements apart: one past the 79 its slots reach (79 apart is refused above)."""
    call: dict[str, Any] = _call()
    call["value_cache"] = random_bits((4 * 80,), torch.float16, 11).as_strided((4, 8, 2, 5), (80, 10, 5, 1))
    expected = reference.reshape_and_cache(call["key"], call["value"], call["key_cache"].clone(),
                                           call["value_cache"].clone(), call["slot_mapping"])
    with ran_on(SIM), ascend_kv.use_backend("sim"):
        _public(call)
    assert bits_equal(call["key_cache"], expected[0]) and bits_equal(call["value_cache"], expected[1])


def test_nz_rows_must_be_whole_pieces() -> None:
    cache = random_bits((2, 1, 16, 16), torch.float16, 1)
    key = random_bits((2, 1, 8), torch.float16, 2)
    with ran_on(SIM, calls=0), ascend_kv.use_backend("sim"), pytest.raises(ValueError, match=re.escape(
            "key_cache.shape[1] * E = 16 must equal num_heads * head_size = 8 (key.shape[1] * key.shape[2])")):
        ascend_kv.reshape_and_cache(key, key.clone(), cache, cache.clone(), torch.tensor([0, 1]), kv_cache_cfg="nz")


def test_meta_implementation_traces_without_data() -> None:
    call = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in _call().items()}
    with ran_on(SIM, calls=0), ascend_kv.use_backend("sim"):
        _public(call)
    call["key"] = call["key"][..., :6]
    with pytest.raises(ValueError, match=re.escape("must equal key.shape[1:] = (2, 6)")):
        _public(call)  # the rules still run on shapes


# ----------------------------------------------------------------------------- the tiling


def tiling(monkeypatch: pytest.MonkeyPatch, *, cores: int = 40, ub: int = DEFAULT_UB, **change: object) -> dict[str, int]:
    monkeypatch.setenv("ASCEND_KV_SIM_CORES", str(cores))
    monkeypatch.setenv("ASCEND_KV_SIM_UB_BYTES", str(ub))
    sim.load()
    text = torch.ops.ascend_kv_host.reshape_and_cache_tiling(**{**_call(), **change})
    return {name: int(value) for name, value in (word.split("=") for word in text.split())}


@given(tokens=st.integers(0, 5000), cores=st.integers(1, 64), ub=st.integers(256 // 32, DEFAULT_UB // 32),
       index=st.sampled_from(INDEX_DTYPES))
def test_tiling_cores_and_buffers(monkeypatch: pytest.MonkeyPatch, tokens: int, cores: int, ub: int,
                                  index: torch.dtype) -> None:
    ub *= 32
    key = torch.empty((tokens, 2, 7), dtype=torch.float16)
    t = tiling(monkeypatch, cores=cores, ub=ub, key=key, value=torch.empty((tokens, 2, 5), dtype=torch.float16),
               slot_mapping=torch.zeros(tokens, dtype=index))
    assert t["usedCores"] == min(cores, tokens, 4 * 8) and t["tokens"] == tokens  # 4 blocks of 8 slots
    assert t["stageBytes"] % 32 == 0 and 32 <= t["stageBytes"] <= 16 * 1024 and t["chunkBytes"] % 32 == 0
    assert t["stageBytes"] + 2 * t["chunkBytes"] <= ub
    assert (t["key.rowBytes"], t["value.rowBytes"], t["slotElemBytes"]) == (28, 20, index.itemsize)


def test_tiling_geometry_of_qkv_slices_mla_and_key_only(monkeypatch: pytest.MonkeyPatch) -> None:
    qkv = torch.empty((5, 1, 640), dtype=torch.float16)
    latent = torch.empty((7, 16, 1, 576), dtype=torch.float16)
    t = tiling(monkeypatch, key=qkv[..., 64:576], value=qkv[..., 576:], key_cache=latent[..., :512],
               value_cache=latent[..., 512:], slot_mapping=torch.tensor([1, 2], dtype=torch.int32))
    assert (t["key.rowBytes"], t["key.rowStride"], t["key.rowsSpan"]) == (1024, 1280, 4 * 1280 + 1024)
    assert (t["value.rowBytes"], t["value.rowStride"], t["hasValue"]) == (128, 1280, 1)
    assert (t["key.blockStride"], t["key.slotStride"], t["key.pieceStride"]) == (16 * 1152, 1152, 0)
    assert (t["numBlocks"], t["blockSize"], t["layout"]) == (7, 16, 1)
    t = tiling(monkeypatch, key=qkv[..., 64:576], value=None, key_cache=latent[..., :512], value_cache=None,
               slot_mapping=torch.tensor([1, 2], dtype=torch.int32))
    assert (t["hasValue"], t["value.rowBytes"], t["value.cacheSpan"]) == (0, 0, 0)
    pair = torch.empty((5, 2, 32, 4, 32), dtype=torch.int8)  # NZ [nb, K/V, T/E, bs, E]
    key = torch.empty((3, 4, 256), dtype=torch.int8)
    t = tiling(monkeypatch, key=key, value=key, key_cache=pair[:, 0], value_cache=pair[:, 1], layout=0,
               slot_mapping=torch.tensor([0, 1, 2]))
    assert (t["key.blockStride"], t["key.pieceStride"], t["key.slotStride"]) == (2 * 32 * 128, 128, 32)
    assert (t["key.rowBytes"], t["blockSize"], t["layout"]) == (1024, 4, 0)


def test_no_slots_or_no_cache_launches_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    assert tiling(monkeypatch, slot_mapping=torch.zeros(0, dtype=torch.int64))["usedCores"] == 0
    empty = {"key_cache": torch.empty((0, 8, 2, 7), dtype=torch.float16),
             "value_cache": torch.empty((0, 8, 2, 5), dtype=torch.float16)}
    assert tiling(monkeypatch, **empty)["usedCores"] == 0


def test_tiling_fields_are_printed_in_struct_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every field of the list, a cache group's as ``<group>.<field>``, in the list's order."""
    header = (sim.source_root() / "tiling.h").read_text()

    def entries(macro: str) -> list[tuple[str, str]]:
        body = header[header.index(f"#define {macro}("):]
        body = body[:body.index("\n\n")]
        return re.findall(r"\b(FIELD|CACHE)\((\w+),", body)

    cache = [name for _, name in entries("ASCEND_KV_CACHE_TILING_FIELDS")]
    expected: list[str] = []
    for kind, name in entries("ASCEND_KV_RESHAPE_TILING_FIELDS"):
        expected += [f"{name}.{field}" for field in cache] if kind == "CACHE" else [name]
    assert list(tiling(monkeypatch)) == expected and "value.cacheSpan" in expected

