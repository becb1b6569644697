"""The host tiling (ascendc/host/tiling.cpp), read through the op library's ``*_tiling`` ops.

The ops take the tensors the kernel library's entries take (ascendc/host/kernel_library.h), which
the operators' rules have checked (the ops check nothing), and return the tiling the call would run, as
``name=value`` words (printed from the one field list in ascendc/tiling.h). The tiling fixes how
many cores run, how UB is divided and the byte geometry the kernels address; it depends on
shapes, strides, the core count and the UB size only, never on index values.
"""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ascend_kv.backends import sim

UB = 192 * 1024 - 256 - 8 * 1024
MAX_STAGE = 16 * 1024
ND, NZ = 1, 0


@pytest.fixture(autouse=True)
def library() -> None:
    sim.load()


def parse(text: str) -> dict[str, int]:
    return {name: int(value) for name, value in (word.split("=") for word in text.split())}


def kv_tiling(monkeypatch: pytest.MonkeyPatch, new_kv: torch.Tensor, past: torch.Tensor, *, cores: int = 40,
              ub: int = UB, index: torch.dtype = torch.int64, layer: torch.Tensor | None = None,
              layer_id: int = 0) -> dict[str, int]:
    monkeypatch.setenv("ASCEND_KV_SIM_CORES", str(cores))
    monkeypatch.setenv("ASCEND_KV_SIM_UB_BYTES", str(ub))
    batch = past.shape[1]
    indices = torch.zeros(batch, dtype=index)
    return parse(torch.ops.ascend_kv_host.kv_cache_tiling(new_kv, past, indices, indices, layer, layer_id))


def paged_tiling(monkeypatch: pytest.MonkeyPatch, key_cache: torch.Tensor, value_cache: torch.Tensor,
                 key: torch.Tensor, value: torch.Tensor, *, layout: int = ND, batch: int = 2, columns: int = 3,
                 cumsum: bool = False, starts: bool = False, cores: int = 40, ub: int = UB,
                 index: torch.dtype = torch.int32) -> dict[str, int]:
    monkeypatch.setenv("ASCEND_KV_SIM_CORES", str(cores))
    monkeypatch.setenv("ASCEND_KV_SIM_UB_BYTES", str(ub))
    table = torch.zeros((batch, columns), dtype=index)
    lens = torch.zeros(batch + cumsum, dtype=index)
    seq_starts = torch.zeros(batch, dtype=index) if starts else None
    return parse(torch.ops.ascend_kv_host.paged_cache_load_tiling(key_cache, value_cache, table, lens, seq_starts,
                                                                  key, value, layout, cumsum))


def assert_fits_ub(t: dict[str, int], ub: int, windows: int) -> None:
    assert t["stageBytes"] % 32 == 0 and 32 <= t["stageBytes"] <= MAX_STAGE
    assert t["chunkBytes"] % (512 if t["chunkBytes"] >= 1024 else 32) == 0 and t["chunkBytes"] >= 32
    assert windows * t["stageBytes"] + 2 * t["chunkBytes"] <= ub


