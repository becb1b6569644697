"""The sim backend: the AscendC kernels run on the host model, against the reference, bit for bit.

The shared suite (test_ops.py) already runs every operation mode on "sim" with the default
configuration (40 cores, the A2/A3 UB). Here the configuration varies: core counts 1, 2, 7, 40
and 48, and UB sizes small enough to force many chunks and many metadata windows; plus what
only the sim has (bad metadata the kernels must skip without touching memory outside their
tensors, non-contiguous outputs, the build cache, missing compiler, model errors).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from cases import ND, NZ, Case, bits_equal, kv_cache_case, kv_cache_cases, paged_case, paged_cases, random_bits
from hypothesis import given, settings
from hypothesis import strategies as st

import ascend_kv
from ascend_kv import checks, reference
from ascend_kv.backends import sim
from ascend_kv.calls import KvCacheCall, PagedLoadCall
from ascend_kv.dispatch import BackendUnavailableError

CORES = [1, 2, 7, 40, 48]
# 256 B: the smallest UB the tiling accepts here (4-entry metadata windows, 64-byte copy buffers);
# 1 KB: many chunks per run; default: the A2/A3 UB.
UB_SIZES = [256, 1024, sim.DEFAULT_UB_BYTES]


@pytest.fixture
def configure(monkeypatch: pytest.MonkeyPatch):
    """Set the simulated core count and UB size for the test."""
    def set_config(cores: int, ub: int) -> None:
        monkeypatch.setenv("ASCEND_KV_SIM_CORES", str(cores))
        monkeypatch.setenv("ASCEND_KV_SIM_UB_BYTES", str(ub))
    return set_config


def run_sim(op, case: Case):
    with ascend_kv.use_backend("sim"):
        return op(*case.args, **case.kwargs)


def assert_kv_matches(case: Case) -> None:
    expected = reference.kv_cache(*case.cloned().args)
    got = run_sim(ascend_kv.kv_cache, case)
    assert bits_equal(got, expected)


def assert_paged_matches(case: Case) -> None:
    ref_case = case.cloned()
    expected = reference.paged_cache_load(*ref_case.args, **ref_case.kwargs)
    got = run_sim(ascend_kv.paged_cache_load, case)
    assert bits_equal(got[0], expected[0]) and bits_equal(got[1], expected[1])


# ----------------------------------------------------------------------------- fixed workloads


def kv_workloads() -> dict[str, Case]:
    return {
        "uneven-2d": kv_cache_case(torch.float16, [0, 13, 1, 0, 29, 7, 2, 0, 40], [3, 20, 1, 64, 29, 64, 9, 0, 41],
                                   max_seq_len=64, hidden=160),
        "uneven-4d-int8": kv_cache_case(torch.int8, [5, 0, 31, 3], [5, 2, 40, 3], max_seq_len=40, hidden=96,
                                        new_kv_4d=True, layers=3, layer_id=2),
        "decode-64x1": kv_cache_case(torch.bfloat16, [1] * 64, [i % 9 + 1 for i in range(64)], hidden=128, layer_id=0),
        "all-zero": kv_cache_case(torch.float16, [0, 0, 0], [0, 5, 16]),
    }


def paged_workloads() -> dict[str, Case]:
    return {
        "nd": paged_case(ND, [0, 37, 5, 16, 70], block_size=16, num_blocks=12, seed=1),
        "nd-cumsum-starts": paged_case(ND, [21, 0, 9, 33], block_size=8, num_blocks=16, cumsum_base=3,
                                       seq_starts=[5, 8, 0, 17], give_outputs=True, extra_rows=2, seed=2),
        "nd-block-1": paged_case(ND, [3, 4], block_size=1, num_blocks=9, key_dtype=torch.int8, num_heads=1,
                                 head_size_k=32, head_size_v=64, seed=3),
        "nz": paged_case(NZ, [40, 0, 17, 3], block_size=16, num_blocks=10, seed=4),
        "nz-int8-keys-fp16-values": paged_case(NZ, [33, 70], key_dtype=torch.int8, value_dtype=torch.float16,
                                               num_heads=2, head_size_k=64, head_size_v=32, block_size=32,
                                               num_blocks=6, give_outputs=True, extra_rows=1, seed=5),
        "nz-int8-keys-bf16-values": paged_case(NZ, [19], key_dtype=torch.int8, value_dtype=torch.bfloat16,
                                               num_heads=1, head_size_k=32, head_size_v=16, seed=6),
        "mla-nd-512-64": paged_case(ND, [20, 45], num_heads=1, head_size_k=512, head_size_v=64, block_size=16,
                                    num_blocks=8, seed=7),
        "mla-nz-512-64": paged_case(NZ, [20, 45], num_heads=1, head_size_k=512, head_size_v=64, block_size=16,
                                    num_blocks=8, seed=8),
        "decode-64x1": paged_case(ND, [1] * 64, block_size=16, num_blocks=64, seed=9),
        "all-zero": paged_case(NZ, [0, 0], seed=10),
    }


@pytest.mark.parametrize("ub", UB_SIZES)
@pytest.mark.parametrize("cores", CORES)
def test_kv_cache_core_counts_and_ub_sizes(configure, cores: int, ub: int) -> None:
    configure(cores, ub)
    for case in kv_workloads().values():
        assert_kv_matches(case)


@pytest.mark.parametrize("ub", UB_SIZES)
@pytest.mark.parametrize("cores", CORES)
def test_paged_core_counts_and_ub_sizes(configure, cores: int, ub: int) -> None:
    configure(cores, ub)
    for case in paged_workloads().values():
        assert_paged_matches(case)


@given(case=kv_cache_cases(), cores=st.integers(1, 48), ub=st.sampled_from(UB_SIZES + [512, 4096]))
@settings(max_examples=25, deadline=None)
def test_kv_cache_any_case_any_config(configure, case: Case, cores: int, ub: int) -> None:
    configure(cores, ub)
    assert_kv_matches(case)


@given(case=paged_cases(), cores=st.integers(1, 48), ub=st.sampled_from(UB_SIZES + [512, 4096]))
@settings(max_examples=25, deadline=None)
def test_paged_any_case_any_config(configure, case: Case, cores: int, ub: int) -> None:
    configure(cores, ub)
    assert_paged_matches(case)


def test_nz_largest_row_moves_in_segments(configure) -> None:
    """A 147456-byte NZ row (the largest allowed) is larger than a copy buffer."""
    configure(7, sim.DEFAULT_UB_BYTES)
    assert_paged_matches(paged_case(NZ, [5, 18], num_heads=128, head_size_k=576, head_size_v=16, block_size=16,
                                    num_blocks=2, seed=11))


def test_nz_block_too_large_for_a_gather_gap(configure) -> None:
    """block_size - 1 > 65535 cannot be a DataCopy gap: the pieces move one copy each."""
    configure(2, 4096)
    assert_paged_matches(paged_case(NZ, [3, 40], num_heads=1, head_size_k=32, head_size_v=16,
                                    block_size=65552, num_blocks=2, seed=12))


# ----------------------------------------------------------------------------- bad metadata


def test_kv_cache_skips_tokens_outside_the_tensors(configure) -> None:
    """Metadata the checks would reject: only in-range tokens move, the model sees no stray access."""
    configure(7, 1024)
    past = random_bits((2, 4, 8, 32), torch.float16, 20)
    new_kv = random_bits((8, 32), torch.float16, 21)
    expected = past.clone()
    # entry 0 writes positions 6, 7, 8 (8 is past the end); entry 1 reads rows -2, -1, 0; entry 2
    # writes positions -1, 0; entry 3 has a huge length and position (no token is left for it).
    seq_len = [3, 3, 2, 2**40]
    read_start = [0, -2, 4, 4]
    write_start = [6, 0, -1, 2**62]
    expected[1, 0, 6:8] = new_kv[0:2]
    expected[1, 1, 2] = new_kv[0]
    expected[1, 2, 0] = new_kv[5]
    sim.kv_cache(KvCacheCall(new_kv, past, 1, seq_len, read_start, write_start))
    assert bits_equal(past, expected)


@pytest.mark.parametrize("layout", [ND, NZ])
def test_paged_skips_bad_blocks_columns_and_rows(configure, layout) -> None:
    """Invalid block ids, missing columns and rows outside the outputs are skipped."""
    configure(3, 1024)
    cache_shape = (3, 16, 1, 16) if layout == ND else (3, 1, 16, 16)
    key_cache = random_bits(cache_shape, torch.float16, 30)
    value_cache = random_bits(cache_shape, torch.float16, 31)
    row_shape = (1, 16) if layout == ND else (16,)
    key = torch.zeros((8, *row_shape), dtype=torch.float16)
    value = torch.zeros((8, *row_shape), dtype=torch.float16)
    # entry 0: tokens 10..15 (rows 0..5) in block 7 (no such block), token 16 in block 1 -> row 6;
    # entry 1: block -1; entry 2: block 0, rows 7..10 (8.. do not exist); entry 3: column 5 does
    # not exist; entry 4: column -1.
    table = [[7, 1], [-1, 2], [2, 0], [0, 0], [2, 2]]
    lens = [17, 2, 4, 1, 2]
    out_start = [-10, 3, 7, 0, 1]
    first_column = [0, 0, 1, 5, -1]
    sim.paged_cache_load(PagedLoadCall(layout, key_cache, value_cache, key, value, table, [], lens, out_start,
                                       first_column, 16))                   # the kernels read the table, not blocks

    def token(cache: torch.Tensor, blk: int, slot: int) -> torch.Tensor:
        return cache[blk, slot] if layout == ND else cache[blk, :, slot, :].reshape(-1)

    for out, cache in ((key, key_cache), (value, value_cache)):
        expected = torch.zeros_like(out)
        expected[6] = token(cache, 1, 0)
        expected[7] = token(cache, 0, 0)
        assert bits_equal(out, expected)


# ----------------------------------------------------------------------------- strides


def test_non_contiguous_tensors_run_on_contiguous_copies(configure) -> None:
    """The backend runs strided tensors on contiguous copies and writes the results back into
    the caller's strided tensors."""
    configure(7, 1024)
    new_kv, layer_id, past, token_offset, seq_len = kv_cache_case(torch.float16, [3, 5], [4, 9], hidden=32).args
    expected = reference.kv_cache(new_kv, layer_id, past.clone(), token_offset, seq_len)
    strided_past = past.transpose(0, 1).contiguous().transpose(0, 1)  # same values, other strides
    strided_new_kv = new_kv.t().contiguous().t()
    sim.kv_cache(checks.check_kv_cache(strided_new_kv, layer_id, strided_past, token_offset, seq_len))
    assert not strided_past.is_contiguous() and bits_equal(strided_past, expected)

    case = paged_case(NZ, [7, 20], give_outputs=True, seed=40)
    ref_case = case.cloned()
    expected_key, expected_value = reference.paged_cache_load(*ref_case.args, **ref_case.kwargs)
    key, value = (case.kwargs[name].t().contiguous().t() for name in ("key", "value"))
    key_cache = case.args[0].transpose(0, 2).contiguous().transpose(0, 2)
    call = checks.check_paged_cache_load(key_cache, *case.args[1:], NZ, False, None, key, value)
    sim.paged_cache_load(call)
    assert not key.is_contiguous() and bits_equal(key, expected_key) and bits_equal(value, expected_value)


