"""The sim backend: the AscendC kernels on the host model, bit for bit against the reference.

Calls go straight to ``ascend_kv.backends.sim`` with :class:`KvCacheArgs` / :class:`PagedLoadArgs`
(index tensors of either width), under core counts 1, 2, 7, 40 and 48 and UB sizes small enough
to force many chunks and many staged windows. Strided tensors (MLA column slices, K and V held
block by block in one buffer, strided outputs) run in place, and the bytes of the underlying
buffers outside the views' elements must not change. Then the instrument itself: the op
binding's checks, the model's and the tiling's errors, the build cache.
"""

from __future__ import annotations

import math
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from cases import (
    ND,
    NZ,
    Case,
    bits,
    bits_equal,
    kv_cache_case,
    kv_cache_cases,
    paged_case,
    paged_cases,
    random_bits,
    row_shape,
)
from hypothesis import given
from hypothesis import strategies as st

from ascend_kv.api.errors import BackendUnavailableError
from ascend_kv.api.params import KvCacheCfg
from ascend_kv.backends import kernel_domain, sim
from calls import KvCacheArgs, PagedLoadArgs
from ascend_kv.tools import reference

CORES = [1, 2, 7, 40, 48]
DEFAULT_UB = 192 * 1024 - 256 - 8 * 1024
# 256 B: the smallest UB the tiling takes (32-byte index windows, 64-byte copy buffers);
# 1 KB: many chunks per run; default: the A2/A3 UB.
UB_SIZES = [256, 1024, DEFAULT_UB]




# ----------------------------------------------------------------------------- the calls


def kv_args(case: Case) -> KvCacheArgs:
    """The case's call as :class:`KvCacheArgs` (a 4-D ``new_kv`` as its flat rows)."""
    new_kv, layer_id, past, token_offset, seq_len = case.args
    return KvCacheArgs(new_kv.reshape(-1, past.shape[-1]), past, layer_id, token_offset, seq_len)


def paged_args(case: Case, rows: int) -> PagedLoadArgs:
    """The case's call as :class:`PagedLoadArgs`; outputs not given are ``rows`` zero rows."""
    key_cache, value_cache, block_table, context_lens = case.args
    kw = case.kwargs
    layout = KvCacheCfg(kw["kv_cache_cfg"])
    key, value = kw.get("key"), kw.get("value")
    if key is None or value is None:
        key, value = (torch.zeros((rows, *row_shape(layout, c)), dtype=c.dtype) for c in (key_cache, value_cache))
    return PagedLoadArgs(layout, key_cache, value_cache, block_table, context_lens, kw.get("seq_starts"),
                         kw.get("cumsum", False), key, value)


def assert_kv_matches(case: Case) -> None:
    expected = reference.kv_cache(*case.cloned().args)
    args = kv_args(case.cloned())
    sim.kv_cache(args)
    assert bits_equal(args.past, expected)


def assert_paged_matches(case: Case) -> None:
    ref = case.cloned()
    expected = reference.paged_cache_load(*ref.args, **ref.kwargs)
    args = paged_args(case.cloned(), expected[0].shape[0])
    sim.paged_cache_load(args)
    assert bits_equal(args.key, expected[0]) and bits_equal(args.value, expected[1])


# ----------------------------------------------------------------------------- fixed workloads


def kv_workloads() -> list[Case]:
    return [
        kv_cache_case(torch.float16, [0, 13, 1, 0, 29, 7, 2, 0, 40], [3, 20, 1, 64, 29, 64, 9, 0, 41],
                      max_seq_len=64, hidden=160),
        kv_cache_case(torch.int8, [5, 0, 31, 3], [5, 2, 40, 3], max_seq_len=40, hidden=96, new_kv_4d=True,
                      layers=3, layer_id=2, index_dtype=torch.int64),
        kv_cache_case(torch.bfloat16, [1] * 64, [i % 9 + 1 for i in range(64)], hidden=128, layer_id=0),
        kv_cache_case(torch.float16, [0, 0, 0], [0, 5, 16]),
    ]


