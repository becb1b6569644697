"""The device fallback (cpu_fallback/on_device.cpp): bit-exact, in place, and never a host read.

Every call goes through the public functions on the fake NPU of tests/fake_npu with the fallback
requested (``use_backend("fallback")``), every tensor, index tensors included, on the device with its
host memory layout (:func:`test_sim.on_the_device_fallback`); ``torch.ops.ascend_kv._runs()`` shows
the device fallback ran it. The fake NPU counts every operation that would read device values back
to the host (it sees the ATen operations the C++ fallback runs), so a count of zero proves the code
would not synchronise on a device. In-domain calls must match ascend_kv/tools/reference.py; garbage
index values (which a call on the device never checks) must match tests/safe_reference.py (the safe
semantics); tensors that are views of wider buffers must change nowhere but in their own elements.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import fake_npu
import pytest
import safe_reference
import torch
from calls import KvCacheArgs, PagedLoadArgs
from cases import (
    INT64_MAX,
    INT64_MIN,
    ND,
    NZ,
    Case,
    IndexPutRecorder,
    bits,
    bits_equal,
    cloned,
    garbage,
    garbage_kv_args,
    garbage_paged_args,
    kv_cache_cases,
    paged_case,
    paged_cases,
    random_bits,
    row_shape,
    scattered,
    unchecked_layer,
)
from hypothesis import given
from hypothesis import strategies as st
from sync_guard import HostReadError, no_host_reads
from test_sim import DEVICE_FALLBACK, on_the_device_fallback, ran_on

import ascend_kv
from ascend_kv.api.params import KvCacheCfg
from ascend_kv.tools import reference

fake_npu.install()
NPU = torch.device("npu", 0)


# ----------------------------------------------------------------------------- in domain: the reference


def kv_args(case: Case, view: Callable[[torch.Tensor], torch.Tensor] = lambda t: t) -> KvCacheArgs:
    """The case's :class:`KvCacheArgs`, index tensors passed through ``view``."""
    new_kv, layer_id, past, token_offset, seq_len = case.args
    layer = view(layer_id) if isinstance(layer_id, torch.Tensor) else layer_id
    return KvCacheArgs(new_kv.reshape(-1, past.shape[-1]), past, layer, view(token_offset), view(seq_len))


def paged_args(case: Case, view: Callable[[torch.Tensor], torch.Tensor] = lambda t: t) -> PagedLoadArgs:
    """The case's :class:`PagedLoadArgs`; outputs not given are given, zero-filled, with the reference's row
    count (the allocating form reads it back: tests below count that read)."""
    key_cache, value_cache, block_table, context_lens = case.args
    kw = case.kwargs
    layout = KvCacheCfg(kw["kv_cache_cfg"])
    cumsum = kw.get("cumsum", False)
    key, value = kw.get("key"), kw.get("value")
    if key is None or value is None:
        rows = reference.paged_cache_load(*case.cloned().args, **case.cloned().kwargs)[0].shape[0]
        key, value = (torch.zeros((rows, *row_shape(layout, c)), dtype=c.dtype) for c in (key_cache, value_cache))
    starts = kw.get("seq_starts")
    return PagedLoadArgs(layout, key_cache, value_cache, view(block_table), view(context_lens),
                         None if starts is None else view(starts), cumsum, key, value)


@given(case=kv_cache_cases(), noncontiguous=st.booleans())
def test_kv_cache_matches_reference(case: Case, noncontiguous: bool) -> None:
    args = kv_args(case.cloned(), scattered if noncontiguous else lambda t: t)
    on_the_device_fallback(args)
    assert bits_equal(args.past, reference.kv_cache(*case.cloned().args))


@given(case=paged_cases(), noncontiguous=st.booleans())
def test_paged_cache_load_matches_reference(case: Case, noncontiguous: bool) -> None:
    args = paged_args(case.cloned(), scattered if noncontiguous else lambda t: t)
    on_the_device_fallback(args)
    expected = reference.paged_cache_load(*case.cloned().args, **case.cloned().kwargs)
    assert bits_equal(args.key, expected[0]) and bits_equal(args.value, expected[1])