# ----------------------------------------------------------------------------- the instrument


def test_settings_are_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASCEND_KV_SIM_CORES", "0")
    with pytest.raises(ValueError, match="ASCEND_KV_SIM_CORES must be an integer >= 1, got 0"):
        sim.cores()
    monkeypatch.setenv("ASCEND_KV_SIM_UB_BYTES", "lots")
    with pytest.raises(ValueError, match="ASCEND_KV_SIM_UB_BYTES must be an integer >= 1, got 'lots'"):
        sim.ub_bytes()
    monkeypatch.delenv("ASCEND_KV_SIM_CORES")
    monkeypatch.delenv("ASCEND_KV_SIM_UB_BYTES")
    assert (sim.cores(), sim.ub_bytes()) == (40, 192 * 1024 - 256 - 8 * 1024)


def test_ub_too_small_for_the_tiling(configure) -> None:
    configure(2, 128)
    with pytest.raises(RuntimeError, match="cannot tile the call for 2 cores and 128 UB bytes"):
        assert_kv_matches(kv_cache_case(torch.float16, [2], [2]))


def test_ub_larger_than_the_hardware_is_refused_by_the_model(configure) -> None:
    configure(2, 256 * 1024)
    with pytest.raises(RuntimeError, match="host model .* ubBytes 262144"):
        assert_kv_matches(kv_cache_case(torch.float16, [2], [2]))


