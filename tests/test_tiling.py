"""The host tiling (ascendc/host/tiling.cpp), through the sim library's C entry points.

The tiling fixes how many cores run, which tokens each takes and how UB is divided; these tests
hold it to its promises: an even split that covers every token once, buffers that fit UB and
respect the copy units, whole metadata staged when it fits, and errors for impossible inputs.
"""

from __future__ import annotations

import ctypes

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ascend_kv.backends import sim

UB = sim.DEFAULT_UB_BYTES
# The words of KvCacheTiling and PagedLoadTiling (ascendc/tiling.h), in order.
KV_FIELDS = ["usedCores", "ntokens", "rowBytes", "layers", "batch", "maxSeqLen", "layerId", "tokensPerCore",
             "remainder", "chunkBytes", "metaWindow"]
PAGED_FIELDS = ["usedCores", "numTokens", "layout", "batch", "maxBlocks", "numBlocks", "blockSize", "keyRowBytes",
                "valueRowBytes", "keyRows", "valueRows", "tokensPerCore", "remainder", "chunkBytes", "metaWindow",
                "tableWindow", "gatherBlocks"]
OK, NO_CORES, UB_TOO_SMALL, BAD_SHAPE = 0, 1, 2, 3
ND, NZ = 1, 0


def _tiling(entry: str, fields: list[str], shape: list[int], cores: int, ub: int) -> tuple[int, dict[str, int]]:
    words = (ctypes.c_uint64 * len(fields))()
    status = getattr(sim.library(), entry)((ctypes.c_uint64 * len(shape))(*shape), cores, ub, words)
    return status, dict(zip(fields, words))


def kv_tiling(ntokens: int, row_bytes: int = 256, batch: int = 4, *, layers: int = 2, max_seq_len: int = 64,
              layer_id: int = 0, cores: int = 40, ub: int = UB) -> tuple[int, dict[str, int]]:
    return _tiling("ascend_kv_sim_kv_cache_tiling", KV_FIELDS,
                   [ntokens, row_bytes, layers, batch, max_seq_len, layer_id], cores, ub)


def paged_tiling(num_tokens: int, *, layout: int = ND, batch: int = 4, max_blocks: int = 8, num_blocks: int = 16,
                 block_size: int = 16, key_row: int = 256, value_row: int = 256, rows: int | None = None,
                 cores: int = 40, ub: int = UB) -> tuple[int, dict[str, int]]:
    rows = num_tokens if rows is None else rows
    return _tiling("ascend_kv_sim_paged_load_tiling", PAGED_FIELDS,
                   [layout, num_tokens, batch, max_blocks, num_blocks, block_size, key_row, value_row, rows, rows],
                   cores, ub)


def core_counts(t: dict[str, int]) -> list[int]:
    return [t["tokensPerCore"] + (c < t["remainder"]) for c in range(t["usedCores"])]


def assert_even_split(t: dict[str, int], tokens: int, cores: int) -> None:
    counts = core_counts(t)
    assert t["usedCores"] == min(cores, tokens)
    assert sum(counts) == tokens
    if counts:
        assert max(counts) - min(counts) <= 1
        assert min(counts) >= 1


def assert_fits_ub(t: dict[str, int], ub: int, table: bool) -> None:
    staged = 3 * t["metaWindow"] * 8 + (t["tableWindow"] * 8 if table else 0)
    assert t["chunkBytes"] % (512 if t["chunkBytes"] >= 1024 else 32) == 0 and t["chunkBytes"] >= 32
    assert t["metaWindow"] % 4 == 0 and t["metaWindow"] >= 4
    assert staged + 2 * t["chunkBytes"] <= ub


