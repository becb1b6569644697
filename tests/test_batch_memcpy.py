"""batch_memcpy (docs/semantics.md §14.3), vLLM's mamba state copy, through the public function and
vLLM's name in ascend_kv.compat.vllm: host tables (checked, one memcpy per range) and device tables
(read by the kernel only: one launch, nothing read back; the device fallback reads them once), the
sim at several core counts, the rules at their boundaries, compiled and eager.
"""

from __future__ import annotations

import fake_npu
import npu_fixtures
import pytest
import torch
from cases import bits_equal, raises_writing_nothing, random_bits
from hypothesis import given
from hypothesis import strategies as st
from npu_fixtures import NPU, SUPPORTED, run

import ascend_kv
from ascend_kv.compat import vllm
from ascend_kv.tools import reference

kernel_library, soc = npu_fixtures.kernel_library, npu_fixtures.soc  # the fake NPU's route (fixtures)


def pointers(t: torch.Tensor, offsets: list[int], device: torch.device | str = "cpu") -> torch.Tensor:
    return torch.tensor([t.data_ptr() + o for o in offsets], dtype=torch.int64, device=device)


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[int], list[int], list[int], torch.dtype]:
    """Copies from a 4 KiB source into a 4 KiB destination: destinations apart (each a 256-byte stripe
    of its own, any length up to it, zero included), sources anywhere (overlapping each other)."""
    stripes = list(draw(st.permutations(range(16))))[: draw(st.integers(0, 16))]
    sizes = [draw(st.sampled_from([0, 1, 31, 32, 33, 200, 256])) for _ in stripes]
    sources = [draw(st.integers(0, 4096 - n)) for n in sizes]
    return sources, [256 * s + draw(st.integers(0, 256 - n)) for s, n in zip(stripes, sizes)], sizes, \
        draw(st.sampled_from([torch.int32, torch.int64]))


def expected(src: torch.Tensor, dst: torch.Tensor, case: tuple[list[int], list[int], list[int], torch.dtype]) -> torch.Tensor:
    sources, destinations, sizes, _ = case
    want, source = dst.cpu().clone(), src.cpu().clone()
    reference.batch_memcpy(pointers(source, sources), pointers(want, destinations), torch.tensor(sizes))
    return want


@given(case=batches())
def test_host_tables_match_the_reference(backend: str, case: tuple[list[int], list[int], list[int], torch.dtype]) -> None:
    src, dst = random_bits((4096,), torch.uint8, 1), random_bits((4096,), torch.uint8, 2)
    want = expected(src, dst, case)
    sources, destinations, sizes, dtype = case
    ascend_kv.batch_memcpy(pointers(src, sources), pointers(dst, destinations), torch.tensor(sizes, dtype=dtype))
    assert bits_equal(dst, want)


@pytest.mark.parametrize("cores", [1, 2, 7, 40, 48])
@given(case=batches())
def test_the_kernel_matches_the_reference_at_every_core_count(monkeypatch: pytest.MonkeyPatch, cores: int,
                                                              case: tuple[list[int], list[int], list[int], torch.dtype]) -> None:
    monkeypatch.setenv("ASCEND_KV_SIM_CORES", str(cores))
    src, dst = random_bits((4096,), torch.uint8, 3), random_bits((4096,), torch.uint8, 4)
    want = expected(src, dst, case)
    sources, destinations, sizes, dtype = case
    with ascend_kv.use_backend("sim"):
        ascend_kv.batch_memcpy(pointers(src, sources), pointers(dst, destinations), torch.tensor(sizes, dtype=dtype))
    assert bits_equal(dst, want)


@pytest.mark.parametrize("cores", [1, 7, 48])
def test_a_copy_larger_than_a_core_holds_spreads_over_the_cores(monkeypatch: pytest.MonkeyPatch, cores: int) -> None:
    """One copy of 1 MiB + 3 bytes (17 chunks of a UB buffer, an odd tail) beside tiny ones."""
    monkeypatch.setenv("ASCEND_KV_SIM_CORES", str(cores))
    src, dst = random_bits((2**20 + 64,), torch.uint8, 5), torch.zeros(2**20 + 64, dtype=torch.uint8)
    case = ([0, 7, 9], [32, 1, 0], [2**20 + 3, 1, 1], torch.int64)
    want = expected(src, dst, case)
    with ascend_kv.use_backend("sim"):
        ascend_kv.batch_memcpy(pointers(src, case[0]), pointers(dst, case[1]), torch.tensor(case[2]))
    assert bits_equal(dst, want)


# ----------------------------------------------------------------------------- the NPU route (fake NPU)


@given(case=batches())
def test_device_tables_one_launch_and_nothing_read_back(soc: str,
                                                        case: tuple[list[int], list[int], list[int], torch.dtype]) -> None:
    """vLLM's call: int64 pointer tables and int32 sizes on the device. The kernels read them there; the
    device fallback (no kernels on the 310P) must read them back, once."""
    host_src, host_dst = random_bits((4096,), torch.uint8, 6), random_bits((4096,), torch.uint8, 7)
    want = expected(host_src, host_dst, case)
    src, dst = host_src.to(NPU), host_dst.to(NPU)
    sources, destinations, sizes, dtype = case
    tables = (pointers(src, sources, NPU), pointers(dst, destinations, NPU), torch.tensor(sizes, dtype=dtype, device=NPU))
    seen = run(lambda: vllm.batch_memcpy(*tables))
    assert seen.transfers == (0 if soc == SUPPORTED else 1) and seen.uploads == 0
    assert seen.launches == (1 if soc == SUPPORTED and sizes else 0)
    assert bits_equal(dst.cpu(), want)


