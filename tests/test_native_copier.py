"""The compiled run copier (``cpu_fallback/_rowcopy.c``) with and without streaming stores.

Each layout the fallback hands the copier (ND token rows, NZ fractal-row pieces, kv_cache runs
with a per-run destination step) is copied both ways and compared byte for byte with the same
copy written as torch slicing, over the whole destination buffer (so a write outside the rows
fails). The copier reports whether it streamed, so each test also checks that streaming ran
exactly when it should: on x86-64, at or above the threshold, destination 16-byte aligned.
End to end, both operations with streaming forced must equal the reference bit for bit.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import platform
import shlex
import subprocess
import sysconfig
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from unittest import mock

import numpy as np
import pytest
import torch
from cases import Case, bits_equal, kv_cache_cases, paged_cases, random_bits
from hypothesis import given
from hypothesis import strategies as st
from test_ops import run_kv_cache, run_paged

import ascend_kv
from ascend_kv import KvCacheCfg
from ascend_kv.tools import reference

native = importlib.import_module("ascend_kv.cpu_fallback.native")
kv_cache_module = importlib.import_module("ascend_kv.cpu_fallback.kv_cache")
paged_module = importlib.import_module("ascend_kv.cpu_fallback.paged_cache_load")

pytestmark = pytest.mark.skipif(not native.AVAILABLE, reason="the compiled copier was not built")

#: Whether this machine has the streaming path (``_rowcopy.c``: x86-64 only).
CAN_STREAM = platform.machine().lower() in ("x86_64", "amd64")
ALWAYS, NEVER = 0, 1 << 62
#: Destination offsets in bytes from a 64-byte aligned allocation: 2 is not 16-byte aligned.
OFFSETS = st.sampled_from([0, 2, 16])
#: Padding after each destination row in bytes: 8 makes the row step not a multiple of 16.
PADDINGS = st.sampled_from([0, 8, 32])


def rows_of(buffer: torch.Tensor, offset: int, rows: int, row: int, padding: int) -> torch.Tensor:
    """``[rows, row]`` bytes of ``buffer`` from ``offset``, each row followed by ``padding`` bytes."""
    return buffer[offset : offset + rows * (row + padding)].view(rows, row + padding)[:, :row]


def copied(stream_min: int, *args: object, **kwargs: object) -> bool:
    """:func:`native.copy_runs` with ``stream_min_bytes = stream_min``; whether it streamed."""
    return native.copy_runs(*args, stream_min_bytes=stream_min, **kwargs)  # type: ignore[arg-type]


def streams(stream_min: int, written: int, aligned: bool) -> bool:
    """Whether the copier must stream a call writing ``written`` bytes."""
    return CAN_STREAM and aligned and written >= stream_min


# ----------------------------------------------------------------------------- run shapes


@st.composite
def runs(draw: st.DrawFn, sources: int, max_items: int) -> tuple[list[int], list[int]]:
    """Per run: a source index below ``sources`` and an item count (0 included)."""
    n = draw(st.integers(0, 5))
    return ([draw(st.integers(0, sources - 1)) for _ in range(n)],
            [draw(st.integers(0, max_items)) for _ in range(n)])


@given(blocks=st.integers(1, 4), block_size=st.integers(1, 6), row=st.sampled_from([32, 64, 96, 256]),
       data=st.data(), offset=OFFSETS, padding=PADDINGS, stream_min=st.sampled_from([ALWAYS, NEVER, 200]),
       seed=st.integers(0, 2**31))
def test_nd_rows_like_paged_load(blocks: int, block_size: int, row: int, data: st.DataObject, offset: int,
                                 padding: int, stream_min: int, seed: int) -> None:
    """Run r: ``items[r]`` token rows of block ``block[r]`` to output rows from ``start[r]``."""
    block, items = data.draw(runs(blocks, block_size))
    start = np.cumsum([0, *items])[:-1]
    total = int(sum(items))
    cache = random_bits((blocks * block_size * row,), torch.uint8, seed).view(blocks, block_size, row)
    out_buffer = random_bits((offset + max(total, 1) * (row + padding),), torch.uint8, seed + 1)
    expected = out_buffer.clone()
    want = rows_of(expected, offset, total, row, padding)
    for b, s, k in zip(block, start, items):
        want[s : s + k] = cache[b, :k]
    streamed = copied(stream_min, cache.data_ptr(), out_buffer.data_ptr() + offset, np.array(block), start,
                      np.array(items), index_steps=(block_size * row, row + padding), item_bytes=row,
                      steps=(row, row + padding))
    assert torch.equal(out_buffer, expected)
    assert streamed == streams(stream_min, total * row, offset % 16 == 0 and padding % 16 == 0)


@given(blocks=st.integers(1, 4), block_size=st.integers(1, 6), pieces=st.integers(1, 19), data=st.data(),
       offset=OFFSETS, padding=PADDINGS, stream_min=st.sampled_from([ALWAYS, NEVER]), seed=st.integers(0, 2**31))
def test_nz_pieces_like_paged_load(blocks: int, block_size: int, pieces: int, data: st.DataObject, offset: int,
                                   padding: int, stream_min: int, seed: int) -> None:
    """A block is ``[pieces, block_size, 32]`` bytes; a token's output row is its ``pieces`` fractal rows."""
    block, items = data.draw(runs(blocks, block_size))
    start = np.cumsum([0, *items])[:-1]
    total, row = int(sum(items)), pieces * 32
    cache = random_bits((blocks * pieces * block_size * 32,), torch.uint8, seed).view(blocks, pieces, block_size, 32)
    out_buffer = random_bits((offset + max(total, 1) * (row + padding),), torch.uint8, seed + 1)
    expected = out_buffer.clone()
    want = rows_of(expected, offset, total, row, padding)
    for b, s, k in zip(block, start, items):
        want[s : s + k] = cache[b, :, :k].transpose(0, 1).reshape(k, row)
    streamed = copied(stream_min, cache.data_ptr(), out_buffer.data_ptr() + offset, np.array(block), start,
                      np.array(items), index_steps=(pieces * block_size * 32, row + padding), item_bytes=32,
                      steps=(32, row + padding), pieces=pieces, piece_steps=(block_size * 32, 32))
    assert torch.equal(out_buffer, expected)
    assert streamed == streams(stream_min, total * row, offset % 16 == 0 and padding % 16 == 0)