def paged_workloads() -> list[Case]:
    return [
        paged_case(ND, [0, 37, 5, 16, 70], block_size=16, num_blocks=12, seed=1),
        paged_case(ND, [21, 0, 9, 33], block_size=8, num_blocks=16, cumsum_base=3, seq_starts=[5, 8, 0, 17],
                   give_outputs=True, extra_rows=2, index_dtype=torch.int64, seed=2),
        paged_case(ND, [3, 4], block_size=1, num_blocks=9, key_dtype=torch.int8, num_heads=1, head_size_k=32,
                   head_size_v=64, seed=3),
        paged_case(NZ, [40, 0, 17, 3], block_size=16, num_blocks=10, seed=4),
        paged_case(NZ, [33, 70], key_dtype=torch.int8, value_dtype=torch.float16, num_heads=2, head_size_k=64,
                   head_size_v=32, block_size=32, num_blocks=6, give_outputs=True, extra_rows=1, seed=5),
        paged_case(NZ, [19], key_dtype=torch.int8, value_dtype=torch.bfloat16, num_heads=1, head_size_k=32,
                   head_size_v=16, seed=6),
        paged_case(ND, [20, 45], num_heads=1, head_size_k=512, head_size_v=64, block_size=16, num_blocks=8, seed=7),
        paged_case(NZ, [20, 45], num_heads=1, head_size_k=512, head_size_v=64, block_size=16, num_blocks=8, seed=8),
        paged_case(ND, [1] * 64, block_size=16, num_blocks=64, seed=9),
        paged_case(NZ, [0, 0], seed=10),
    ]


@pytest.mark.parametrize("ub", UB_SIZES)
@pytest.mark.parametrize("cores", CORES)
def test_fixed_workloads_on_every_core_count_and_ub_size(configure, cores: int, ub: int) -> None:
    configure(cores, ub)
    for case in kv_workloads():
        assert_kv_matches(case)
    for case in paged_workloads():
        assert_paged_matches(case)


@pytest.mark.parametrize(("cases", "check"), [(kv_cache_cases, assert_kv_matches), (paged_cases, assert_paged_matches)],
                         ids=["kv_cache", "paged_cache_load"])
@given(data=st.data(), cores=st.sampled_from(CORES), ub=st.sampled_from(UB_SIZES + [512, 4096]))
def test_any_case_any_config(configure, cases: Callable[[], st.SearchStrategy[Case]], check: Callable[[Case], None],
                             data: st.DataObject, cores: int, ub: int) -> None:
    configure(cores, ub)
    check(data.draw(cases()))


def test_nz_largest_row_moves_in_segments(configure) -> None:
    """A 147456-byte NZ row (the largest allowed) is larger than a copy buffer."""
    configure(7, DEFAULT_UB)
    assert_paged_matches(paged_case(NZ, [5, 18], num_heads=128, head_size_k=576, head_size_v=16, block_size=16,
                                    num_blocks=2, seed=11))


def test_large_block_size(configure) -> None:
    """Slots 2 MB apart: the NZ gather's byte gap is far beyond the old 16-bit gap field."""
    configure(2, 4096)
    assert_paged_matches(paged_case(NZ, [3, 40], num_heads=1, head_size_k=32, head_size_v=16,
                                    block_size=65552, num_blocks=2, seed=12))


# ----------------------------------------------------------------------------- strided views, in place


