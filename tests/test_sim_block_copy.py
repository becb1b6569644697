"""The block_copy kernel on the host model (the ``sim`` backend, through the public functions): bit
for bit against the reference on every core count and UB size, one launch for every layer of a
``copy_blocks``, unchecked indices skipped (on the fake NPU, whose kernel library is the host build:
index tensors on a device are never checked), and the operator's checks before the kernel."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest
import torch
from block_cases import BlockCase, Copies, block_cases, caches
from calls import BlockCopyArgs
from cases import bits_equal, random_bits
from hypothesis import given
from hypothesis import strategies as st
from test_sim import SIM, kernels_on_the_fake_npu, on_the_kernels, ran_on

import ascend_kv
from ascend_kv.backends import sim
from ascend_kv.tools import reference

CORES = [1, 2, 7, 40, 48]
DEFAULT_UB = 192 * 1024 - 256 - 8 * 1024
UB_SIZES = [1024, DEFAULT_UB]  # 1 KB: blocks in many chunks, rows in segments; the A2/A3 UB


def launches() -> int:
    sim.load()
    return int(torch.ops.ascend_kv_host.launches())


@pytest.mark.parametrize("ub", UB_SIZES)
@pytest.mark.parametrize("cores", CORES)
@given(case=block_cases())
def test_block_copy_on_the_kernel_matches_the_reference(configure: Callable[[int, int], None], cores: int, ub: int,
                                                         case: BlockCase) -> None:
    configure(cores, ub)
    expected = case.cloned_args()
    reference.block_copy(*expected)
    before = launches()
    with ran_on(SIM), ascend_kv.use_backend("sim"):
        ascend_kv.block_copy(*case.args())
    assert launches() - before == (1 if case.copies.destinations else 0)
    assert bits_equal(case.key_cache, expected[0])
    assert case.value_cache is None or bits_equal(case.value_cache, expected[1])


@pytest.mark.parametrize("cores", CORES)
def test_large_blocks_in_segments_and_strided_rows(configure: Callable[[int, int], None], cores: int) -> None:
    """A dense 256 KB block (four segments of the 64 KB cap) and K/V halves of one buffer, in place."""
    configure(cores, DEFAULT_UB)
    key, value = caches("plain", "nd", 6, torch.float16, torch.float16, seed=1, block_size=128, heads=8,
                        head_size=128, value_head_size=128)
    interleaved_key, interleaved_value = caches("interleaved", "nz", 6, torch.bfloat16, torch.bfloat16, seed=2,
                                                block_size=128, heads=8, head_size=128)
    copies = Copies([0, 5], [1, 2, 4], [2, 3])
    for pair in ((key, value), (interleaved_key, interleaved_value)):
        expected = [t.clone() for t in pair]
        reference.block_copy(*expected, *copies.tensors(torch.int64))
        pointers = [t.data_ptr() for t in pair]
        with ran_on(SIM), ascend_kv.use_backend("sim"):
            ascend_kv.block_copy(*pair, *copies.tensors(torch.int64))
        assert all(bits_equal(a, b) for a, b in zip(pair, expected))
        assert [t.data_ptr() for t in pair] == pointers


def test_copy_blocks_over_32_layers_is_one_kernel_launch(configure: Callable[[int, int], None]) -> None:
    configure(7, DEFAULT_UB)
    buf = random_bits((32, 2, 10, 16, 2, 16), torch.float16, 3)             # vLLM: kv[layer][0] / [1]
    keys, values = [buf[i, 0] for i in range(32)], [buf[i, 1] for i in range(32)]
    mapping = torch.tensor([[0, 7], [0, 8], [3, 9]])
    expected = buf.clone()
    reference.copy_blocks([expected[i, 0] for i in range(32)], [expected[i, 1] for i in range(32)], mapping)
    before = launches()
    with ran_on(SIM), ascend_kv.use_backend("sim"):
        ascend_kv.copy_blocks(keys, values, mapping)
    assert launches() - before == 1
    assert bits_equal(buf, expected)


@st.composite
def unchecked_copies(draw: st.DrawFn) -> tuple[torch.Tensor, list[int], list[int], list[int]]:
    """Index values nobody checked that keep the copies independent: out-of-range values anywhere,
    ``cum_sum`` non-decreasing, in-range destinations distinct and never an in-range source."""
    num_blocks = draw(st.integers(1, 8))
    values = st.one_of(st.integers(-3, num_blocks + 2), st.sampled_from([-(2**63), 2**63 - 1, 2**31, -(2**31)]))
    sources = draw(st.lists(values, max_size=4))
    ends = sorted(draw(st.lists(st.one_of(st.integers(-2, 8), values), min_size=len(sources), max_size=len(sources))))
    used = {s for s in sources if 0 <= s < num_blocks}
    destinations = draw(st.lists(values.filter(lambda d: not 0 <= d < num_blocks or d not in used), max_size=8))
    in_range = [d for d in destinations if 0 <= d < num_blocks]
    if len(set(in_range)) != len(in_range):
        destinations = [d for d in destinations if not 0 <= d < num_blocks]
    return random_bits((num_blocks, 3, 16), torch.float16, draw(st.integers(0, 99))), sources, destinations, ends


def safe_copy(cache: torch.Tensor, sources: list[int], destinations: list[int], ends: list[int]) -> torch.Tensor:
    out = cache.clone()
    for j, d in enumerate(destinations):
        i = next((i for i, e in enumerate(ends) if e > j), len(sources))
        if i < len(sources) and 0 <= sources[i] < cache.shape[0] and 0 <= d < cache.shape[0]:
            out[d] = cache[sources[i]]
    return out


@pytest.fixture(scope="module")
def kernels() -> Iterator[None]:
    """Calls on the fake NPU run the kernels (the host build as the NPU kernel library)."""
    with kernels_on_the_fake_npu():
        yield


@pytest.mark.parametrize("cores", [1, 7])
@given(case=unchecked_copies(), index_dtype=st.sampled_from([torch.int32, torch.int64]))
def test_the_kernel_skips_out_of_range_indices(configure: Callable[[int, int], None], kernels: None, cores: int,
                                               case: tuple[torch.Tensor, list[int], list[int], list[int]],
                                               index_dtype: torch.dtype) -> None:
    configure(cores, 1024)
    cache, sources, destinations, ends = case
    if index_dtype == torch.int32:
        clip = [max(min(v, 2**31 - 1), -(2**31)) for v in sources], [max(min(v, 2**31 - 1), -(2**31)) for v in
                                                                     destinations]
        sources, destinations = clip
        ends = [max(min(v, 2**31 - 1), -(2**31)) for v in ends]
    expected = safe_copy(cache, sources, destinations, ends)
    index = [torch.tensor(v, dtype=torch.int64).to(index_dtype) for v in (sources, destinations, ends)]
    on_the_kernels(BlockCopyArgs((cache,), *index))
    assert bits_equal(cache, expected)


def test_tiling_names_every_field_and_skips_empty_calls() -> None:
    sim.load()
    key, value = caches("plain", "nd", 4, torch.float16, torch.int8, seed=0)
    src, dst, cum_sum = Copies([0], [1, 2], [2]).tensors(torch.int32)
    views = [cache.reshape(cache.shape[0], 1, -1) for cache in (key, value)]  # each block one row, as the operator gives them
    text = torch.ops.ascend_kv_host.block_copy_tiling(views, src, dst, cum_sum)
    fields = dict(item.split("=") for item in text.split())
    assert list(fields) == ["usedCores", "numCaches", "numBlocks", "pairs", "copies", "srcElemBytes", "dstElemBytes",
                            "cumElemBytes", "items", "stageBytes", "chunkBytes", "simultaneous", "transfer",
                            "bufferRowStride", "bufferSpan"]
    assert (fields["numCaches"], fields["pairs"], fields["copies"], fields["cumElemBytes"]) == ("2", "1", "2", "4")
    assert (fields["transfer"], fields["bufferRowStride"], fields["bufferSpan"]) == ("0", "0", "0")
    empty = torch.ops.ascend_kv_host.block_copy_tiling(views, src[:0], dst[:0], cum_sum[:0])
    assert "usedCores=0" in empty


def test_the_operator_checks_what_the_kernel_indexes() -> None:
    """The kernel library checks nothing: the operator's rules refuse a bad call before the sim runs,
    writing nothing; a cache whose rows are not contiguous (outside the kernel's domain) runs on a
    contiguous copy, and a cache of any rank as the [num_blocks, rows, row] view the kernel takes."""
    cache = random_bits((4, 2, 16), torch.float16, 5)
    src, dst, cum_sum = (torch.tensor([v], dtype=torch.int32) for v in (0, 1, 1))
    for taken in (cache.clone()[..., :8].transpose(1, 2), cache.clone().reshape(4, 32)):  # rows strided; 2-D blocks
        expected = taken.clone()
        reference.block_copy(expected, None, src, dst, cum_sum)
        with ran_on(SIM), ascend_kv.use_backend("sim"):
            ascend_kv.block_copy(taken, None, src, dst, cum_sum)
        assert bits_equal(taken, expected)
    before = cache.clone()
    for call, error, message in (
        (lambda: ascend_kv.block_copy(cache, torch.zeros(5, 2, 16, dtype=torch.float16), src, dst, cum_sum),
         ValueError, "value_cache.shape[0] (num_blocks) = 5 must equal key_cache.shape[0] = 4"),
        (lambda: ascend_kv.block_copy(cache, None, src, torch.tensor([1, 2]), cum_sum),
         ValueError, "cum_sum[-1] = 1, but dst_block_indices has 2 entries: cum_sum[-1] must equal len(dst_block_indices)"),
        (lambda: ascend_kv.block_copy(cache, None, src.float(), dst, cum_sum),
         TypeError, "src_block_indices must have dtype int32 or int64, got float32"),
        (lambda: ascend_kv.block_copy(cache, None, src, dst, torch.tensor([1, 1])),
         ValueError, "cum_sum must have 1 entries (one running end per source, len(src_block_indices)), got 2"),
        (lambda: ascend_kv.copy_blocks([cache], [cache.clone()], torch.tensor([[0, 1, 2]])),
         ValueError, "block_mapping must be a 2-D tensor [n, 2] of (src, dst) pairs, got shape (1, 3)"),
    ):
        with ran_on(SIM, calls=0), ascend_kv.use_backend("sim"), pytest.raises(error, match=re.escape(message)):
            call()
    assert bits_equal(cache, before)