def test_nz_int8_keys_with_16_bit_values_match_reference() -> None:
    for value_dtype in (torch.float16, torch.bfloat16):
        case = paged_case(NZ, [5, 40, 0, 17], key_dtype=torch.int8, value_dtype=value_dtype, block_size=16,
                          give_outputs=True, extra_rows=3, seed=3)
        args = paged_args(case.cloned())
        on_the_device_fallback(args)
        expected = reference.paged_cache_load(*case.cloned().args, **case.cloned().kwargs)
        assert bits_equal(args.key, expected[0]) and bits_equal(args.value, expected[1])


#: Row counts up to this are allocated and loaded; beyond it, the device has less memory to spare than the
#: key output needs (32-byte rows), so the allocation's error names the count.
FEW_ROWS = 4096


def allocated_rows(values: list[int], cumsum: bool, expected: int, index_dtype: torch.dtype = torch.int64) -> int:
    """The row count the allocating ``paged_cache_load`` gives outputs for device ``context_lens`` ``values``
    on the device fallback: the outputs' row count when ``expected`` is at most :data:`FEW_ROWS`, else the
    count named by the error of an allocation beyond the device memory. Asserts the one read back the
    allocating form makes (its row count)."""
    batch = len(values) - cumsum
    cache = torch.zeros((1, 16, 1, 16), dtype=torch.float16, device=NPU)
    table = torch.zeros((batch, 1), dtype=torch.int32, device=NPU)
    lens = torch.tensor(values, dtype=index_dtype).to(NPU)
    spare = 2**23 if expected <= FEW_ROWS else FEW_ROWS * 32
    with fake_npu.memory_capacity(fake_npu.memory_in_use() + spare), ascend_kv.use_backend("fallback"), \
            fake_npu.counting() as seen:
        try:
            with ran_on(DEVICE_FALLBACK):
                key, value = ascend_kv.paged_cache_load(cache, cache, table, lens, kv_cache_cfg=ND, cumsum=cumsum)
        except ValueError as error:
            found = re.search(r"key: the output \[(\d+), 1, 16\] that context_lens asks for \((\d+|more than \d+) bytes\) "
                              r"cannot be allocated: ", str(error))
            assert found is not None, error
            rows = int(found.group(1))
            exact = rows * 16 * 2  # the bytes asked for, exactly
            assert found.group(2) == (str(exact) if exact <= INT64_MAX else f"more than {INT64_MAX}")
        else:
            rows = key.shape[0]
            assert value.shape[0] == rows
    assert seen.transfers == 1
    return rows


@given(lens=st.lists(st.integers(0, 2**40), max_size=4), cumsum=st.booleans(), index_dtype=st.sampled_from([torch.int32, torch.int64]))
def test_output_rows_is_the_reference_row_count(lens: list[int], cumsum: bool, index_dtype: torch.dtype) -> None:
    if index_dtype == torch.int32:
        lens = [n % 2**20 for n in lens]
    values = [sum(lens[:i]) for i in range(len(lens) + 1)] if cumsum else lens
    assert allocated_rows(values, cumsum, sum(lens), index_dtype) == sum(lens)


@given(values=st.lists(garbage(torch.int64), min_size=1, max_size=5), cumsum=st.booleans())
def test_output_rows_of_garbage_is_never_negative_nor_wrapped(values: list[int], cumsum: bool) -> None:
    bound = INT64_MAX // len(values)
    lengths = [max(v, 0) for v in values]
    if cumsum:
        assert allocated_rows(values, cumsum, max(values[-1], 0)) == max(values[-1], 0)
    elif max(lengths) <= bound:
        assert allocated_rows(values, cumsum, sum(lengths)) == sum(lengths)
    else:
        assert allocated_rows(values, cumsum, bound) >= bound


# ----------------------------------------------------------------------------- out of domain: the safe semantics