def test_device_sizes_below_one_copy_nothing(soc: str) -> None:
    """Device values nobody checked: a negative size copies nothing (the kernels skip it; the fallback,
    which reads the tables, checks them and raises as for host tables)."""
    src, dst = random_bits((64,), torch.uint8, 8).to(NPU), torch.zeros(64, dtype=torch.uint8, device=NPU)
    tables = (pointers(src, [0, 8]), pointers(dst, [0, 8]))
    sizes = torch.tensor([8, -5], device=NPU)
    if soc == SUPPORTED:
        ascend_kv.batch_memcpy(tables[0].to(NPU), tables[1].to(NPU), sizes)
        assert bits_equal(dst.cpu()[:8], src.cpu()[:8]) and not dst.cpu()[8:].any()
    else:
        with pytest.raises(ValueError, match=r"sizes\[1\] = -5 must be >= 0 bytes"):
            ascend_kv.batch_memcpy(tables[0].to(NPU), tables[1].to(NPU), sizes)
        assert not dst.cpu().any()


def test_no_temporary() -> None:
    src, dst = torch.zeros(2**20, dtype=torch.uint8), torch.ones(2**20, dtype=torch.uint8)
    tables = (pointers(src, [0, 2**19]), pointers(dst, [2**19, 0]), torch.tensor([2**19, 2**19]))
    with fake_npu.largest_allocations() as seen:
        ascend_kv.batch_memcpy(*tables)
    assert seen.host < 1024 and not dst.any()


# ----------------------------------------------------------------------------- rules


def test_rules_at_their_boundaries_copy_nothing(kernel_library: None) -> None:
    src, dst = random_bits((64,), torch.uint8, 9), random_bits((64,), torch.uint8, 10)
    t = torch.tensor
    for sources, destinations, sizes, message in (
        ([0, 8], [0, 8], [8, 8], None),                                          # touching, not meeting
        ([0, 8], [0, 7], [8, 8], r"dst_ptrs\[1\] = 0x[0-9a-f]+ \(8 bytes\) overlaps the destination of copy 0"),
        ([0, 8], [0, 7], [8, 0], None),                                          # a zero-size copy meets nothing
        ([0, 8], [0, 8], [8, -1], r"sizes\[1\] = -1 must be >= 0 bytes"),
    ):
        raises_writing_nothing(lambda s=sources, d=destinations, n=sizes: ascend_kv.batch_memcpy(
            pointers(src, s), pointers(dst, d), t(n, dtype=torch.int32)), dst, message)
    raises_writing_nothing(lambda: ascend_kv.batch_memcpy(pointers(dst, [0, 16]), pointers(dst, [16, 40]), t([8, 8])), dst,
          r"dst_ptrs\[0\] = 0x[0-9a-f]+ \(8 bytes\) overlaps the source of copy 1")
    for call, message, error in (
        (lambda: ascend_kv.batch_memcpy(pointers(src, [0]).int(), pointers(dst, [0]), t([1])),
         r"src_ptrs must have dtype int64, got int32", TypeError),
        (lambda: ascend_kv.batch_memcpy(pointers(src, [0]), pointers(dst, [0]), t([1], dtype=torch.int16)),
         r"sizes must have dtype int32 or int64, got int16", TypeError),
        (lambda: ascend_kv.batch_memcpy(pointers(src, [0]), pointers(dst, [0, 8]), t([1])),
         r"dst_ptrs must have one entry per copy \(1, as src_ptrs\), got 2", ValueError),
        (lambda: ascend_kv.batch_memcpy(pointers(src, [0]), pointers(dst, [0]), t([[1]])),
         r"sizes must be a 1-D tensor", ValueError),
        (lambda: ascend_kv.batch_memcpy(pointers(src, [0]), pointers(dst, [0]), t([1], device="npu:0")),
         r"sizes is on npu:0 but src_ptrs is on cpu: all tensor arguments must be on one device", ValueError),
        (lambda: ascend_kv.batch_memcpy([0], pointers(dst, [0]), t([1])),
         r"src_ptrs must be a torch.Tensor", TypeError),
    ):
        raises_writing_nothing(call, dst, message, error)


def test_empty_tables_copy_nothing() -> None:
    empty = torch.zeros(0, dtype=torch.int64)
    ascend_kv.batch_memcpy(empty, empty, empty.int())
    with ascend_kv.use_backend("sim"):
        ascend_kv.batch_memcpy(empty, empty, empty)


def test_vllm_name_is_the_function() -> None:
    assert vllm.batch_memcpy is ascend_kv.batch_memcpy


# ----------------------------------------------------------------------------- graphs


def test_a_compiled_step_keeps_the_copies_and_equals_eager() -> None:
    """The operator writes through addresses, not through a tensor argument: the graph must keep it."""
    results = []
    for compiled in (False, True):
        src, dst = random_bits((64,), torch.uint8, 11), torch.zeros(64, dtype=torch.uint8)

        def step(a: torch.Tensor, b: torch.Tensor, n: torch.Tensor) -> None:
            ascend_kv.batch_memcpy(a, b, n)

        torch._dynamo.reset()
        (torch.compile(step, fullgraph=True) if compiled else step)(pointers(src, [0, 32]), pointers(dst, [8, 40]),
                                                                     torch.tensor([8, 4], dtype=torch.int32))
        results.append(dst)
    assert bits_equal(results[0], results[1]) and bool(results[1][8:16].ne(0).any() or results[1][40:44].ne(0).any())


def test_passes_opcheck() -> None:
    src, dst = random_bits((64,), torch.uint8, 12), torch.zeros(64, dtype=torch.uint8)
    torch.library.opcheck(torch.ops.ascend_kv.batch_memcpy.default,
                          (pointers(src, [0, 32]), pointers(dst, [8, 40]), torch.tensor([8, 4], dtype=torch.int32)))