@given(batch=st.integers(1, 4), max_seq=st.integers(1, 6), row=st.sampled_from([32, 64, 160]), data=st.data(),
       offset=OFFSETS, padding=PADDINGS, stream_min=st.sampled_from([ALWAYS, NEVER]), seed=st.integers(0, 2**31))
def test_kv_cache_runs_with_a_run_step(batch: int, max_seq: int, row: int, data: st.DataObject, offset: int,
                                       padding: int, stream_min: int, seed: int) -> None:
    """Run b: ``seq_len[b]`` rows of ``new_kv`` from ``read_start[b]`` to ``past[b]`` from ``write_start[b]``."""
    seq_len = [data.draw(st.integers(0, max_seq)) for _ in range(batch)]
    write_start = [data.draw(st.integers(0, max_seq - n)) for n in seq_len]
    read_start = np.cumsum([0, *seq_len])[:-1]
    total = int(sum(seq_len))
    new_kv = random_bits((max(total, 1) * row,), torch.uint8, seed).view(-1, row)
    past_buffer = random_bits((offset + batch * max_seq * (row + padding),), torch.uint8, seed + 1)
    expected = past_buffer.clone()
    want = rows_of(expected, offset, batch * max_seq, row, padding).unflatten(0, (batch, max_seq))
    for b, (r, w, k) in enumerate(zip(read_start, write_start, seq_len)):
        want[b, w : w + k] = new_kv[r : r + k]
    streamed = copied(stream_min, new_kv.data_ptr(), past_buffer.data_ptr() + offset, read_start,
                      np.array(write_start), np.array(seq_len), index_steps=(row, row + padding),
                      run_step=max_seq * (row + padding), item_bytes=row, steps=(row, row + padding))
    assert torch.equal(past_buffer, expected)
    assert streamed == streams(stream_min, total * row, offset % 16 == 0 and padding % 16 == 0)


#: Destination placement: offset, index step, run step, item step, piece step (bytes); all 16-byte aligned.
ALIGNED = {"offset": 0, "index_step": 1024, "run_step": 512, "step": 128, "piece_step": 48}