@given(args=garbage_kv_args())
def test_kv_cache_garbage_indices_follow_safe_semantics(args: KvCacheArgs) -> None:
    args = unchecked_layer(args)
    expected = cloned(args)
    safe_reference.kv_cache(expected)
    on_the_device_fallback(args)
    assert bits_equal(args.past, expected.past)


def test_kv_cache_offsets_near_int64_limits_do_not_wrap_into_range() -> None:
    # token_offset - seq_len + j wraps to 1 + j in int64: the exact value is far below 0, so nothing lands.
    past = random_bits((1, 2, 8, 16), torch.float16, 0)
    args = KvCacheArgs(random_bits((4, 16), torch.float16, 1), past.clone(), 0,
                       torch.tensor([INT64_MIN, INT64_MAX]), torch.tensor([INT64_MAX, INT64_MIN]))
    on_the_device_fallback(args)
    assert bits_equal(args.past, past)


@pytest.mark.parametrize("layer_id", [-1, 2, INT64_MIN, INT64_MAX])
@pytest.mark.parametrize("as_tensor", [False, True])
def test_kv_cache_layer_out_of_range_writes_nothing(layer_id: int, as_tensor: bool) -> None:
    """A device layer tensor out of range is skipped; an int layer is a host value, which the operator
    checks: refused, naming it. Either way nothing is written."""
    past = random_bits((2, 2, 8, 16), torch.float16, 0)
    layer = torch.tensor([layer_id]) if as_tensor else layer_id
    args = KvCacheArgs(random_bits((4, 16), torch.float16, 1), past.clone(), layer, torch.tensor([2, 8]),
                       torch.tensor([2, 2]))
    if as_tensor:
        on_the_device_fallback(args)
    else:
        with ran_on(DEVICE_FALLBACK, calls=0), pytest.raises(ValueError, match=re.escape(
                f"layer_id = {layer_id} must be in [0, 2)")):
            on_the_device_fallback(args)
    assert bits_equal(args.past, past)


def _entry(args: PagedLoadArgs, b: int, key: torch.Tensor, value: torch.Tensor) -> PagedLoadArgs:
    """Batch entry ``b`` of a cumsum-mode call alone (its rows do not depend on the others), into ``key``/``value``."""
    starts = None if args.seq_starts is None else args.seq_starts[b:b + 1]
    return PagedLoadArgs(args.layout, args.key_cache, args.value_cache, args.block_table[b:b + 1],
                         args.context_lens[b:b + 2], starts, True, key, value)


