"""``block_copy(..., simultaneous=True)`` and ``copy_blocks(..., simultaneous=True)`` (docs/semantics.md §11.1):
cycles, chains, self-copies and overlapping fan-out against the reference of the spec's loop, bit for
bit, on the host paths, the sim and the device fallback (fake NPU, nothing read back); identical
views copied once in both modes; segments of one allocation; the rules at their boundaries."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import fake_npu
import pytest
import torch
from block_cases import STORAGE, Copies, caches
from cases import bits_equal, random_bits, require_compiled_as_eager
from hypothesis import given
from hypothesis import strategies as st
from test_block_copy import judge, on_the_device_fallback
from test_sim import KERNELS, SIM, kernels_on_the_fake_npu, ran_on
from test_sim_block_copy import CORES, DEFAULT_UB, launches

import ascend_kv
from ascend_kv.tools import reference

fake_npu.install()


@st.composite
def overlapping_copies(draw: st.DrawFn, num_blocks: int) -> Copies:
    """Copies among ``num_blocks`` blocks with distinct destinations and any sources (cycles,
    chains, self-copies and fan-out onto other sources all come up)."""
    m = draw(st.integers(0, num_blocks))
    destinations = list(draw(st.permutations(range(num_blocks))))[:m]
    n = draw(st.integers(1 if m else 0, max(m, 1)))
    sources = draw(st.lists(st.integers(0, num_blocks - 1), min_size=n, max_size=n))
    cuts = sorted(draw(st.lists(st.integers(0, m), min_size=n - 1, max_size=n - 1))) if n else []
    return Copies(sources, destinations, [*cuts, m] if n else [])


@st.composite
def simultaneous_cases(draw: st.DrawFn) -> tuple[torch.Tensor, torch.Tensor | None, Copies, torch.dtype]:
    storage = draw(st.sampled_from(STORAGE))
    layout = "nd" if storage == "column slices" else draw(st.sampled_from(["nd", "nz"]))
    num_blocks = draw(st.integers(1, 9))
    dtype = draw(st.sampled_from([torch.float16, torch.int8, torch.float32]))
    key, value = caches(storage, layout, num_blocks, dtype, draw(st.sampled_from([None, dtype])),
                        draw(st.integers(0, 2**16)), block_size=16 if layout == "nz" else 3,
                        head_size=32 if layout == "nz" else 5)
    return key, value, draw(overlapping_copies(num_blocks)), draw(st.sampled_from([torch.int32, torch.int64]))


def expected_after(tensors: list[torch.Tensor], pairs: list[tuple[int, int]]) -> list[torch.Tensor]:
    """The reference run on clones of the tensors' storages (views of one buffer stay views of one clone)."""
    clones: dict[int, torch.UntypedStorage] = {}
    views = []
    for t in tensors:
        storage = t.untyped_storage()
        clone = clones.setdefault(storage.data_ptr(), storage.clone())
        views.append(torch.empty(0, dtype=t.dtype).set_(clone, t.storage_offset(), t.shape, t.stride()))
    reference.simultaneous_copy(views, pairs)
    return views


@given(case=simultaneous_cases())
def test_block_copy_reads_every_source_first(backend: str, case: Any) -> None:
    key, value, copies, index_dtype = case
    tensors = [key] if value is None else [key, value]
    expected = expected_after(tensors, copies.pairs())
    ascend_kv.block_copy(key, value, *copies.tensors(index_dtype), simultaneous=True)
    assert all(bits_equal(t, e) for t, e in zip(tensors, expected))


@given(case=simultaneous_cases())
def test_copy_blocks_reads_every_source_first(backend: str, case: Any) -> None:
    key, value, copies, index_dtype = case
    tensors = [key] if value is None else [key, value]
    expected = expected_after(tensors, copies.pairs())
    mapping = torch.tensor(copies.pairs(), dtype=index_dtype).reshape(-1, 2)
    ascend_kv.copy_blocks([key], [] if value is None else [value], mapping, simultaneous=True)
    assert all(bits_equal(t, e) for t, e in zip(tensors, expected))


