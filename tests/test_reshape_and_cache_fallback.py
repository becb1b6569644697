"""Both fallbacks of ``reshape_and_cache``: the host path (cpu_fallback/reshape_and_cache.py) and the device
path (cpu_fallback/on_device.py).

In-domain calls must equal ascend_kv/tools/reference.py bit for bit, with caches that are views of wider
buffers changing nowhere but in their own elements. The device path runs inside
:func:`sync_guard.no_host_reads` (proof that it would not synchronise on a device), and on index
values nobody checked must follow tests/safe_reference.py: slots out of range skipped, a
duplicated slot holding its last token.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from typing import Any

import pytest
import safe_reference
import torch
from ascend_kv.cpu_fallback import native, on_device
from cases import (
    DTYPE_PAIRS,
    ND,
    NZ,
    Case,
    IndexPutRecorder,
    bits,
    bits_equal,
    in_wider_buffer,
    random_bits,
    reshape_and_cache_case,
    reshape_and_cache_cases,
    scattered,
)
from hypothesis import given
from hypothesis import strategies as st
from sync_guard import no_host_reads
from torch.utils._python_dispatch import TorchDispatchMode

from ascend_kv.operators.library import cache_dtypes
from calls import ReshapeAndCacheArgs, ReshapeAndCachePlan
from ascend_kv.tools import reference

#: The host path's module (the package exports its function under the same name).
host = importlib.import_module("ascend_kv.cpu_fallback.reshape_and_cache")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
LAYOUTS = {"nd": ND, "nz": NZ}

CACHE_DTYPES = cache_dtypes()


def rac_args(case: Case, view: Callable[[torch.Tensor], torch.Tensor] = lambda t: t) -> ReshapeAndCacheArgs:
    """The case's :class:`ReshapeAndCacheArgs`, ``slot_mapping`` passed through ``view``."""
    key, value, key_cache, value_cache, slot_mapping = case.args
    return ReshapeAndCacheArgs(LAYOUTS[case.kwargs["kv_cache_cfg"]], key, value, key_cache, value_cache,
                               view(slot_mapping))


def run_host(args: ReshapeAndCacheArgs) -> None:
    host.reshape_and_cache(ReshapeAndCachePlan(args, args.slot_mapping.tolist()))


def run_device(args: ReshapeAndCacheArgs) -> None:
    with no_host_reads():
        on_device.reshape_and_cache(args)


FALLBACKS = {"host": run_host, "device": run_device}


def buffers(tensors: list[torch.Tensor | None]) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """The memory each tensor lives in (its base, or itself), by id, with a copy of its bits now."""
    found = {}
    for t in tensors:
        if t is not None:
            base = t if t._base is None else t._base
            found[id(base)] = (base, base.clone())
    return found