def in_view(buffer: torch.Tensor, view: torch.Tensor) -> torch.Tensor:
    """A bool mask over ``buffer``'s elements: True where ``view`` (a view of it) has an element."""
    mask = torch.zeros(buffer.numel(), dtype=torch.bool)
    offsets = torch.zeros(view.shape, dtype=torch.long)
    for dim, (size, stride) in enumerate(zip(view.shape, view.stride())):
        shape = [1] * view.dim()
        shape[dim] = size
        offsets = offsets + (torch.arange(size) * stride).reshape(shape)
    mask[(offsets + view.storage_offset() - buffer.storage_offset()).reshape(-1)] = True
    return mask.reshape(buffer.shape)


def assert_gaps_unchanged(buffer: torch.Tensor, before: torch.Tensor, *views: torch.Tensor) -> None:
    """Every element of ``buffer`` that no view covers still holds its ``before`` bits."""
    covered = torch.zeros(buffer.shape, dtype=torch.bool)
    for view in views:
        covered |= in_view(buffer, view)
    assert not covered.all(), "the test needs gaps to watch"
    assert torch.equal(bits(buffer)[~covered], bits(before)[~covered])


@pytest.mark.parametrize("cores", [1, 7])
def test_kv_cache_strided_past_and_new_kv_in_place(configure, cores: int) -> None:
    """past a slice of a wider buffer (every dim strided but the row), new_kv rows of a wider buffer."""
    configure(cores, 1024)
    layers, batch, max_seq_len, hidden = 2, 3, 8, 32
    past_buffer = random_bits((layers + 1, batch + 1, max_seq_len + 3, hidden + 16), torch.float16, 1)
    past = past_buffer[1:, 1:, 2:2 + max_seq_len, 8:8 + hidden]
    new_buffer = random_bits((9, hidden + 32), torch.float16, 2)
    new_kv = new_buffer[:, 16:16 + hidden]
    token_offset, seq_len = torch.tensor([3, 8, 5], dtype=torch.int32), torch.tensor([3, 4, 2])
    args = KvCacheArgs(new_kv, past, 1, token_offset, seq_len)
    assert kernel_domain.outside_reason(args) is None
    expected = reference.kv_cache(new_kv.clone(), 1, past.clone(), token_offset, seq_len)
    before = past_buffer.clone()
    sim.kv_cache(args)
    assert bits_equal(past, expected)
    assert_gaps_unchanged(past_buffer, before, past)


def test_kv_cache_broadcast_new_kv_row_is_read_in_place(configure) -> None:
    """new_kv rows 0 bytes apart (one row expanded): each token is copied on its own."""
    configure(2, 1024)
    row = random_bits((1, 32), torch.float16, 3)
    new_kv = row.expand(6, 32)
    past = random_bits((1, 2, 8, 32), torch.float16, 4)
    token_offset, seq_len = torch.tensor([4, 8]), torch.tensor([4, 2])
    args = KvCacheArgs(new_kv, past, 0, token_offset, seq_len)
    assert kernel_domain.outside_reason(args) is None
    expected = reference.kv_cache(new_kv.contiguous(), 0, past.clone(), token_offset, seq_len)
    sim.kv_cache(args)
    assert bits_equal(past, expected)