@given(ntokens=st.integers(0, 300), batch=st.integers(0, 3000), cores=st.integers(1, 64),
       ub=st.integers(256 // 32, UB // 32).map(lambda n: 32 * n), row_blocks=st.integers(1, 64),
       index=st.sampled_from([torch.int32, torch.int64]))
def test_kv_cache_cores_and_buffers(monkeypatch: pytest.MonkeyPatch, ntokens: int, batch: int, cores: int, ub: int,
                                    row_blocks: int, index: torch.dtype) -> None:
    hidden = 16 * row_blocks
    past = torch.empty((1, batch, 2, hidden), dtype=torch.float16)
    t = kv_tiling(monkeypatch, torch.empty((ntokens, hidden), dtype=torch.float16), past, cores=cores, ub=ub,
                  index=index)
    assert t["usedCores"] == (min(cores, ntokens) if batch else 0)
    assert_fits_ub(t, ub, windows=2)
    assert (t["ntokens"], t["rowBytes"], t["batch"]) == (ntokens, 32 * row_blocks, batch)
    assert t["offsetElemBytes"] == t["seqLenElemBytes"] == index.itemsize
    if batch * index.itemsize <= min(MAX_STAGE, ub // 8 // 32 * 32):
        assert t["stageBytes"] >= batch * index.itemsize  # the whole tensor staged at once


def test_kv_cache_geometry_of_strided_views(monkeypatch: pytest.MonkeyPatch) -> None:
    past = torch.empty((3, 5, 10, 48), dtype=torch.bfloat16)[1:, 1:4, 2:9, 8:40]
    new_kv = torch.empty((6, 64), dtype=torch.bfloat16)[:, 16:48]
    t = kv_tiling(monkeypatch, new_kv, past, layer=torch.tensor([1], dtype=torch.int32), layer_id=7)
    assert (t["pastLayerStride"], t["pastBatchStride"], t["pastSeqStride"]) == (5 * 10 * 96, 10 * 96, 96)
    assert t["pastSpan"] == 1 * 5 * 10 * 96 + 2 * 10 * 96 + 6 * 96 + 64
    assert (t["newKvRowStride"], t["newKvSpan"]) == (128, 5 * 128 + 64)
    assert (t["layerElemBytes"], t["layerId"]) == (4, 7)


def test_kv_cache_nowhere_to_write_launches_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    for past_shape in [(0, 2, 4, 16), (1, 0, 4, 16), (1, 2, 0, 16)]:
        past = torch.empty(past_shape, dtype=torch.float16)
        assert kv_tiling(monkeypatch, torch.empty((5, 16), dtype=torch.float16), past)["usedCores"] == 0


@given(rows_k=st.integers(0, 400), rows_v=st.integers(0, 400), batch=st.integers(0, 300),
       columns=st.integers(0, 60), cores=st.integers(1, 64), ub=st.integers(256 // 32, UB // 32).map(lambda n: 32 * n),
       starts=st.booleans(), cumsum=st.booleans())
def test_paged_cores_and_buffers(monkeypatch: pytest.MonkeyPatch, rows_k: int, rows_v: int, batch: int,
                                 columns: int, cores: int, ub: int, starts: bool, cumsum: bool) -> None:
    cache = torch.empty((3, 16, 2, 16), dtype=torch.float16)
    key, value = torch.empty((rows_k, 2, 16), dtype=torch.float16), torch.empty((rows_v, 2, 16), dtype=torch.float16)
    t = paged_tiling(monkeypatch, cache, cache, key, value, batch=batch, columns=columns, cumsum=cumsum,
                     starts=starts, cores=cores, ub=ub)
    anything = batch and columns and max(rows_k, rows_v)
    assert t["usedCores"] == (min(cores, max(rows_k, rows_v)) if anything else 0)
    assert_fits_ub(t, ub, windows=3 if starts else 2)
    assert t["startsElemBytes"] == (4 if starts else 0) and t["cumsum"] == cumsum


def test_paged_geometry_of_mla_and_interleaved_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    latent = torch.empty((7, 16, 1, 576), dtype=torch.float16)
    out = torch.empty((9, 1, 600), dtype=torch.float16)
    t = paged_tiling(monkeypatch, latent[..., :512], latent[..., 512:], out[..., :512], out[..., 512:576])
    assert (t["key.rowBytes"], t["value.rowBytes"]) == (1024, 128)
    assert (t["key.blockStride"], t["key.slotStride"], t["value.slotStride"]) == (16 * 1152, 1152, 1152)
    assert (t["key.cacheSpan"], t["value.cacheSpan"]) == (6 * 16 * 1152 + 15 * 1152 + 1024, 6 * 16 * 1152 + 15 * 1152 + 128)
    assert (t["key.rowStride"], t["key.rowsSpan"]) == (1200, 8 * 1200 + 1024)
    pair = torch.empty((5, 2, 32, 4, 32), dtype=torch.int8)  # NZ [nb, K/V, T/E, bs, E], K and V block by block
    out = torch.empty((4, 1024), dtype=torch.int8)
    t = paged_tiling(monkeypatch, pair[:, 0], pair[:, 1], out, out, layout=NZ)
    assert (t["key.blockStride"], t["key.pieceStride"], t["key.slotStride"]) == (2 * 32 * 128, 128, 32)
    assert t["value.cacheSpan"] == 4 * 8192 + 31 * 128 + 3 * 32 + 32
    assert t["blockSize"] == 4 and t["key.rowBytes"] == 1024


def test_default_ub_stages_whole_index_tensors_and_copies_in_large_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = torch.empty((3, 16, 2, 16), dtype=torch.float16)
    out = torch.empty((4096, 2, 16), dtype=torch.float16)
    t = paged_tiling(monkeypatch, cache, cache, out, out, batch=16, columns=128)
    assert t["stageBytes"] == 16 * 128 * 4 and t["chunkBytes"] >= 32 * 1024
    t = paged_tiling(monkeypatch, cache, cache, out, out, batch=4000, columns=128, index=torch.int64)
    assert t["stageBytes"] == MAX_STAGE  # capped well below a 16-bit count of bytes


def test_impossible_ub_is_a_tiling_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(RuntimeError, match="ascend_kv_host.kv_cache: tiling failed: the UB size leaves no room"):
        kv_tiling(monkeypatch, torch.empty((2, 16), dtype=torch.float16), torch.empty((1, 1, 4, 16), dtype=torch.float16),
                  ub=64)


def test_fields_are_printed_in_struct_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """The printout walks the one field list: its order is the struct's, which the kernels read word by word."""
    header = (sim.source_root() / "tiling.h").read_text()
    t = kv_tiling(monkeypatch, torch.empty((2, 16), dtype=torch.float16), torch.empty((1, 1, 4, 16), dtype=torch.float16))
    positions = [header.index(f"FIELD({name},") for name in t]
    assert positions == sorted(positions) and next(iter(t)) == "usedCores"


def reshape_tiling(monkeypatch: pytest.MonkeyPatch, tokens: int, num_blocks: int, block_size: int, cores: int) -> dict[str, int]:
    monkeypatch.setenv("ASCEND_KV_SIM_CORES", str(cores))
    monkeypatch.setenv("ASCEND_KV_SIM_UB_BYTES", str(UB))
    key = torch.empty((tokens, 1, 16), dtype=torch.float16)
    cache = torch.empty((num_blocks, block_size, 1, 16), dtype=torch.float16)
    return parse(torch.ops.ascend_kv_host.reshape_and_cache_tiling(key, key, cache, cache,
                                                                   torch.zeros(tokens, dtype=torch.int32), ND))


def owner(t: dict[str, int], slot: int) -> int:
    """The core that writes ``slot`` (ascendc/tiling.h): stripe j of block b is core
    (b * blockStripes + j) % usedCores's."""
    block, position = divmod(slot, t["blockSize"])
    return (block * t["blockStripes"] + position // t["stripeSlots"]) % t["usedCores"]


def core_loads(t: dict[str, int], slots: list[int]) -> list[int]:
    """Tokens each core writes."""
    counts = Counter(owner(t, s) for s in slots)
    return [counts[c] for c in range(t["usedCores"])]


@given(tokens=st.integers(0, 10000), num_blocks=st.integers(0, 5000), block_size=st.integers(1, 256),
       cores=st.integers(1, 64))
def test_reshape_stripes(monkeypatch: pytest.MonkeyPatch, tokens: int, num_blocks: int, block_size: int,
                         cores: int) -> None:
    """At most one core per token and per cache slot; stripes within a block, numbered so that
    consecutive blocks take consecutive stripe numbers (or skip a few) with a step coprime to the
    core count; one core: one stripe per block."""
    t = reshape_tiling(monkeypatch, tokens, num_blocks, block_size, cores)
    assert t["usedCores"] == min(cores, tokens, num_blocks * block_size)
    if t["usedCores"]:
        assert 1 <= t["stripeSlots"] <= block_size
        assert math.ceil(block_size / t["stripeSlots"]) <= t["blockStripes"] < math.ceil(block_size / t["stripeSlots"]) + cores
        assert math.gcd(t["blockStripes"], t["usedCores"]) == 1
        assert t["usedCores"] > 1 or t["stripeSlots"] == block_size


@pytest.mark.parametrize("cores", [40, 48])
@pytest.mark.parametrize("block_size", [16, 128])
@pytest.mark.parametrize("tokens", [64, 128, 256])
def test_reshape_decode_step_spreads_evenly(monkeypatch: pytest.MonkeyPatch, tokens: int, block_size: int,
                                            cores: int) -> None:
    """Decode: one token per sequence, each in its own block. Sequences of one length write the same
    position of consecutive blocks: the cores' loads differ by at most one token."""
    t = reshape_tiling(monkeypatch, tokens, 4096, block_size, cores)
    for position in (0, block_size // 2, block_size - 1):
        loads = core_loads(t, [(1000 + b) * block_size + position for b in range(tokens)])
        assert max(loads) - min(loads) <= 1, (position, loads)


@pytest.mark.parametrize("cores", [40, 48])
@pytest.mark.parametrize("block_size", [16, 64, 128])
@pytest.mark.parametrize("tokens", [2048, 4096, 8192])
def test_reshape_prefill_spreads_over_every_core(monkeypatch: pytest.MonkeyPatch, tokens: int, block_size: int,
                                                 cores: int) -> None:
    """Prefill: thousands of tokens into consecutive positions of 16 to 512 blocks. Into
    consecutive blocks (a fresh cache) no core writes more than 1.15 times its share; into blocks
    anywhere in the cache (8 sequences) no more than 1.75 times. Whole blocks per core would leave
    cores idle (32 blocks on 40 cores) or double up (48 blocks on 40)."""
    t = reshape_tiling(monkeypatch, tokens, 4096, block_size, cores)
    share = tokens / cores
    fresh = list(range(100 * block_size, 100 * block_size + tokens))
    assert max(core_loads(t, fresh)) <= 1.15 * share
    pick = random.Random(tokens + block_size + cores)
    length = tokens // 8
    blocks = pick.sample(range(4096), 8 * math.ceil(length / block_size))
    anywhere = [blocks[j // block_size + q * math.ceil(length / block_size)] * block_size + j % block_size
                for q in range(8) for j in range(length)]
    assert max(core_loads(t, anywhere)) <= 1.75 * share