@given(case=simultaneous_cases(), extra=st.lists(st.tuples(st.integers(-3, 12), st.integers(-3, 12)), max_size=3))
def test_the_device_fallback_skips_out_of_range_pairs(case: Any, extra: list[tuple[int, int]]) -> None:
    key, value, copies, index_dtype = case
    nb = key.shape[0]
    taken = {d for _, d in copies.pairs()}
    pairs = copies.pairs() + [(s, d) for s, d in extra if not 0 <= d < nb or not 0 <= s < nb and d not in taken]
    tensors = [key] if value is None else [key, value]
    expected = expected_after(tensors, pairs)
    mapping = torch.tensor(pairs, dtype=index_dtype).reshape(-1, 2)

    def call(*flat: torch.Tensor) -> None:
        ascend_kv.copy_blocks([flat[0]], list(flat[1:-1]), flat[-1], simultaneous=True)

    on_the_device_fallback(call, *tensors, mapping)
    assert all(bits_equal(t, e) for t, e in zip(tensors, expected))


@pytest.mark.parametrize(("name", "pairs"), [
    ("cycle", [(0, 1), (1, 0)]),
    ("three-cycle", [(0, 1), (1, 2), (2, 0)]),
    ("chain", [(0, 1), (1, 2), (2, 3)]),
    ("self-copy", [(2, 2), (2, 4)]),
    ("overlapping fan-out", [(2, 3), (2, 5), (3, 2)]),
])
def test_named_patterns_on_32_layers_of_one_buffer(backend: str, name: str, pairs: list[tuple[int, int]]) -> None:
    buf = random_bits((32, 2, 6, 4, 2, 8), torch.bfloat16, 7)   # vLLM: kv[layer][0] / kv[layer][1]
    keys, values = [buf[i, 0] for i in range(32)], [buf[i, 1] for i in range(32)]
    before = buf.clone()
    expected = expected_after([*keys, *values], pairs)
    ascend_kv.copy_blocks(keys, values, torch.tensor(pairs), simultaneous=True)
    assert all(bits_equal(t, e) for t, e in zip([*keys, *values], expected))
    for s, d in pairs:
        assert bits_equal(buf[:, :, d], before[:, :, s])


def test_segments_of_one_allocation_keep_the_bytes_between_them(backend: str) -> None:
    """Two block-indexed segments of one byte buffer, of different dtypes and block shapes (a hybrid
    model's attention and Mamba state), and a page of 2 kernel blocks as an unflattened view."""
    nb = 6
    raw = random_bits((nb, 512 + 64 + 96), torch.uint8, 3)           # per block: 512 + gap 64 + 96 bytes
    attention = raw[:, :512].view(torch.float16).view(nb, 4, 2, 32)
    state = raw[:, 576:].view(torch.int32).view(nb, 2, 12)
    pages = attention.unflatten(1, (2, 2))                             # the same bytes, pages of 2 rows
    before = raw.clone()
    pairs = [(0, 1), (1, 0), (4, 5)]
    expected = expected_after([attention, state], pairs)
    ascend_kv.copy_blocks([attention, state], [], torch.tensor(pairs), simultaneous=True)
    assert bits_equal(attention, expected[0]) and bits_equal(state, expected[1])
    assert bits_equal(raw[:, 512:576], before[:, 512:576])             # the gap between segments
    ascend_kv.block_copy(pages, None, torch.tensor([2, 3]), torch.tensor([3, 2]), torch.tensor([1, 2]),
                         simultaneous=True)
    assert bits_equal(attention[2], expected[0][3]) and bits_equal(attention[3], expected[0][2])


@pytest.mark.parametrize("simultaneous", [False, True])
def test_a_view_listed_for_several_layers_is_copied_once(backend: str, simultaneous: bool) -> None:
    """vLLM's cross-layer KV sharing: layer 1's caches are layer 0's views; a cycle copied twice would swap back."""
    key, value = caches("interleaved", "nd", 5, torch.float16, torch.float16, seed=8)
    own = random_bits((5, 16, 2, 16), torch.float16, 9)
    before_key, before_own = key.clone(), own.clone()
    pairs = [(0, 1), (1, 0)] if simultaneous else [(0, 1), (2, 3)]
    ascend_kv.copy_blocks([key, key, own], [value, value, own.clone()], torch.tensor(pairs),
                          simultaneous=simultaneous)
    for s, d in pairs:
        assert bits_equal(key[d], before_key[s]) and bits_equal(own[d], before_own[s])
    same = torch.tensor([0, 1], dtype=torch.int32), torch.tensor([1, 0], dtype=torch.int32)
    if simultaneous:
        ascend_kv.block_copy(key, key, *same, torch.tensor([1, 2]), simultaneous=True)   # K listed as V too
        assert bits_equal(key, before_key)


