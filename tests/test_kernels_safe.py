"""Index values nobody checked: the kernels (host build) follow the safe semantics.

Index tensors on a device are never read back by a call, so the kernels meet raw values:
negative, huge, the int32/int64 limits, lengths that sum to nonsense, decreasing cumulative
lengths, bad block ids and columns. The calls here go through the public functions on the fake
NPU of an A2 part with the kernels' host build as its kernel library (every tensor, index tensors
included, on the device with its host memory layout: :func:`test_sim.on_the_kernels`). Whatever
the values are, the result must equal tests/safe_reference.py bit for bit (in-range tokens move,
the rest are skipped), and no byte outside the tensors' elements may change: the data tensors here
are views into wider buffers whose other bytes are watched. Each index tensor is int32 or int64
independently. The host model stops the kernel on any access outside a tensor's elements, so a
pass also means nothing outside was read. An int ``layer_id`` is a host value, which the operator
always checks: an out-of-range layer is given as a one-element device tensor.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import safe_reference
import torch
from calls import KvCacheArgs, PagedLoadArgs
from cases import (
    ANY_DTYPE_PAIRS,
    INT64_MAX,
    INT64_MIN,
    ND,
    NZ,
    bits_equal,
    cloned,
    mostly,
    random_bits,
    random_cache,
    row_shape,
)
from hypothesis import given
from hypothesis import strategies as st
from test_sim import CORES, UB_SIZES, assert_gaps_unchanged, kernels_on_the_fake_npu, on_the_kernels

from ascend_kv.api.arguments import nz_elements
from ascend_kv.operators.library import cache_dtypes


@pytest.fixture(scope="module", autouse=True)
def kernels() -> Iterator[None]:
    """Calls on the fake NPU run the kernels (the host build as the NPU kernel library)."""
    with kernels_on_the_fake_npu():
        yield


INDEX_DTYPES = [torch.int32, torch.int64]

CACHE_DTYPES = cache_dtypes()


def values(draw: st.DrawFn, plausible: st.SearchStrategy[int], count: int) -> torch.Tensor:
    dtype = draw(st.sampled_from(INDEX_DTYPES))
    return torch.tensor(draw(st.lists(mostly(plausible, dtype), min_size=count, max_size=count)), dtype=dtype)


def inside(buffer: torch.Tensor, shape: tuple[int, ...], margin: int) -> torch.Tensor:
    """A view of ``shape`` in the middle of ``buffer`` (``margin`` elements spare in every dim)."""
    return buffer[tuple(slice(margin, margin + n) for n in shape)]


@st.composite
def kv_calls(draw: st.DrawFn) -> tuple[KvCacheArgs, torch.Tensor]:
    """``(args, buffer past is a view of)``."""
    dtype = draw(st.sampled_from(CACHE_DTYPES))
    layers, batch, max_seq_len = draw(st.integers(1, 3)), draw(st.integers(0, 5)), draw(st.integers(1, 10))
    hidden = nz_elements(dtype) * draw(st.integers(1, 2))
    ntokens = draw(st.integers(0, 12))
    seed = draw(st.integers(0, 2**31))
    margin = draw(st.sampled_from([0, 1]))
    buffer = random_bits((layers + 2 * margin, batch + 2 * margin, max_seq_len + 2 * margin, hidden + 64 * margin),
                         dtype, seed)
    past = inside(buffer, (layers, batch, max_seq_len, hidden), margin)
    new_kv = random_bits((ntokens, hidden), dtype, seed + 1)
    seq_len = values(draw, st.integers(-1, 6), batch)
    token_offset = values(draw, st.integers(-1, max_seq_len + 3), batch)
    layer: int | torch.Tensor = draw(st.integers(-1, layers))
    if draw(st.booleans()) or not 0 <= layer < layers:  # an int layer must be in range: the operator checks it
        layer = values(draw, st.integers(0, layers - 1), 1) if 0 <= layer < layers else torch.tensor([layer])
    return KvCacheArgs(new_kv, past, layer, token_offset, seq_len), buffer


@given(call=kv_calls(), cores=st.sampled_from(CORES), ub=st.sampled_from(UB_SIZES))
def test_kv_cache_raw_indices_follow_the_safe_semantics(configure, call, cores: int, ub: int) -> None:
    configure(cores, ub)
    args, buffer = call
    expected = cloned(args)
    safe_reference.kv_cache(expected)
    before = buffer.clone()
    on_the_kernels(args)
    assert bits_equal(args.past, expected.past)
    if buffer.numel() != args.past.numel():
        assert_gaps_unchanged(buffer, before, args.past)


def test_kv_cache_offsets_at_the_int64_limits_never_wrap_into_past(configure) -> None:
    """token_offset - seq_len is far below zero here; in wrapping int64 it would be 1."""
    configure(2, UB_SIZES[-1])
    past = random_bits((1, 2, 8, 16), torch.float16, 0)
    args = KvCacheArgs(random_bits((4, 16), torch.float16, 1), past.clone(), 0,
                       torch.tensor([INT64_MIN, INT64_MAX]), torch.tensor([INT64_MAX, INT64_MIN]))
    on_the_kernels(args)
    assert bits_equal(args.past, past)


@st.composite
def paged_calls(draw: st.DrawFn) -> tuple[PagedLoadArgs, torch.Tensor, torch.Tensor]:
    """``(args, buffer key is a view of, buffer value is a view of)``."""
    layout = draw(st.sampled_from([ND, NZ]))
    key_dtype, value_dtype = draw(st.sampled_from(
        ANY_DTYPE_PAIRS))
    block_size = draw(st.sampled_from([1, 2, 5, 16] if layout == ND else [16, 32]))
    num_blocks, batch, columns = draw(st.integers(1, 5)), draw(st.integers(1, 4)), draw(st.integers(1, 4))
    num_heads = draw(st.sampled_from([1, 2]))
    largest = max(nz_elements(key_dtype), nz_elements(value_dtype))
    unit = largest // math.gcd(largest, num_heads)
    head_k, head_v = unit * draw(st.integers(1, 2)), unit * draw(st.integers(1, 2))
    seed = draw(st.integers(0, 2**31))
    key_cache = random_cache(layout, num_blocks, block_size, num_heads, head_k, key_dtype, seed)
    value_cache = random_cache(layout, num_blocks, block_size, num_heads, head_v, value_dtype, seed + 1)
    cumsum = layout == ND and draw(st.booleans())  # NZ takes neither cumsum nor seq_starts (the operator refuses them)
    span = 3 * block_size
    table = values(draw, st.integers(0, num_blocks - 1), batch * columns).reshape(batch, columns)
    if cumsum:  # cumulative lengths, mostly non-decreasing
        steps = draw(st.lists(st.integers(-2, span), min_size=batch, max_size=batch))
        start = draw(st.integers(0, 3))
        plausible = [start + sum(steps[:i]) for i in range(batch + 1)]
        dtype = draw(st.sampled_from(INDEX_DTYPES))
        context_lens = torch.tensor([draw(mostly(st.just(v), dtype)) for v in plausible], dtype=dtype)
    else:
        context_lens = values(draw, st.integers(-1, span), batch)
    seq_starts = values(draw, st.integers(-2, span), batch) if layout == ND and draw(st.booleans()) else None
    buffers = []
    outputs = []
    for k, cache in enumerate((key_cache, value_cache)):
        row = row_shape(layout, cache)
        rows = draw(st.integers(0, 3 * span))
        buffer = random_bits((rows + 2, math.prod(row) + 64), cache.dtype, seed + 2 + k)
        buffers.append(buffer)
        outputs.append(buffer[1:1 + rows, 32:32 + math.prod(row)].unflatten(1, row))
    args = PagedLoadArgs(layout, key_cache, value_cache, table, context_lens, seq_starts, cumsum, *outputs)
    return args, buffers[0], buffers[1]


@given(call=paged_calls(), cores=st.sampled_from(CORES), ub=st.sampled_from(UB_SIZES))
def test_paged_raw_indices_follow_the_safe_semantics(configure, call, cores: int, ub: int) -> None:
    configure(cores, ub)
    args, key_buffer, value_buffer = call
    expected = cloned(args)
    safe_reference.paged_cache_load(expected)
    before = key_buffer.clone(), value_buffer.clone()
    on_the_kernels(args)
    assert bits_equal(args.key, expected.key) and bits_equal(args.value, expected.value)
    assert_gaps_unchanged(key_buffer, before[0], args.key)
    assert_gaps_unchanged(value_buffer, before[1], args.value)


def test_decreasing_cumulative_lengths_leave_the_last_entry_in_shared_rows(configure) -> None:
    """Entries 0 and 2 both claim rows 2..5 (context_lens [0, 8, 2, 6]): on any core count the last
    entry's tokens stay."""
    for cores in CORES:
        configure(cores, UB_SIZES[-1])
        cache = random_bits((3, 4, 1, 16), torch.float16, 9)
        key, value = torch.zeros((10, 1, 16), dtype=torch.float16), torch.zeros((10, 1, 16), dtype=torch.float16)
        args = PagedLoadArgs(ND, cache, cache, torch.tensor([[0, 1], [1, 1], [2, 2]]), torch.tensor([0, 8, 2, 6]),
                             None, True, key, value)
        expected = cloned(args)
        safe_reference.paged_cache_load(expected)
        on_the_kernels(args)
        assert bits_equal(args.key, expected.key) and bits_equal(args.value, expected.value)
        assert bits_equal(args.key[2], cache[2, 0]) and bits_equal(args.key[7], cache[1, 3])