@given(tokens=st.integers(0, 5000), cores=st.integers(1, 64), batch=st.integers(0, 3000),
       ub=st.integers(256 // 32, UB // 32).map(lambda n: 32 * n), row_blocks=st.integers(1, 4608))
def test_kv_cache_split_is_even_and_buffers_fit(tokens: int, cores: int, batch: int, ub: int, row_blocks: int) -> None:
    status, t = kv_tiling(tokens, 32 * row_blocks, batch, cores=cores, ub=ub)
    assert status == OK
    assert_even_split(t, tokens, cores)
    assert_fits_ub(t, ub, table=False)
    assert (t["ntokens"], t["rowBytes"], t["batch"]) == (tokens, 32 * row_blocks, batch)


@given(tokens=st.integers(0, 5000), cores=st.integers(1, 64), batch=st.integers(0, 500),
       max_blocks=st.integers(0, 300), ub=st.integers(256 // 32, UB // 32).map(lambda n: 32 * n),
       layout=st.sampled_from([ND, NZ]))
def test_paged_split_is_even_and_buffers_fit(tokens: int, cores: int, batch: int, max_blocks: int, ub: int,
                                             layout: int) -> None:
    status, t = paged_tiling(tokens, layout=layout, batch=batch, max_blocks=max_blocks, cores=cores, ub=ub)
    assert status == OK
    assert_even_split(t, tokens, cores)
    assert_fits_ub(t, ub, table=True)
    assert t["tableWindow"] % 4 == 0 and t["tableWindow"] >= 4


def test_default_ub_stages_whole_metadata_and_copies_in_large_chunks() -> None:
    status, t = paged_tiling(4096, batch=16, max_blocks=128)
    assert status == OK
    assert t["metaWindow"] == 16 and t["tableWindow"] == 16 * 128
    assert t["chunkBytes"] >= 32 * 1024  # well above the ~16 KB a copy needs for full bandwidth
    status, t = kv_tiling(4096, batch=64)
    assert status == OK and t["metaWindow"] == 64 and t["chunkBytes"] >= 64 * 1024


def test_small_ub_stages_metadata_in_windows() -> None:
    status, t = paged_tiling(100, batch=1000, max_blocks=1000, ub=1024)
    assert status == OK
    assert t["metaWindow"] < 1000 and t["tableWindow"] < 1000 * 1000
    assert_fits_ub(t, 1024, table=True)


@pytest.mark.parametrize("cores", [1, 2, 7, 40, 48])
def test_decode_spreads_over_cores(cores: int) -> None:
    status, t = kv_tiling(64, batch=64, cores=cores)
    assert status == OK
    assert_even_split(t, 64, cores)


def test_no_tokens_launches_no_core() -> None:
    assert kv_tiling(0, batch=3)[1]["usedCores"] == 0
    assert paged_tiling(0, block_size=0)[1]["usedCores"] == 0


def test_nz_gather_limits() -> None:
    assert paged_tiling(10, layout=NZ, block_size=16)[1]["gatherBlocks"] == 4095
    assert paged_tiling(10, layout=NZ, block_size=65536)[1]["gatherBlocks"] == 4095  # gap 65535 still fits
    assert paged_tiling(10, layout=NZ, block_size=65537)[1]["gatherBlocks"] == 1


@pytest.mark.parametrize(
    ("status", "tiling", "kwargs"),
    [
        (NO_CORES, kv_tiling, {"cores": 0}),
        (NO_CORES, paged_tiling, {"cores": 0}),
        (UB_TOO_SMALL, kv_tiling, {"ub": 128}),
        (UB_TOO_SMALL, paged_tiling, {"ub": 160}),
        (BAD_SHAPE, kv_tiling, {"row_bytes": 48}),
        (BAD_SHAPE, kv_tiling, {"row_bytes": 0}),
        (BAD_SHAPE, paged_tiling, {"value_row": 16}),
        (BAD_SHAPE, paged_tiling, {"block_size": 0}),
        (BAD_SHAPE, paged_tiling, {"layout": 2}),
    ],
    ids=["kv-no-cores", "paged-no-cores", "kv-tiny-ub", "paged-tiny-ub", "kv-row-48", "kv-row-0",
         "paged-row-16", "paged-block-size-0", "paged-layout-2"],
)
def test_impossible_inputs_are_rejected(status: int, tiling, kwargs: dict[str, int]) -> None:
    assert tiling(10, **kwargs)[0] == status