@pytest.mark.parametrize("misaligned", [None, *ALIGNED])
@pytest.mark.parametrize("stream_min", [ALWAYS, NEVER])
def test_any_misaligned_destination_step_prevents_streaming(misaligned: str | None, stream_min: int) -> None:
    """2 runs of 2 items of 2 pieces of 32 bytes; one destination placement at a time 8 bytes off 16."""
    at = {name: value + 8 * (name == misaligned) for name, value in ALIGNED.items()}
    src, dst = random_bits((1024,), torch.uint8, 0), random_bits((4096,), torch.uint8, 1)
    expected = dst.clone()
    src_index, dst_index, runs_step, s_step, s_piece = [1, 0], [0, 1], 256, 96, 32
    for r in range(2):
        for i in range(2):
            for p in range(2):
                s = src_index[r] * runs_step + i * s_step + p * s_piece
                d = at["offset"] + dst_index[r] * at["index_step"] + r * at["run_step"] + i * at["step"] + p * at["piece_step"]
                expected[d : d + 32] = src[s : s + 32]
    streamed = copied(stream_min, src.data_ptr(), dst.data_ptr() + at["offset"], np.array(src_index),
                      np.array(dst_index), np.array([2, 2]), index_steps=(runs_step, at["index_step"]),
                      run_step=at["run_step"], item_bytes=32, steps=(s_step, at["step"]), pieces=2,
                      piece_steps=(s_piece, at["piece_step"]))
    assert torch.equal(dst, expected)
    assert streamed == streams(stream_min, 2 * 2 * 2 * 32, misaligned is None)


@pytest.mark.parametrize("stream_min", [ALWAYS, NEVER])
def test_runs_of_zero_items_touch_nothing(stream_min: int) -> None:
    """Runs with 0 items are skipped, however far away their indices point."""
    src, dst = random_bits((64,), torch.uint8, 0), random_bits((128,), torch.uint8, 1)
    expected = dst.clone()
    expected[64:96] = src[32:64]
    far = 1 << 40
    streamed = copied(stream_min, src.data_ptr(), dst.data_ptr(), np.array([far, 1, far]), np.array([far, 2, -far]),
                      np.array([0, 1, 0]), index_steps=(32, 32), item_bytes=32, steps=(32, 32))
    assert torch.equal(dst, expected)
    assert streamed == streams(stream_min, 32, True)


@pytest.mark.parametrize("stream_min", [ALWAYS, NEVER])
def test_a_call_writing_nothing(stream_min: int) -> None:
    dst = random_bits((32,), torch.uint8, 1)
    expected = dst.clone()
    empty = np.zeros(0, dtype=np.int64)
    streamed = copied(stream_min, 0, dst.data_ptr(), empty, empty, empty, index_steps=(32, 32), item_bytes=32,
                      steps=(32, 32))
    assert torch.equal(dst, expected)
    assert streamed == streams(stream_min, 0, True)


@pytest.mark.parametrize("tokens, streamed", [(255, False), (256, True)])
def test_threshold_counts_every_byte_written(tokens: int, streamed: bool) -> None:
    """``items * item_bytes * pieces`` summed over the runs, against a threshold of 256 tokens' bytes."""
    pieces, item = 4, 32
    row = pieces * item
    src, dst = random_bits((tokens * row,), torch.uint8, 0), torch.zeros(tokens * row, dtype=torch.uint8)
    half = tokens // 2
    result = copied(256 * row, src.data_ptr(), dst.data_ptr(), np.array([0, half]), np.array([0, half]),
                    np.array([half, tokens - half]), index_steps=(row, row), item_bytes=item, steps=(row, row),
                    pieces=pieces, piece_steps=(item, item))
    assert torch.equal(dst, src)
    assert result == (CAN_STREAM and streamed)


def test_the_c_function_does_not_stream_below_its_threshold() -> None:
    """A call writing fewer bytes than ``stream_min_bytes`` gets the cached stores."""
    src, dst = random_bits((64,), torch.uint8, 0), torch.zeros(64, dtype=torch.uint8)
    one = np.ones(1, dtype=np.int64)
    assert native.copy_with(native.Steps(0, 0, 0, 32, 32, 32, 1, 0, 0), src.data_ptr(), dst.data_ptr(), one * 0,
                             one * 0, one * 2, 65) is False
    assert torch.equal(dst, src)


# ----------------------------------------------------------------------------- end to end