def test_overlaid_views_that_differ_stay_refused() -> None:
    key = caches("plain", "nd", 4, torch.float16, None, seed=1)[0]
    judge(lambda: ascend_kv.copy_blocks([key, key[:, :8]], [], torch.tensor([[0, 1]]), simultaneous=True), [key],
          r"key_caches\[1\] shares memory with key_caches\[0\]")
    judge(lambda: ascend_kv.block_copy(key, key.view(torch.int16), torch.tensor([0]), torch.tensor([1]),
                                       torch.tensor([1]), simultaneous=True), [key],
          r"value_cache shares memory with key_cache")


@pytest.mark.parametrize(("sources", "destinations", "ends", "message"), [
    ([7], [7], [1], None),                                            # a self-copy
    ([8], [0], [1], r"src_block_indices\[0\] = 8 is out of range: the caches hold 8 blocks"),
    ([0], [-1], [1], r"dst_block_indices\[0\] = -1 is out of range"),
    ([0, 2], [2, 0], [1, 2], None),                                   # a cycle: the ATB rule is lifted
    ([0, 1], [2, 3], [2, 1], r"cum_sum\[1\] = 1 is less than cum_sum\[0\] = 2"),
    ([0, 1], [2, 3], [1, 3], r"cum_sum\[-1\] = 3, but dst_block_indices has 2 entries"),
    ([0, 1], [1, 1], [1, 2], (r"dst_block_indices\[1\] = 1 repeats dst_block_indices\[0\]: a block can be the "
                             r"destination")),
])
def test_simultaneous_rules_at_their_boundaries(sources: list[int], destinations: list[int], ends: list[int],
                                                message: str | None) -> None:
    key, value = caches("plain", "nd", 8, torch.float16, torch.int8, seed=2)
    index = [torch.tensor(v, dtype=torch.int64) for v in (sources, destinations, ends)]
    judge(lambda: ascend_kv.block_copy(key, value, *index, simultaneous=True), [key, value], message)


def test_copy_blocks_rules_name_the_pair() -> None:
    keys = [torch.zeros(4, 2, 8, dtype=torch.float16) for _ in range(2)]
    for mapping, message in (
        (torch.tensor([[3, 0], [0, 3]]), None),
        (torch.tensor([[4, 0]]), r"block_mapping\[0, 0\] = 4 is out of range: the caches hold 4 blocks"),
        (torch.tensor([[0, 1], [2, -1]]), r"block_mapping\[1, 1\] = -1 is out of range"),
        (torch.tensor([[0, 1], [1, 1]]), r"block_mapping\[1, 1\] = 1 repeats block_mapping\[0, 1\]"),
    ):
        judge(lambda m=mapping: ascend_kv.copy_blocks(keys, [], m, simultaneous=True), keys, message)
    with pytest.raises(TypeError, match=r"simultaneous must be a bool, got int"):
        ascend_kv.copy_blocks(keys, [], torch.tensor([[0, 1]]), simultaneous=1)  # type: ignore[arg-type]
    judge(lambda: ascend_kv.copy_blocks(keys, [], torch.tensor([[0, 1], [1, 0]])), keys,
          r"block_mapping\[0, 1\] = 1 is also a source .*simultaneous=True reads every source first")


def cyclic_step(buf: torch.Tensor, mapping: torch.Tensor, src: torch.Tensor, dst: torch.Tensor,
                ends: torch.Tensor) -> torch.Tensor:
    ascend_kv.copy_blocks([buf[0, 0], buf[1, 0]], [buf[0, 1], buf[1, 1]], mapping, simultaneous=True)
    ascend_kv.block_copy(buf[0, 0], buf[0, 1], src, dst, ends, simultaneous=True)
    return buf[1, 1, 2].flip(0)