def test_model_errors_surface_as_runtime_errors() -> None:
    """The launcher refuses overlapping GM allocations (here new_kv inside past)."""
    past = np.zeros(4 * 32, dtype=np.uint8)
    meta = np.zeros(1, dtype=np.int64)
    with pytest.raises(RuntimeError, match="host model .*overlap"):
        sim._run("ascend_kv_sim_kv_cache", past.ctypes.data, past.ctypes.data, meta.ctypes.data,
                 meta.ctypes.data, meta.ctypes.data, 1, 32, 1, 1, 4, 0, 1, 1024)


def test_missing_compiler_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sim, "_library", None)
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    with pytest.raises(BackendUnavailableError, match="compiles the AscendC kernels .* '/nonexistent/c\\+\\+' was not found"):
        sim.library()
    with pytest.raises(BackendUnavailableError), ascend_kv.use_backend("sim"):
        ascend_kv.kv_cache(*kv_cache_case(torch.float16, [1], [1]).args)


def test_cache_key_follows_the_sources(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An edited source gets a new library; the same sources and command keep the old one."""
    copy = tmp_path / "ascendc"
    shutil.copytree(sim.source_root(), copy)
    monkeypatch.setattr(sim, "source_root", lambda: copy)
    monkeypatch.setenv("ASCEND_KV_CACHE_DIR", str(tmp_path / "cache"))
    first = sim.library_path()
    assert first.parent == tmp_path / "cache" and sim.library_path() == first
    header = copy / "kernels" / "copy_common.h"
    header.write_text(header.read_text() + "\n")
    assert sim.library_path() != first