def strided_paged_views(layout: KvCacheCfg, kind: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(buffer, key_cache, value_cache)``: two cache views of one buffer."""
    nb, bs = 5, 16
    if kind == "mla-column-slices":  # one [nb, bs, 1, 576] latent cache: K the first 512, V the last 64
        if layout == ND:
            buffer = random_bits((nb, bs, 1, 576), torch.float16, 3)
            return buffer, buffer[..., :512], buffer[..., 512:]
        buffer = random_bits((nb, 576 // 16, bs, 16), torch.float16, 3)
        return buffer, buffer[:, :512 // 16], buffer[:, 512 // 16:]
    # K and V block by block in one buffer: [nb, 2, ...]
    if layout == ND:
        buffer = random_bits((nb, 2, bs, 2, 16), torch.float16, 4)
    else:
        buffer = random_bits((nb, 2, 2, bs, 16), torch.float16, 4)
    return buffer, buffer[:, 0], buffer[:, 1]


@pytest.mark.parametrize("kind", ["mla-column-slices", "kv-block-interleaved"])
@pytest.mark.parametrize("layout", [ND, NZ])
@pytest.mark.parametrize("cores", [1, 2, 7])
def test_paged_strided_caches_and_outputs_in_place(configure, layout: KvCacheCfg, kind: str, cores: int) -> None:
    configure(cores, 2048)
    buffer, key_cache, value_cache = strided_paged_views(layout, kind)
    lens = [9, 30, 1]
    table = torch.tensor([[4, 0, 2], [1, 3, 0], [2, -1, 9]], dtype=torch.int32)
    context_lens = torch.tensor(lens, dtype=torch.int64)
    rows = sum(lens)
    # outputs: rows of wider buffers, a sentinel band of 16 elements on each side of every row
    key_row, value_row = (row_shape(layout, c) for c in (key_cache, value_cache))
    key_buffer = random_bits((rows + 2, math.prod(key_row) + 32), torch.float16, 5)
    value_buffer = random_bits((rows + 2, math.prod(value_row) + 32), torch.float16, 6)
    key = key_buffer[1:1 + rows, 16:16 + math.prod(key_row)].unflatten(1, key_row)
    value = value_buffer[1:1 + rows, 16:16 + math.prod(value_row)].unflatten(1, value_row)
    args = PagedLoadArgs(layout, key_cache, value_cache, table, context_lens, None, False, key, value)
    assert kernel_domain.outside_reason(args) is None
    expected = reference.paged_cache_load(key_cache.contiguous(), value_cache.contiguous(), table, context_lens,
                                          kv_cache_cfg=layout)
    cache_before, key_before, value_before = buffer.clone(), key_buffer.clone(), value_buffer.clone()
    sim.paged_cache_load(args)
    assert bits_equal(key, expected[0]) and bits_equal(value, expected[1])
    assert bits_equal(buffer, cache_before)
    assert_gaps_unchanged(key_buffer, key_before, key)
    assert_gaps_unchanged(value_buffer, value_before, value)


def test_nz_slots_strided_in_place(configure) -> None:
    """NZ slots two apart (stride(2) = 2 * E): pieces and slots both strided."""
    configure(3, 1024)
    buffer = random_bits((4, 2, 32, 16), torch.float16, 7)
    cache = buffer[:, :, ::2]
    args = PagedLoadArgs(NZ, cache, cache, torch.tensor([[3, 1], [0, 2]]), torch.tensor([20, 7]), None, False,
                         torch.zeros((27, 32), dtype=torch.float16), torch.zeros((27, 32), dtype=torch.float16))
    assert kernel_domain.outside_reason(args) is None
    expected = reference.paged_cache_load(cache.contiguous(), cache.contiguous(), args.block_table,
                                          args.context_lens, kv_cache_cfg=NZ)
    sim.paged_cache_load(args)
    assert bits_equal(args.key, expected[0]) and bits_equal(args.value, expected[1])


def test_outside_the_domain_runs_on_contiguous_copies(configure) -> None:
    """Rows that are not contiguous (a transposed past, NZ pieces strided inside) still give the
    reference's answer, written back into the caller's tensors."""
    configure(7, 1024)
    case = kv_cache_case(torch.float16, [3, 5], [4, 9], hidden=32)
    expected = reference.kv_cache(*case.cloned().args)
    new_kv, layer_id, past, token_offset, seq_len = case.args
    strided_past = past.transpose(0, 3).contiguous().transpose(0, 3)
    args = KvCacheArgs(new_kv.t().contiguous().t(), strided_past, layer_id, token_offset, seq_len)
    assert "new_kv has sizes (8, 32) and strides (1, 8)" in (kernel_domain.outside_reason(args) or "")
    sim.kv_cache(args)
    assert bits_equal(strided_past, expected)

    case = paged_case(NZ, [7, 20], give_outputs=True, seed=40)
    ref = case.cloned()
    expected_key, expected_value = reference.paged_cache_load(*ref.args, **ref.kwargs)
    args = paged_args(case, 0)
    args = PagedLoadArgs(NZ, args.key_cache.transpose(1, 3).contiguous().transpose(1, 3), args.value_cache,
                         args.block_table, args.context_lens, None, False, args.key.t().contiguous().t(),
                         args.value)
    assert "key_cache has sizes" in (kernel_domain.outside_reason(args) or "")
    sim.paged_cache_load(args)
    assert bits_equal(args.key, expected_key) and bits_equal(args.value, expected_value)


# ----------------------------------------------------------------------------- the op binding's checks


def _kv_call() -> tuple[torch.Tensor, ...]:
    return (random_bits((4, 32), torch.float16, 1), random_bits((2, 2, 8, 32), torch.float16, 2),
            torch.tensor([4, 2]), torch.tensor([2, 2]))


def _paged_call() -> dict[str, object]:
    cache = random_bits((4, 16, 2, 16), torch.float16, 3)
    return {"key_cache": cache, "value_cache": cache.clone(), "block_table": torch.tensor([[1, 2]]),
            "context_lens": torch.tensor([5]), "seq_starts": None,
            "key": torch.zeros((5, 2, 16), dtype=torch.float16), "value": torch.zeros((5, 2, 16), dtype=torch.float16),
            "layout": 1, "cumsum": False}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"value_cache": random_bits((3, 16, 2, 16), torch.float16, 4)},
         "value_cache has 3 blocks of 16 slots, key_cache 4 of 16; they must match"),
        ({"value": torch.zeros((5, 2, 8), dtype=torch.float16)}, "value rows [2, 8] do not match the token rows"),
        ({"block_table": torch.tensor([[1.0, 2.0]])}, "block_table must be int32 or int64, got Float"),
        ({"context_lens": torch.tensor([5, 1])}, "context_lens must have 1 entries, got 2"),
        ({"context_lens": torch.tensor([[5, 0]])[:, 0]}, None),
        ({"block_table": torch.tensor([[1, 9], [2, 9]]).t()}, "block_table must be contiguous"),
        ({"key": torch.zeros((5, 16, 2), dtype=torch.float16).transpose(1, 2)},
         "key's token rows must be contiguous"),
        ({"key_cache": random_bits((4, 16, 16, 2), torch.float16, 5).transpose(2, 3)},
         "key_cache's token rows (dims 2, 3) must be contiguous"),
        ({"layout": 2}, "layout must be 0 (NZ) or 1 (ND), got 2"),
        ({"key": torch.zeros((5, 2, 16), dtype=torch.bfloat16)}, "key has dtype BFloat16, key_cache has Half"),
        # written tensors: rows 32 elements apart are distinct, 31 apart overlap (an expand() view shares all)
        ({"key": torch.zeros(5 * 32, dtype=torch.float16).as_strided((5, 2, 16), (32, 16, 1))}, None),
        ({"key": torch.zeros(5 * 32, dtype=torch.float16).as_strided((5, 2, 16), (31, 16, 1))},
         ("key is written in place, so each element needs its own memory, but sizes [5, 2, 16] with strides "
          "[31, 16, 1]")),
        ({"value": torch.zeros((1, 2, 16), dtype=torch.float16).expand(5, 2, 16)},
         "value is written in place, so each element needs its own memory"),
        # index tensors: the rank as well as the entry count
        ({"context_lens": torch.tensor([[5]])}, "context_lens must be 1-D [batch], got shape [1, 1]"),
        ({"seq_starts": torch.tensor([[0]])}, "seq_starts must be 1-D [batch], got shape [1, 1]"),
        ({"cumsum": True, "context_lens": torch.tensor([[0, 5]])},
         "context_lens must be 1-D [batch + 1], got shape [1, 2]"),
        ({"block_table": torch.tensor([1, 2])}, "block_table must be 2-D [batch, max_blocks], got shape [2]"),
    ],
)
def test_paged_binding_checks_every_tensor(change: dict[str, object], message: str | None) -> None:
    sim.load()
    call = {**_paged_call(), **change}
    if message is None:  # accepted (e.g. a one-column view of a 2-D tensor is contiguous)
        torch.ops.ascend_kv_host.paged_cache_load(**call)
        return
    with pytest.raises(RuntimeError, match="ascend_kv_host.paged_cache_load: .*" + re.escape(message)):
        torch.ops.ascend_kv_host.paged_cache_load(**call)


@pytest.mark.parametrize(
    ("index", "value", "message"),
    [
        (0, random_bits((4, 16), torch.float16, 1), "new_kv rows have 16 elements, past rows (past.shape[3]) 32"),
        (1, random_bits((2, 2, 8, 24), torch.float16, 2), "new_kv rows have 32 elements"),
        (2, torch.tensor([4, 2, 1]), "token_offset must have 2 entries, got 3"),
        (3, torch.tensor([2, 2], dtype=torch.int16), "seq_len must be int32 or int64, got Short"),
        (1, random_bits((2, 2, 32, 8), torch.float16, 2).transpose(2, 3), "past's rows (dim 3) must be contiguous"),
        (1, torch.zeros((2, 1, 8, 32), dtype=torch.float16).expand(2, 2, 8, 32),
         ("past is written in place, so each element needs its own memory, but sizes [2, 2, 8, 32] with strides "
          "[256, 0, 32, 1]")),
        (2, torch.tensor([[4, 2]]), "token_offset must be 1-D [batch], got shape [1, 2]"),
        (3, torch.tensor([[2], [2]]), "seq_len must be 1-D [batch], got shape [2, 1]"),
    ],
)
def test_kv_binding_checks_every_tensor(index: int, value: torch.Tensor, message: str) -> None:
    sim.load()
    call = list(_kv_call())
    call[index] = value
    with pytest.raises(RuntimeError, match="ascend_kv_host.kv_cache: " + re.escape(message)):
        torch.ops.ascend_kv_host.kv_cache(*call, None, 0)


def test_binding_reads_a_layer_tensor_and_ignores_layer_id() -> None:
    sim.load()
    new_kv, past, token_offset, seq_len = _kv_call()
    expected = reference.kv_cache(new_kv, 1, past.clone(), token_offset, seq_len)
    torch.ops.ascend_kv_host.kv_cache(new_kv, past, token_offset, seq_len, torch.tensor([1], dtype=torch.int32), 0)
    assert bits_equal(past, expected)
    with pytest.raises(RuntimeError, match="layer_tensor must have 1 entries, got 2"):
        torch.ops.ascend_kv_host.kv_cache(new_kv, past, token_offset, seq_len, torch.tensor([1, 1]), 0)
    for layer in (torch.tensor(0), torch.tensor([[0]])):  # one element of any rank, as the Python rule
        torch.ops.ascend_kv_host.kv_cache(new_kv, past, token_offset, seq_len, layer, 1)
    assert bits_equal(past, reference.kv_cache(new_kv, 0, expected.clone(), token_offset, seq_len))


def test_meta_implementations_trace_without_data() -> None:
    sim.load()
    new_kv, past, token_offset, seq_len = (t.to("meta") for t in _kv_call())
    torch.ops.ascend_kv_host.kv_cache(new_kv, past, token_offset, seq_len, None, 0)
    call = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in _paged_call().items()}
    torch.ops.ascend_kv_host.paged_cache_load(**call)


# ----------------------------------------------------------------------------- the instrument


def test_settings_are_validated(configure) -> None:
    configure(0, DEFAULT_UB)
    with pytest.raises(RuntimeError, match="ASCEND_KV_SIM_CORES must be an integer >= 1, got '0'"):
        sim.kv_cache(kv_args(kv_cache_case(torch.float16, [1], [1])))


def test_ub_too_small_for_the_tiling(configure) -> None:
    configure(2, 96)
    with pytest.raises(RuntimeError, match="ascend_kv_host.kv_cache: tiling failed: the UB size leaves no room"):
        assert_kv_matches(kv_cache_case(torch.float16, [2], [2]))


def test_ub_larger_than_the_hardware_is_refused_by_the_model(configure) -> None:
    configure(2, 256 * 1024)
    with pytest.raises(RuntimeError, match="host model of the AscendC API stopped the kernel: .*ubBytes 262144"):
        assert_kv_matches(kv_cache_case(torch.float16, [2], [2]))


def test_model_errors_surface_as_runtime_errors() -> None:
    """The model refuses a written tensor that shares elements with another one (new_kv inside past)."""
    sim.load()
    past = random_bits((1, 1, 4, 16), torch.float16, 0)
    with pytest.raises(RuntimeError, match="host model .*GM regions 'new_kv' and 'past' overlap"):
        torch.ops.ascend_kv_host.kv_cache(past[0, 0, :2], past, torch.tensor([2]), torch.tensor([2]), None, 0)


def test_missing_cmake_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda *_, **__: None)
    with pytest.raises(BackendUnavailableError, match="builds the AscendC kernels for the host with CMake"):
        sim.library_path()


def test_cache_key_follows_every_source(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An edited kernel, header, model or CMake file gets a new library; the same sources keep it."""
    copy = tmp_path / "ascendc"
    shutil.copytree(sim.source_root(), copy)
    monkeypatch.setattr(sim, "source_root", lambda: copy)
    monkeypatch.setenv("ASCEND_KV_CACHE_DIR", str(tmp_path / "cache"))
    first = sim._cached_path()
    assert first.parent == tmp_path / "cache" and sim._cached_path() == first
    seen = {first}
    for name in ("kernels/copy_common.h", "sim/include/kernel_operator.h", "cmake/host.cmake", "host/tiling.cpp"):
        (copy / name).write_text((copy / name).read_text() + "\n")
        assert sim._cached_path() not in seen, name
        seen.add(sim._cached_path())
    (copy / "sim" / "tests" / "model_cases.cpp").write_text("// not part of the library\n")
    assert sim._cached_path() in seen


def test_a_failed_build_reports_the_compiler(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    copy = tmp_path / "ascendc"
    shutil.copytree(sim.source_root(), copy)
    kernel = copy / "kernels" / "kv_cache.cpp"
    kernel.write_text(kernel.read_text() + "\nthis is not C++;\n")
    monkeypatch.setattr(sim, "source_root", lambda: copy)
    monkeypatch.setenv("ASCEND_KV_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(BackendUnavailableError, match="(?s)compiling the AscendC kernels for the host failed.*kv_cache.cpp"):
        sim.library_path()
    assert not list((tmp_path / "cache").glob("*.so"))


def test_the_wheel_ships_every_file_the_host_build_reads() -> None:
    """The sim builds from ascend_kv/_ascendc in a wheel: pyproject.toml's package data for it
    must cover every source the build reads (the same globs setuptools expands)."""
    root = sim.source_root()
    entry = re.search(r'^"ascend_kv\._ascendc" = \[(.*?)\]', (root.parent / "pyproject.toml").read_text(), re.MULTILINE)
    assert entry is not None, "pyproject.toml ships no package data for ascend_kv._ascendc"
    patterns = re.findall(r'"([^"]+)"', entry.group(1))
    shipped = {path for pattern in patterns for path in root.glob(pattern)}
    missing = sorted(str(p.relative_to(root)) for p in sim._sources(root) if p not in shipped)
    assert not missing, f"add to [tool.setuptools.package-data] 'ascend_kv._ascendc': {missing}"