@contextmanager
def forced_streaming(copy_runs: object = None, can_stream: bool = CAN_STREAM) -> Iterator[None]:
    """The fallback with both operations' ``STREAM_MIN_BYTES = 0``, on the built copier or ``copy_runs``;
    asserts that every copier call streamed exactly when ``can_stream``."""
    copy, calls = copy_runs or native.copy_with, []

    def spy(*args: object) -> bool:
        calls.append(copy(*args))
        return calls[-1]

    with ascend_kv.use_backend("fallback"), mock.patch.object(kv_cache_module, "STREAM_MIN_BYTES", ALWAYS), \
            mock.patch.object(paged_module, "STREAM_MIN_BYTES", ALWAYS), mock.patch.object(native, "copy_with", spy):
        yield
    assert calls == [can_stream] * len(calls)                          # torch allocations are 64-byte aligned


@pytest.fixture(scope="module")
def portable_copier(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """``_rowcopy.c`` built as on a CPU without streaming stores (``-DROWCOPY_PORTABLE``), e.g. aarch64."""
    source = Path(native.__file__).with_name("_rowcopy.c")
    if not source.exists():                                          # an installed wheel ships no C source
        source = Path(__file__).resolve().parents[1] / "cpu_fallback" / "_rowcopy.c"
    built = tmp_path_factory.mktemp("portable") / f"_rowcopy{sysconfig.get_config_var('EXT_SUFFIX')}"
    compiler = shlex.split(sysconfig.get_config_var("CC") or "cc")
    subprocess.run([*compiler, "-O2", "-shared", "-fPIC", "-DROWCOPY_PORTABLE", f"-I{sysconfig.get_paths()['include']}",
                    str(source), "-o", str(built)], check=True)
    loader = importlib.machinery.ExtensionFileLoader("_rowcopy", str(built))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("_rowcopy", loader))
    loader.exec_module(module)
    return module


@given(case=st.one_of(kv_cache_cases().map(lambda case: ("kv_cache", case)),
                      paged_cases().map(lambda case: ("paged", case))))
def test_portable_build_matches_reference_and_never_streams(
    portable_copier: ModuleType, case: tuple[str, Case]
) -> None:
    """Asked to stream every call, the build for CPUs without streaming stores runs its chunk loop instead."""
    op, call = case
    with forced_streaming(portable_copier.copy_runs, can_stream=False):
        (run_kv_cache if op == "kv_cache" else run_paged)(call)


@given(case=kv_cache_cases())
def test_kv_cache_streamed_matches_reference(case: Case) -> None:
    with forced_streaming():
        run_kv_cache(case)


@given(case=paged_cases())
def test_paged_cache_load_streamed_matches_reference(case: Case) -> None:
    with forced_streaming():
        run_paged(case)


@given(case=paged_cases())
def test_paged_cache_load_streamed_with_the_layout_by_name(case: Case) -> None:
    """``kv_cache_cfg="nd"`` / ``"nz"`` (the reference takes only the enum)."""
    ours, ref = case.cloned(), case.cloned()
    ours.kwargs["kv_cache_cfg"] = "nd" if case.kwargs["kv_cache_cfg"] == KvCacheCfg.K_CACHE_V_CACHE_ND else "nz"
    with forced_streaming():
        got = ascend_kv.paged_cache_load(*ours.args, **ours.kwargs)
    want = reference.paged_cache_load(*ref.args, **ref.kwargs)
    assert all(bits_equal(g, w) for g, w in zip(got, want))


def test_each_operation_streams_from_its_own_threshold() -> None:
    """kv_cache streams a 1 MB write (its rows are read back much later); a paged load writing 4 MB
    in all does not (attention reads it next); one writing 8 MB streams both of its 4 MB outputs."""
    copy, streamed = native.copy_with, []

    def spy(*args: object) -> bool:
        streamed.append(copy(*args))
        return streamed[-1]

    rows = torch.zeros((1024, 512), dtype=torch.float16)                            # 1 MB
    past = torch.zeros((1, 1, 1024, 512), dtype=torch.float16)
    one = torch.tensor([1024])
    with ascend_kv.use_backend("fallback"), mock.patch.object(native, "copy_with", spy):
        ascend_kv.kv_cache(rows, 0, past, one, one)
        for tokens in (1024, 2048):                                                  # 2 MB and 4 MB per output
            cache = torch.zeros((tokens // 16, 16, 8, 128), dtype=torch.float16)
            table = torch.arange(tokens // 16).view(1, -1)
            ascend_kv.paged_cache_load(cache, cache, table, torch.tensor([tokens]), kv_cache_cfg="nd")
    assert streamed == [CAN_STREAM, False, False, CAN_STREAM, CAN_STREAM]