def _writes(args: PagedLoadArgs, b: int, out: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Which rows of output ``out`` entry ``b`` writes under the safe semantics ``[rows]`` bool, and with what."""
    blank = getattr(args, out)
    results = []
    for fill in (torch.zeros_like(bits(blank)), torch.full_like(bits(blank), -1)):  # every bit differs
        key, value = args.key.clone(), args.value.clone()
        target = key if out == "key" else value
        bits(target).copy_(fill)
        safe_reference.paged_cache_load(_entry(args, b, key, value))
        results.append(target)
    same = (bits(results[0]) == bits(results[1])).flatten(1).all(1)
    return same, results[0]


def assert_safe_paged(before: PagedLoadArgs, after: PagedLoadArgs) -> None:
    """``after``'s outputs follow the safe semantics from ``before``'s.

    Default mode: exactly the safe reference. Cumsum mode, where a decreasing ``context_lens``
    lets several entries' row ranges cover one row: a row one range covers is exactly what
    that entry alone does to it; a row several cover holds one of their tokens, or keeps its
    bits when one of them skips it (the fallback picks one covering entry per row); a row none
    covers keeps its bits.
    """
    if not before.cumsum:
        expected = cloned(before)
        safe_reference.paged_cache_load(expected)
        assert bits_equal(after.key, expected.key) and bits_equal(after.value, expected.value)
        return
    cl = [int(v) for v in before.context_lens]
    limit = max(before.key.shape[0], before.value.shape[0])
    reach = [(cl[b], cl[b] + min(max(cl[b + 1] - cl[b], 0), limit)) for b in range(len(cl) - 1)]
    for out in ("key", "value"):
        got, original = bits(getattr(after, out)), bits(getattr(before, out))
        writes = [_writes(before, b, out) for b in range(len(reach))]
        for r in range(got.shape[0]):
            covering = [b for b, (first, end) in enumerate(reach) if first <= r < end]
            tokens = [bits(writes[b][1][r]) for b in covering if writes[b][0][r]]
            choices = tokens + ([original[r]] if len(tokens) < len(covering) or not covering else [])
            assert any(torch.equal(got[r], t) for t in choices), f"{out} row {r}: covered by {covering}, no match"


@given(args=garbage_paged_args())
def test_paged_garbage_indices_follow_safe_semantics(args: PagedLoadArgs) -> None:
    before = cloned(args)
    on_the_device_fallback(args)
    assert_safe_paged(before, args)
    assert bits_equal(args.key_cache, before.key_cache) and bits_equal(args.value_cache, before.value_cache)


@pytest.mark.parametrize(("cumsum", "context_lens"), [
    (False, [3, INT64_MAX]),                  # the second entry's end would wrap unless counts are capped at the rows
    (False, [INT64_MAX, INT64_MAX, 5]),       # prefix sums would wrap back into range
    (True, [-5, INT64_MAX]),                  # the difference wraps negative; exactly, it covers every row from -5
    (True, [INT64_MIN, 3, 6]),                # a wrapping difference, then an ordinary entry
])
def test_paged_lengths_near_int64_limits_follow_safe_semantics(cumsum: bool, context_lens: list[int]) -> None:
    batch = len(context_lens) - cumsum
    args = PagedLoadArgs(ND, random_bits((4, 4, 1, 16), torch.float16, 0), random_bits((4, 4, 1, 16), torch.float16, 1),
                         torch.arange(4 * batch).reshape(batch, 4) % 4, torch.tensor(context_lens), None, cumsum,
                         random_bits((12, 1, 16), torch.float16, 2), random_bits((9, 1, 16), torch.float16, 3))
    before = cloned(args)
    on_the_device_fallback(args)
    assert_safe_paged(before, args)
    assert not bits_equal(args.key, before.key)                                  # something landed


def test_paged_cumsum_overlap_takes_one_writer_and_unique_rows_exactly() -> None:
    # context_lens [0, 6, 2, 9]: entry 0 rows 0..5, entry 1 none (decreasing), entry 2 rows 2..8 (rows 2..5 twice).
    key_cache = random_bits((4, 4, 1, 16), torch.float16, 0)
    value_cache = random_bits((4, 4, 1, 16), torch.float16, 1)
    table = torch.tensor([[0, 1], [2, 3], [3, 2]])
    args = PagedLoadArgs(ND, key_cache, value_cache, table, torch.tensor([0, 6, 2, 9]), None, True,
                         random_bits((10, 1, 16), torch.float16, 2), random_bits((10, 1, 16), torch.float16, 3))
    before = cloned(args)
    on_the_device_fallback(args)
    assert_safe_paged(before, args)
    assert bits_equal(args.key[9], before.key[9])                                # no writer: kept
    assert bits_equal(args.key[8], key_cache[2, 2])                              # entry 2 alone: j = 6


# ----------------------------------------------------------------------------- strides: views of wider buffers


def embedded(t: torch.Tensor, before: int, after: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A random-bits buffer with ``before``/``after`` extra last-dim elements, and the view holding ``t``."""
    buffer = random_bits((*t.shape[:-1], before + t.shape[-1] + after), t.dtype, seed)
    view = buffer[..., before:before + t.shape[-1]]
    view.copy_(t)
    return buffer, view


def expected_buffer(buffer: torch.Tensor, before: int, result: torch.Tensor) -> torch.Tensor:
    """``buffer`` as it was, with the view at ``before`` replaced by ``result``: only the view may change."""
    expected = buffer.clone()
    expected[..., before:before + result.shape[-1]] = result
    return expected


@given(case=kv_cache_cases(), pad=st.tuples(st.integers(0, 3), st.integers(0, 3)), strided_new=st.booleans())
def test_kv_cache_into_a_column_slice_changes_nothing_else(case: Case, pad: tuple[int, int], strided_new: bool) -> None:
    new_kv, layer_id, past, token_offset, seq_len = case.cloned().args
    buffer, view = embedded(past, *pad, seed=11)
    original = buffer.clone()
    flat_new = new_kv.reshape(-1, past.shape[-1])
    if strided_new:
        flat_new = embedded(flat_new, 1, 2, seed=12)[1]
    on_the_device_fallback(KvCacheArgs(flat_new, view, layer_id, token_offset, seq_len))
    assert bits_equal(buffer, expected_buffer(original, pad[0], reference.kv_cache(*case.cloned().args)))


@given(args=garbage_kv_args(), half=st.integers(0, 1))
def test_kv_cache_garbage_into_one_half_of_a_kv_buffer_changes_nothing_else(args: KvCacheArgs, half: int) -> None:
    args = unchecked_layer(args)
    both = torch.stack([args.past, random_bits(args.past.shape, args.past.dtype, 5)], 1)   # [L, 2, B, S, H]
    both = both if half == 0 else both.flip(1)
    original = both.clone()
    expected = cloned(args)
    safe_reference.kv_cache(expected)
    on_the_device_fallback(KvCacheArgs(args.new_kv, both[:, half], args.layer_id, args.token_offset, args.seq_len))
    original[:, half] = expected.past
    assert bits_equal(both, original)


def test_paged_mla_column_slices_of_one_cache_buffer() -> None:
    # One [num_blocks, block_size, 1, 576] buffer: keys are columns 0..511, values 512..575.
    buffer = random_bits((6, 16, 1, 576), torch.bfloat16, 0)
    original = buffer.clone()
    key_cache, value_cache = buffer[..., :512], buffer[..., 512:]
    table = torch.tensor([[3, 0, -1], [5, 2, 1]], dtype=torch.int32)
    lens = torch.tensor([20, 40], dtype=torch.int32)
    key = random_bits((60, 1, 512), torch.bfloat16, 1)
    value_buffer = random_bits((60, 1, 80), torch.bfloat16, 2)                   # value rows 64 of 80 apart
    args = PagedLoadArgs(ND, key_cache, value_cache, table, lens, None, False, key, value_buffer[..., 8:72])
    expected = reference.paged_cache_load(key_cache.clone(), value_cache.clone(), table, lens, kv_cache_cfg=ND)
    value_before = value_buffer.clone()
    on_the_device_fallback(args)
    assert bits_equal(key, expected[0])
    assert bits_equal(value_buffer, expected_buffer(value_before, 8, expected[1]))
    assert bits_equal(buffer, original)


@given(args=garbage_paged_args(), pads=st.tuples(st.integers(0, 2), st.integers(0, 2)))
def test_paged_strided_caches_and_outputs_change_nothing_else(args: PagedLoadArgs, pads: tuple[int, int]) -> None:
    # Key and value caches block by block in one buffer when they have one shape and dtype (else each in its own
    # wider buffer), and outputs that are column slices of wider rows with random bits in the gaps.
    before = cloned(args)
    if args.key_cache.shape == args.value_cache.shape and args.key_cache.dtype == args.value_cache.dtype:
        caches = torch.stack([args.key_cache, args.value_cache], 1)              # [num_blocks, 2, ...]
        key_cache, value_cache = caches[:, 0], caches[:, 1]
    else:
        key_cache, value_cache = embedded(args.key_cache, 1, 0, 7)[1], embedded(args.value_cache, 0, 2, 8)[1]
    key_buffer, key = embedded(args.key, pads[0], 1, 9)
    value_buffer, value = embedded(args.value, 1, pads[1], 10)
    key_original, value_original = key_buffer.clone(), value_buffer.clone()
    strided = PagedLoadArgs(args.layout, key_cache, value_cache, args.block_table, args.context_lens,
                            args.seq_starts, args.cumsum, key, value)
    on_the_device_fallback(strided)
    assert_safe_paged(before, strided)
    assert bits_equal(key_buffer, expected_buffer(key_original, pads[0], key))
    assert bits_equal(value_buffer, expected_buffer(value_original, 1, value))
    assert bits_equal(key_cache, before.key_cache) and bits_equal(value_cache, before.value_cache)


# ----------------------------------------------------------------------------- race freedom of the one index_put_


def index_puts(args: KvCacheArgs) -> IndexPutRecorder:
    """The index_put_ calls the device runs for ``args`` on the device fallback (the fake NPU records the
    writes the C++ fallback makes)."""
    recorder = IndexPutRecorder()
    with fake_npu.recording("aten::_index_put_impl_") as calls:
        on_the_device_fallback(args)
    recorder.calls = [(indices, values, accumulate) for _, indices, values, accumulate, *_ in (c.args for c in calls)]
    return recorder


@given(args=garbage_kv_args())
def test_kv_cache_changes_each_place_at_most_once(args: KvCacheArgs) -> None:
    # index_put_ on a parallel device leaves duplicate indices with different values undefined.
    recorder = index_puts(unchecked_layer(args))
    assert len(recorder.calls) <= 1
    recorder.require_one_change_per_place()


@pytest.mark.parametrize("layer,offsets", [(2, [3, 3]), (0, [0, 19])])
def test_kv_cache_that_writes_nothing_changes_no_byte(layer: int, offsets: list[int]) -> None:
    """A layer out of range (a device tensor: an int is checked), or every position out of range: nothing
    is named, so no byte of past changes, not even one rewritten with its own earlier bits (a concurrent
    writer's update would be lost)."""
    past = random_bits((2, 2, 16, 16), torch.float16, seed=3)
    before = past.clone()
    args = KvCacheArgs(torch.ones(4, 16, dtype=torch.float16), past, torch.tensor([layer]), torch.tensor(offsets),
                       torch.tensor([2, 2]))
    recorder = index_puts(args)
    assert len(recorder.calls) == 1  # the fallback's one write ran
    recorder.require_no_change()
    assert bits_equal(past, before)


# ----------------------------------------------------------------------------- the guards themselves


@pytest.mark.parametrize("read", [
    lambda x: x[0].item(), lambda x: int(x[1]), lambda x: bool(x[0]), lambda x: x.tolist(), lambda x: x.numpy(),
    lambda x: x[x > 2], lambda x: x.clone().__setitem__(x > 2, x[:2]), lambda x: torch.nonzero(x),
    lambda x: torch.where(x > 2), lambda x: torch.masked_select(x, x > 2), lambda x: torch.unique(x),
    lambda x: torch.repeat_interleave(x), lambda x: torch.equal(x, x), lambda x: x[torch.tensor(1)],
    lambda x: torch.empty(2, device="meta").to("cpu"),
], ids=["item", "int", "bool", "tolist", "numpy", "mask-index", "mask-assign", "nonzero", "where-1", "masked_select",
        "unique", "repeat_interleave", "equal", "0-d-index", "cross-device-copy"])
def test_guard_catches_host_reads(read: Callable[[torch.Tensor], Any]) -> None:
    with pytest.raises(HostReadError), no_host_reads():
        read(torch.arange(6))


def test_guard_lets_value_free_ops_through_and_restores_methods() -> None:
    x = torch.arange(6)
    with no_host_reads():
        torch.repeat_interleave(x, output_size=15)
        torch.where(x > 2, x, 0).cumsum(0)
    assert x.tolist() == [0, 1, 2, 3, 4, 5]


def test_the_fake_npu_counts_the_reads_the_operators_make_inside_cpp() -> None:
    """The fallback is C++, out of a Python guard's sight: the fake NPU counts at the device, so a read
    planted in it would be counted as the operators' own documented reads are: the allocating load's row
    count (an item()), full validation's one read of the index values; and a masked write, which the
    fallback once planted (``out[valid] = ...``) would make, is a read too."""
    case = paged_case(ND, [5, 3], block_size=4, num_blocks=4)
    key_cache, value_cache, table, lens = (t.to(NPU) for t in case.args)
    with ascend_kv.use_backend("fallback"):
        with ran_on(DEVICE_FALLBACK), fake_npu.counting() as seen:
            key, _ = ascend_kv.paged_cache_load(key_cache, value_cache, table, lens, kv_cache_cfg=ND)
        assert seen.transfers == 1 and key.shape[0] == 8
        with ran_on(DEVICE_FALLBACK), fake_npu.counting() as seen:
            ascend_kv.paged_cache_load(key_cache, value_cache, table, lens, kv_cache_cfg=ND, key=key, value=key.clone())
        assert seen.transfers == 0
        with ran_on(DEVICE_FALLBACK), fake_npu.counting() as seen, ascend_kv.validate("full"):
            ascend_kv.paged_cache_load(key_cache, value_cache, table, lens, kv_cache_cfg=ND, key=key, value=key.clone())
        assert seen.transfers == 1
    valid = torch.tensor([True, False] * 4, device=NPU)
    with fake_npu.counting() as seen:
        key[valid] = key.clone()[valid]
    assert seen.transfers >= 1


def test_the_fake_npu_records_what_the_cpp_fallback_runs() -> None:
    """The recording the tests above read: host copies of a recorded op's arguments, taken when it runs
    inside the operator, and the devices they were on; nothing outside the block, nothing of other ops."""
    args = KvCacheArgs(torch.ones(2, 16, dtype=torch.float16), torch.zeros(1, 1, 4, 16, dtype=torch.float16), 0,
                       torch.tensor([3]), torch.tensor([2]))
    with fake_npu.recording("aten::_index_put_impl_") as calls:
        on_the_device_fallback(args)
    (call,) = calls
    assert call.name == "aten::_index_put_impl_" and call.devices == ["npu:0", "npu:0", "npu:0", "", ""]
    _, indices, values, accumulate, _ = call.args
    assert accumulate and [i.tolist() for i in indices] == [[0, 0], [0, 0], [1, 2]]
    assert bool((values == torch.ones(1, dtype=torch.float16).view(torch.int16)).all())  # new - old bits: 1.0 - 0.0
    assert bits_equal(args.past[0, 0, 1:3], torch.ones(2, 16, dtype=torch.float16))
    with fake_npu.recording("aten::_index_put_impl_") as calls:
        torch.zeros(3, device=NPU).add_(1)
    assert calls == []


# ----------------------------------------------------------------------------- meta tensors: no values to read at all


def test_meta_tensors_which_hold_no_values_reach_no_backend() -> None:
    """With the fallback requested, calls on meta tensors run the operators' shape rules only (every
    value-free check), in each mode; the allocating load, whose row count is a value, is refused."""
    def meta(*shape: int, dtype: torch.dtype = torch.float16) -> torch.Tensor:
        return torch.empty(shape, dtype=dtype, device="meta")

    with ran_on(DEVICE_FALLBACK, calls=0), ascend_kv.use_backend("fallback"):
        ascend_kv.kv_cache(meta(5, 16), meta(1, dtype=torch.int32), meta(2, 3, 8, 16), meta(3, dtype=torch.int32),
                           meta(3, dtype=torch.int64))
        for layout, cache_shape, out_shape in ((ND, (4, 16, 2, 16), (7, 2, 16)), (NZ, (4, 2, 16, 16), (7, 32))):
            for cumsum in (False, True) if layout == ND else (False,):
                ascend_kv.paged_cache_load(
                    meta(*cache_shape), meta(*cache_shape), meta(3, 4, dtype=torch.int32),
                    meta(3 + cumsum, dtype=torch.int64), kv_cache_cfg=layout, cumsum=cumsum,
                    seq_starts=meta(3, dtype=torch.int32) if layout == ND else None, key=meta(*out_shape),
                    value=meta(*out_shape))
        with pytest.raises(RuntimeError, match="data-dependent shape"):
            ascend_kv.paged_cache_load(meta(4, 16, 2, 16), meta(4, 16, 2, 16), meta(3, 4, dtype=torch.int32),
                                       meta(3, dtype=torch.int64), kv_cache_cfg=ND)