def test_compiled_simultaneous_step_matches_eager() -> None:
    require_compiled_as_eager(cyclic_step, lambda: [
        random_bits((2, 2, 6, 4, 16), torch.float16, 5), torch.tensor([[0, 2], [2, 0], [1, 1]]),
        torch.tensor([3, 4], dtype=torch.int32), torch.tensor([4, 3, 5], dtype=torch.int32),
        torch.tensor([1, 3], dtype=torch.int32)])


def test_opcheck_takes_the_flag() -> None:
    layers = [torch.randn(6, 4, 16).half() for _ in range(2)]
    torch.library.opcheck(torch.ops.ascend_kv.copy_blocks.default,
                          (layers, [t.clone() for t in layers], torch.tensor([[0, 2], [2, 0]]), True))


# ----------------------------------------------------------------------------- the kernel (sim, fake NPU)


@pytest.mark.parametrize("ub", [1024, DEFAULT_UB])
@pytest.mark.parametrize("cores", CORES)
@given(case=simultaneous_cases())
def test_the_kernel_reads_every_source_first(configure: Callable[[int, int], None], cores: int, ub: int,
                                             case: Any) -> None:
    """One launch; each core owns a chunk offset of a cache (reads it from every source into UB, then writes)."""
    configure(cores, ub)
    key, value, copies, index_dtype = case
    tensors = [key] if value is None else [key, value]
    expected = expected_after(tensors, copies.pairs())
    before = launches()
    with ran_on(SIM), ascend_kv.use_backend("sim"):
        ascend_kv.block_copy(key, value, *copies.tensors(index_dtype), simultaneous=True)
    assert launches() - before == (1 if copies.destinations else 0)
    assert all(bits_equal(t, e) for t, e in zip(tensors, expected))


@pytest.mark.parametrize("cores", CORES)
def test_the_kernel_on_32_layers_of_one_buffer_is_one_launch(configure: Callable[[int, int], None],
                                                            cores: int) -> None:
    configure(cores, DEFAULT_UB)
    buf = random_bits((32, 2, 8, 128, 2, 64), torch.float16, 11)     # 32 KB blocks: several chunks each
    keys, values = [buf[i, 0] for i in range(32)], [buf[i, 1] for i in range(32)]
    pairs = [(0, 1), (1, 0), (2, 3), (3, 4), (4, 2), (5, 5), (5, 6), (6, 7)]
    expected = expected_after([*keys, *values], pairs)
    before = launches()
    with ran_on(SIM), ascend_kv.use_backend("sim"):
        ascend_kv.copy_blocks(keys, values, torch.tensor(pairs), simultaneous=True)
    assert launches() - before == 1
    assert all(bits_equal(t, e) for t, e in zip([*keys, *values], expected))


def test_the_kernel_takes_device_indices_unread_and_skips_out_of_range_pairs() -> None:
    key, value = caches("interleaved", "nd", 6, torch.bfloat16, torch.bfloat16, seed=12)
    pairs = [(0, 1), (1, 0), (9, 2), (2, -1), (3, 4), (4, 3)]
    expected = expected_after([key, value], pairs)
    mapping = torch.tensor(pairs, dtype=torch.int32)
    mirror = fake_npu.same_layout([key, value, mapping])
    with kernels_on_the_fake_npu(), ascend_kv.use_backend("npu"), fake_npu.counting() as seen, ran_on(KERNELS):
        before = launches()
        ascend_kv.copy_blocks([mirror.values[0]], [mirror.values[1]], mirror.values[2], simultaneous=True)
        assert launches() - before == 1
    assert seen.transfers == 0 and seen.blocking_uploads == 0
    mirror.copy_back()
    assert bits_equal(key, expected[0]) and bits_equal(value, expected[1])


def test_more_copies_than_the_kernel_stages_run_on_the_host_paths(configure: Callable[[int, int], None]) -> None:
    configure(2, DEFAULT_UB)
    cache = random_bits((2100, 2, 16), torch.int8, 13)
    pairs = [(b, b + 1025) for b in range(1025)]
    expected = expected_after([cache], pairs)
    with ran_on(0), ascend_kv.use_backend("sim"):
        ascend_kv.copy_blocks([cache], [], torch.tensor(pairs), simultaneous=True)
    assert bits_equal(cache, expected[0])
