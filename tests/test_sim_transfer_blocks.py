"""The transfer_blocks kernel (``gather_blocks``, ``scatter_blocks``) on the host model (the ``sim``
backend, through the public functions): bit for bit against the reference on every core count, one
launch for every layer, K and V; large blocks in segments and rows in groups on a small UB; unchecked
ids skipped on the fake NPU (whose kernel library is the host build) with no value read back."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import fake_npu
import pytest
import torch
from cases import bits_equal, random_bits
from hypothesis import given, settings
from test_sim import HOST_PATHS, KERNELS, SIM, kernels_on_the_fake_npu, ran_on
from test_transfer_blocks import expected_gather, expected_scatter, gather, scatter
from transfer_cases import TransferCase, make_case, transfer_cases

import ascend_kv
from ascend_kv.backends import sim

CORES = [1, 2, 7, 40, 48]
DEFAULT_UB = 192 * 1024 - 256 - 8 * 1024


def launches() -> int:
    sim.load()
    return int(torch.ops.ascend_kv_host.launches())


def framed(case: TransferCase) -> bool:
    """Whether the call has a frame (else the host paths take it, with the sim requested too): an NZ
    side needs D a multiple of E, or E a multiple of D with H // S a multiple of E // D."""
    if "nz" not in (case.cache_layout, case.buffer_layout) or "nz" == case.cache_layout == case.buffer_layout:
        return True
    e = 32 // case.buffer.element_size()
    block = case.keys[0].shape[1:] if case.cache_layout != "nz" else case.buffer.shape[3:]
    layout = case.cache_layout if case.cache_layout != "nz" else case.buffer_layout
    heads, d = (block[0], block[2]) if layout == "hnd" else (block[-2] * case.splits, block[-1]) if case.splits > 1 \
        else (block[1], block[2])
    return d % e == 0 or (e % d == 0 and (heads // case.splits) % (e // d) == 0)


@pytest.mark.parametrize("cores", CORES)
@settings(max_examples=8)
@given(case=transfer_cases(distinct=True))
def test_the_kernel_matches_the_reference(configure: Callable[[int, int], None], cores: int,
                                          case: TransferCase) -> None:
    configure(cores, DEFAULT_UB)
    expected_out = expected_gather(case, case.ids)
    where = SIM if framed(case) else HOST_PATHS
    moved = bool(case.ids) and case.buffer.numel() > 0
    before = launches()
    with ran_on(where), ascend_kv.use_backend("sim"):
        gather(case)
    assert bits_equal(case.buffer, expected_out)
    case.buffer.copy_(random_bits(tuple(case.buffer.shape), case.buffer.dtype, 7))
    expected_caches = expected_scatter(case, case.ids)
    with ran_on(where), ascend_kv.use_backend("sim"):
        scatter(case)
    assert launches() - before == (2 if where == SIM and moved else 0)  # one launch per call, all layers
    assert all(bits_equal(a, b) for a, b in zip(case.caches(), expected_caches))


@pytest.mark.parametrize(("cache_layout", "buffer_layout", "splits"), [("nd", "nd", 1), ("nd", "nz", 1), ("nz", "nd", 2)])
def test_large_blocks_on_a_small_ub(configure: Callable[[int, int], None], cache_layout: str, buffer_layout: str,
                                    splits: int) -> None:
    """Blocks of 128 x 8 x 128 float16 (256 KB: rows in segments, or row groups of a 1 KB buffer)."""
    configure(7, 4096)
    case = make_case(cache_layout, buffer_layout, layers=2, num_blocks=3, bs=128, heads=8, head_size=128,
                     splits=splits, ids=[2, 0])
    expected_out = expected_gather(case, case.ids)
    with ran_on(SIM), ascend_kv.use_backend("sim"):
        gather(case)
    assert bits_equal(case.buffer, expected_out)
    case.buffer.copy_(random_bits(tuple(case.buffer.shape), case.buffer.dtype, 7))
    expected_caches = expected_scatter(case, case.ids)
    with ran_on(SIM), ascend_kv.use_backend("sim"):
        scatter(case)
    assert all(bits_equal(a, b) for a, b in zip(case.caches(), expected_caches))


def test_32_layers_of_one_buffer_are_one_launch(configure: Callable[[int, int], None]) -> None:
    configure(40, DEFAULT_UB)
    case = make_case("nd", "nd", layers=32, num_blocks=9, splits=2, ids=[8, 1, 4], one_buffer=True)
    expected_caches = expected_scatter(case, case.ids)
    before = launches()
    with ran_on(SIM), ascend_kv.use_backend("sim"):
        scatter(case)
    assert launches() - before == 1
    assert all(bits_equal(a, b) for a, b in zip(case.caches(), expected_caches))


@pytest.fixture(scope="module")
def kernels() -> Iterator[None]:
    """Calls on the fake NPU run the kernels (the host build as the NPU kernel library)."""
    with kernels_on_the_fake_npu():
        yield


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize(("cache_layout", "buffer_layout", "splits"), [("nd", "nz", 1), ("nz", "nd", 2), ("hnd", "nd", 1)])
def test_the_kernel_on_the_fake_npu_skips_unchecked_ids(configure: Callable[[int, int], None], kernels: None,
                                                        cache_layout: str, buffer_layout: str, splits: int,
                                                        index_dtype: torch.dtype) -> None:
    configure(7, DEFAULT_UB)
    ids = [5, -1, 6, 0, 2**31 - 1 if index_dtype == torch.int32 else 2**40]
    case = make_case(cache_layout, buffer_layout, num_blocks=6, splits=splits, ids=ids, index_dtype=index_dtype)
    expected_out = expected_gather(case, ids)
    on_the_kernels(gather, case)
    assert bits_equal(case.buffer, expected_out)  # rows of skipped ids untouched
    expected_caches = expected_scatter(case, ids)
    on_the_kernels(scatter, case)
    assert all(bits_equal(a, b) for a, b in zip(case.caches(), expected_caches))


def on_the_kernels(call: Callable[..., object], case: TransferCase) -> None:
    """``call(case)`` with every tensor on the fake NPU in its host layout (ids unchecked): one launch, no
    value read back; the device memory is copied back over the host tensors."""
    mirror = fake_npu.same_layout([*case.caches(), case.buffer, case.block_ids()])
    values = mirror.values
    moved = TransferCase(values[:len(case.keys)], values[len(case.keys):len(case.caches())], case.ids, values[-2],
                         case.cache_layout, case.buffer_layout, case.splits, case.index_dtype)
    before = launches()
    with ascend_kv.use_backend("npu"), ran_on(KERNELS), fake_npu.counting() as seen:
        call(moved, ids=values[-1])
    assert launches() - before == 1
    assert seen.transfers == 0 and seen.blocking_uploads == 0
    mirror.copy_back()


def test_a_pinned_host_buffer_with_npu_caches_is_one_launch_and_one_copy(configure: Callable[[int, int], None],
                                                                          kernels: None) -> None:
    """Host ids (checked) and a pinned host buffer: one device staging buffer, one launch, one copy each way."""
    configure(7, DEFAULT_UB)
    case = make_case("nz", "nd", splits=2, ids=[4, 1])
    mirror = fake_npu.same_layout(case.caches())
    keys, values = mirror.values[:2], mirror.values[2:]
    buffer = case.buffer.pin_memory()
    expected_out = expected_gather(case, case.ids)
    before = launches()
    with ascend_kv.use_backend("npu"), ran_on(KERNELS), fake_npu.counting() as seen:
        ascend_kv.gather_blocks(keys, values, case.block_ids(), buffer, cache_layout="nz", head_splits=2)
    assert launches() - before == 1 and seen.transfers == 1 and seen.blocking_uploads == 0  # the result, once
    assert bits_equal(buffer, expected_out)
    buffer.copy_(random_bits(tuple(buffer.shape), buffer.dtype, 8))
    expected_caches = expected_scatter(TransferCase(case.keys, case.values, case.ids, buffer, "nz", "nd", 2,
                                                    case.index_dtype), case.ids)
    with ascend_kv.use_backend("npu"), ran_on(KERNELS), fake_npu.counting() as seen:
        ascend_kv.scatter_blocks(buffer, keys, values, case.block_ids(), cache_layout="nz", head_splits=2)
    assert seen.transfers == 0 and seen.blocking_uploads == 0
    mirror.copy_back()
    assert all(bits_equal(a, b) for a, b in zip(case.caches(), expected_caches))