def assert_only_caches_changed(before: dict[int, tuple[torch.Tensor, torch.Tensor]],
                               written: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Every buffer equals its bits before, except the elements of each written view, which equal the expected ones.

    ``written`` pairs a view (a cache) with the tensor it must now hold; a buffer no view
    writes (the inputs, the gaps of wider buffers) must not change at all.
    """
    expected = {key: old.clone() for key, (_, old) in before.items()}
    for view, result in written:
        base = view if view._base is None else view._base
        expected[id(base)].as_strided(view.shape, view.stride(), view.storage_offset()).copy_(result)
    for key, (buffer, _) in before.items():
        assert bits_equal(buffer, expected[key]), "a buffer differs from the reference outside or inside its caches"


def check_against_reference(case: Case, run: Callable[[ReshapeAndCacheArgs], None],
                            view: Callable[[torch.Tensor], torch.Tensor] = lambda t: t) -> None:
    """Run ``run`` on ``case`` and compare every buffer involved with the reference."""
    key, value, key_cache, value_cache, _ = case.args
    expected = reference.reshape_and_cache(*case.cloned().args, **case.kwargs)
    before = buffers([key, value, key_cache, value_cache])
    run(rac_args(case, view))
    written = [(key_cache, expected[0])] + ([(value_cache, expected[1])] if value_cache is not None else [])
    assert_only_caches_changed(before, written)


# ----------------------------------------------------------------------------- in domain: the reference


def heads_apart(case: Case) -> Case:
    """``case`` with key and value rows whose heads lie apart (each head a column slice of a wider buffer)."""
    key, value, *rest = case.args
    apart = [None if t is None else in_wider_buffer(t, -1, seed) for t, seed in ((key, 21), (value, 22))]
    return Case((*apart, *rest), case.kwargs)


@given(case=reshape_and_cache_cases(), fallback=st.sampled_from(sorted(FALLBACKS)), noncontiguous=st.booleans(),
       gapped=st.booleans())
def test_matches_reference_and_changes_nothing_else(case: Case, fallback: str, noncontiguous: bool,
                                                    gapped: bool) -> None:
    case = heads_apart(case) if gapped else case
    check_against_reference(case, FALLBACKS[fallback], scattered if noncontiguous else lambda t: t)


@pytest.mark.parametrize("fallback", sorted(FALLBACKS))
@pytest.mark.parametrize("block_size", [16, 128])
@pytest.mark.parametrize(("key_dtype", "value_dtype"), DTYPE_PAIRS)
def test_nz_every_dtype_pair(fallback: str, block_size: int, key_dtype: torch.dtype, value_dtype: torch.dtype) -> None:
    slots = [3 * block_size + 5, 0, -1, block_size - 1, 2 * block_size, 7]
    case = reshape_and_cache_case("nz", slots, num_tokens=8, key_dtype=key_dtype, value_dtype=value_dtype,
                                  num_heads=2, head_size_k=64, head_size_v=32, block_size=block_size, seed=block_size)
    check_against_reference(case, FALLBACKS[fallback])


@pytest.mark.parametrize("fallback", sorted(FALLBACKS))
@pytest.mark.parametrize("dtype", CACHE_DTYPES)
@pytest.mark.parametrize("head_size", [7, 33])
@pytest.mark.parametrize("strided", [False, True])
def test_nd_rows_of_any_size(fallback: str, dtype: torch.dtype, head_size: int, strided: bool) -> None:
    case = reshape_and_cache_case("nd", [5, -1, 17, 0, 63], num_tokens=6, key_dtype=dtype, num_heads=3,
                                  head_size_k=head_size, head_size_v=head_size + 2, index_dtype=torch.int64,
                                  strided=strided)
    check_against_reference(case, FALLBACKS[fallback])


@pytest.mark.parametrize("fallback", sorted(FALLBACKS))
@pytest.mark.parametrize("key_only", [False, True])
def test_mla_column_slices_of_one_cache_buffer(fallback: str, key_only: bool) -> None:
    # One [num_blocks, block_size, 1, 576] buffer: the latent keys are columns 0..511, the rope values 512..575.
    buffer = random_bits((6, 16, 1, 576), torch.bfloat16, 0)
    key_cache, value_cache = buffer[..., :512], buffer[..., 512:]
    qkv = random_bits((40, 1, 576 + 64), torch.bfloat16, 1)                      # fused, with 64 more columns
    key, value = qkv[..., :512], qkv[..., 512:576]
    slots = torch.randperm(96, generator=torch.Generator().manual_seed(2))[:37].to(torch.int32)
    slots[4] = -1
    if key_only:
        case = Case((key, None, key_cache, None, slots), {"kv_cache_cfg": "nd"})
    else:
        case = Case((key, value, key_cache, value_cache, slots), {"kv_cache_cfg": "nd"})
    check_against_reference(case, FALLBACKS[fallback])


@pytest.mark.parametrize("fallback", sorted(FALLBACKS))
@pytest.mark.parametrize("layout", ["nd", "nz"])
def test_no_tokens_and_no_slots_write_nothing(fallback: str, layout: str) -> None:
    for num_tokens, slots in ((0, []), (3, []), (3, [-1, -1, -5])):
        case = reshape_and_cache_case(layout, slots, num_tokens=num_tokens)
        before = [t.clone() for t in case.tensors()]
        FALLBACKS[fallback](rac_args(case))
        assert all(bits_equal(t, b) for t, b in zip(case.tensors(), before))


@pytest.mark.parametrize("fallback", sorted(FALLBACKS))
@pytest.mark.parametrize("layout", ["nd", "nz"])
def test_a_write_then_a_paged_load_returns_the_tokens(fallback: str, layout: str) -> None:
    # 40 tokens into blocks 2, 0, 3 (16 slots each): the paged load of that block table reads them back.
    case = reshape_and_cache_case(layout, [2 * 16 + j for j in range(16)] + list(range(16)) + [48 + j for j in range(8)],
                                  num_heads=2, head_size_k=16, head_size_v=32, block_size=16, num_blocks=4, seed=9)
    key, value, key_cache, value_cache, _ = case.args
    FALLBACKS[fallback](rac_args(case))
    loaded_key, loaded_value = reference.paged_cache_load(
        key_cache, value_cache, torch.tensor([[2, 0, 3]]), torch.tensor([40]), kv_cache_cfg=LAYOUTS[layout])
    assert bits_equal(loaded_key, key.reshape(loaded_key.shape))
    assert bits_equal(loaded_value, value.reshape(loaded_value.shape))


# ----------------------------------------------------------------------------- the host paths


def _case_for(path: str) -> Case:
    """A call whose caches take ``path`` on the host (with the copier built, where it applies)."""
    slots = [40, -1, 3, 17, 63, 0]
    if path == "native nd":                                                      # K/V block by block: blocks strided
        return reshape_and_cache_case("nd", slots, num_tokens=7, num_heads=1, strided=True)
    if path == "native nz":
        return reshape_and_cache_case("nz", slots, num_tokens=7, key_dtype=torch.int8, value_dtype=torch.bfloat16,
                                      num_heads=1, head_size_k=64, head_size_v=32, strided=True)
    if path == "rows":                                                           # 14-byte rows: not for the copier
        return reshape_and_cache_case("nd", slots, num_heads=1, head_size_k=7, head_size_v=7)
    if path == "rows, no padding":                                               # and tokens beyond the slots
        return reshape_and_cache_case("nd", [40, 3, 17], num_tokens=5, num_heads=1, head_size_k=7, head_size_v=7)
    if path == "gapped cache rows":                                              # contiguous tokens, heads apart
        key, value, key_cache, value_cache, mapping = reshape_and_cache_case("nd", slots, num_heads=2).args
        return Case((key, value, in_wider_buffer(key_cache, -1, 1), in_wider_buffer(value_cache, -1, 2), mapping),
                    {"kv_cache_cfg": "nd"})
    return heads_apart(reshape_and_cache_case("nd", slots, num_heads=2, head_size_k=7, head_size_v=7,
                                              strided=True))                   # general


@pytest.mark.parametrize(("path", "expected"), [
    ("native nd", ("native", "native")), ("native nz", ("native", "native")), ("rows", ("rows", "rows")),
    ("rows, no padding", ("rows", "rows")), ("general", ("general", "general")), ("gapped cache rows", ("general", "general")),
])
def test_each_host_path_matches_reference(path: str, expected: tuple[str, ...]) -> None:
    if not native.AVAILABLE and path.startswith("native"):
        pytest.fail("the compiled copier was not built")
    case = _case_for(path)
    assert host.paths(rac_args(case)) == expected
    check_against_reference(case, run_host)


@given(case=reshape_and_cache_cases())
def test_host_without_the_copier_matches_reference(case: Case) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(native, "AVAILABLE", False)
        assert "native" not in host.paths(rac_args(case))
        check_against_reference(case, run_host)


def test_host_streams_large_writes_and_matches_reference() -> None:
    if not native.AVAILABLE:
        pytest.fail("the compiled copier was not built")
    streamed: list[bool] = []

    def spy(*args: Any) -> bool:
        streamed.append(native_copy(*args))
        return streamed[-1]

    native_copy = native.copy_with
    case = reshape_and_cache_case("nd", list(range(0, 512, 2)), num_heads=8, head_size_k=128, head_size_v=128,
                                  block_size=128, num_blocks=4)                   # 256 x 2 KB per cache
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(native, "copy_with", spy)
        patch.setattr(host, "STREAM_MIN_BYTES", 1 << 20)
        check_against_reference(case, run_host)
    assert len(streamed) == 2 and (all(streamed) or not any(streamed))          # both or neither (x86-64: both)


# ----------------------------------------------------------------------------- out of domain: the safe semantics


def garbage_slot(index_dtype: torch.dtype, capacity: int) -> st.SearchStrategy[int]:
    """A slot value nobody checked: mostly in range (duplicates likely), else padding, just outside or a limit."""
    info = torch.iinfo(index_dtype)
    limits = [v for v in (INT64_MIN, INT64_MIN + 1, INT64_MAX, INT64_MAX - 1, 2**62, -(2**62), 2**31 - 1, -(2**31), 2**32)
              if info.min <= v <= info.max]
    return st.one_of(st.integers(0, capacity - 1), st.integers(0, capacity - 1), st.integers(-3, capacity + 3),
                     st.sampled_from(limits), st.integers(info.min, info.max))


@st.composite
def garbage_cases(draw: st.DrawFn) -> Case:
    """A structurally valid call (any layout, strides, key only) whose slot values are anything their dtype holds."""
    case = draw(reshape_and_cache_cases())
    key, value, key_cache, value_cache, _ = case.args
    layout = LAYOUTS[case.kwargs["kv_cache_cfg"]]
    capacity = key_cache.shape[0] * key_cache.shape[1 if layout == ND else 2]
    index_dtype = draw(st.sampled_from([torch.int32, torch.int64]))
    n = draw(st.integers(0, key.shape[0]))
    slots = draw(st.lists(garbage_slot(index_dtype, capacity), min_size=n, max_size=n))
    return Case((key, value, key_cache, value_cache, torch.tensor(slots, dtype=index_dtype)), case.kwargs)


def _token(cache: torch.Tensor, layout: str, slot: int) -> torch.Tensor:
    block_size = cache.shape[1] if layout == "nd" else cache.shape[2]
    block, position = divmod(slot, block_size)
    return bits(cache[block, position] if layout == "nd" else cache[block, :, position, :])


@given(case=garbage_cases(), noncontiguous=st.booleans())
def test_device_garbage_slots_follow_safe_semantics(case: Case, noncontiguous: bool) -> None:
    """Exactly the safe reference: out-of-range slots skipped, a slot named twice keeps its last token."""
    key, value, key_cache, value_cache, _ = case.args
    expected = case.cloned()
    safe_reference.reshape_and_cache(rac_args(expected))
    before = buffers([key, value])
    run_device(rac_args(case, scattered if noncontiguous else lambda t: t))
    assert all(bits_equal(buffer, old) for buffer, old in before.values())        # inputs untouched
    assert bits_equal(key_cache, expected.args[2])
    assert value_cache is None or bits_equal(value_cache, expected.args[3])


@pytest.mark.parametrize("layout", ["nd", "nz"])
def test_device_edges_of_the_slot_range(layout: str) -> None:
    capacity = 4 * 16
    case = reshape_and_cache_case(layout, [capacity - 1, capacity, -1, 0, capacity + 1, 2**31 - 1], seed=4)
    expected = case.cloned()
    safe_reference.reshape_and_cache(rac_args(expected))
    key_cache = case.args[2]
    run_device(rac_args(case))
    assert bits_equal(key_cache, expected.args[2]) and bits_equal(case.args[3], expected.args[3])
    for slot, token in ((capacity - 1, 0), (0, 3)):                             # the first and the last slot written
        assert torch.equal(_token(key_cache, layout, slot), bits(case.args[0][token]).reshape(_token(key_cache, layout, slot).shape))


def test_device_slots_near_int64_limits_are_skipped() -> None:
    case = reshape_and_cache_case("nd", [0] * 6, index_dtype=torch.int64)
    key_cache = case.args[2]
    before = key_cache.clone()
    args = rac_args(case)
    run_device(ReshapeAndCacheArgs(args.layout, args.key, args.value, key_cache, args.value_cache,
                                   torch.tensor([INT64_MIN, INT64_MAX, 64, -1, 2**62, 64 + 2**63 - 65])))
    assert bits_equal(key_cache, before)


@given(case=garbage_cases())
def test_device_changes_each_slot_at_most_once(case: Case) -> None:
    # index_put_ on a parallel device leaves duplicate indices with different values undefined.
    recorder = IndexPutRecorder()
    with recorder:
        on_device.reshape_and_cache(rac_args(case))
    assert len(recorder.calls) <= 2                                              # one per cache
    recorder.require_one_change_per_place()


@pytest.mark.parametrize("layout", ["nd", "nz"])
def test_device_padding_only_call_changes_no_byte(layout: str) -> None:
    """All slots -1 or past the cache: no byte of either cache changes, not even slot (0, 0)
    rewritten with its own earlier bits (a concurrent writer's update would be lost)."""
    case = reshape_and_cache_case(layout, [-1, -1, 10**6, -5], num_tokens=4)
    recorder = IndexPutRecorder()
    with recorder:
        on_device.reshape_and_cache(rac_args(case))
    assert len(recorder.calls) == 2
    recorder.require_no_change()


# ----------------------------------------------------------------------------- memory and meta tensors


class _AllocationRecorder(TorchDispatchMode):
    """The largest tensor an operation allocates (outputs that are not views of an argument), in bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        given = {a.untyped_storage().data_ptr() for a in (*args, *(kwargs or {}).values()) if isinstance(a, torch.Tensor)}
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in given:
                self.largest = max(self.largest, t.untyped_storage().nbytes())
        return out


@pytest.mark.parametrize("layout", ["nd", "nz"])
def test_device_memory_is_proportional_to_tokens_not_the_cache(layout: str) -> None:
    case = reshape_and_cache_case(layout, [5, 900, -1, 4000], num_heads=1, head_size_k=32, head_size_v=32,
                                  block_size=128, num_blocks=64, index_dtype=torch.int64)
    recorder = _AllocationRecorder()
    with recorder:
        on_device.reshape_and_cache(rac_args(case))
    token_bytes = 4 * 32 * 2                                                     # four tokens of one 32-wide head
    assert 0 < recorder.largest <= 4 * token_bytes
    assert recorder.largest * 100 < case.args[2].untyped_storage().nbytes()


def test_device_runs_on_meta_tensors_which_hold_no_values() -> None:
    # Any operation that needed a value (a size, a scalar) would raise on meta tensors.
    for layout, cache_shape in ((ND, (4, 16, 2, 16)), (NZ, (4, 2, 16, 16))):
        for value_given in (True, False):
            def meta(*shape: int, dtype: torch.dtype = torch.float16) -> torch.Tensor:
                return torch.empty(shape, dtype=dtype, device="meta")
            on_device.reshape_and_cache(ReshapeAndCacheArgs(
                layout, meta(7, 2, 16), meta(7, 2, 16) if value_given else None, meta(*cache_shape),
                meta(*cache_shape) if value_given else None, meta(5, dtype=torch.int32)))


def test_nz_rows_are_the_fractal_groups_of_the_token() -> None:
    # Slot 17 of a 16-slot NZ cache is block 1, position 1: its [T // E, E] fractal rows are the token's row, cut.
    case = reshape_and_cache_case("nz", [17], num_heads=2, head_size_k=16, head_size_v=16)
    key, _, key_cache, _, _ = case.args
    run_host(rac_args(case))
    assert bits_equal(key_cache[1, :, 1, :], key[0].reshape(2, 16))
    assert math.prod(key_cache.shape) == 4 * 2 * 16 * 16


@pytest.mark.parametrize("stream_min_bytes", [0, 1 << 62])
def test_copier_skips_negative_destinations_and_defaults_sources_and_items(stream_min_bytes: int) -> None:
    # The host path passes the slots as destinations (padding negative), no sources (token r) and no items (one each).
    if not native.AVAILABLE:
        pytest.fail("the compiled copier was not built")
    src = torch.randint(0, 256, (4, 32), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    buffer = torch.full((8, 32), 255, dtype=torch.uint8)                          # rows 0, 1: a negative index's target
    dst = buffer[2:]
    native.copy_runs(src.data_ptr(), dst.data_ptr(), None, [5, -1, 0, -2], None, index_steps=(32, 32), item_bytes=32,
                     steps=(32, 32), stream_min_bytes=stream_min_bytes)
    expected = torch.full((8, 32), 255, dtype=torch.uint8)
    expected[2 + 5], expected[2 + 0] = src[0], src[2]
    assert torch.equal(buffer, expected)
