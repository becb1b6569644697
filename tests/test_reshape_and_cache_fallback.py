"""Both fallbacks of ``reshape_and_cache``, through the public function: the host paths
(cpu_fallback/host.cpp, on host tensors) and the device fallback (cpu_fallback/on_device.cpp, on
the fake NPU of tests/fake_npu with the fallback backend chosen).

In-domain calls must equal ascend_kv/tools/reference.py bit for bit, with caches that are views of
wider buffers changing nowhere but in their own elements. On the device every tensor, slot_mapping
included, lives on the fake NPU with its host layout (:func:`fake_npu.same_layout`), so the call
checks no slot value, and it must read nothing back (the fake NPU counts transfers). On slot values
nobody checked the device fallback must follow tests/safe_reference.py: slots out of range
skipped, a duplicated slot holding its last token, and no place written twice or written at all
by a call that names none (its writes recorded as the device runs them).
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import fake_npu
import pytest
import safe_reference
import torch
from calls import ReshapeAndCacheArgs
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

import ascend_kv
from ascend_kv.operators.library import cache_dtypes
from ascend_kv.tools import reference

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
LAYOUTS = {"nd": ND, "nz": NZ}
CACHE_DTYPES = cache_dtypes()
fake_npu.install()
NPU = torch.device("npu", 0)
HOST_PATHS, DEVICE_FALLBACK = 0, 3  # positions in torch.ops.ascend_kv._runs()


@contextmanager
def ran_on(where: int) -> Iterator[None]:
    """The block's one call ran where ``where`` says (a position of ``_runs()``), and nowhere else."""
    before = torch.ops.ascend_kv._runs()
    yield
    after = torch.ops.ascend_kv._runs()
    assert [a - b for a, b in zip(after, before)] == [int(i == where) for i in range(4)]


def rac_args(case: Case) -> ReshapeAndCacheArgs:
    """The case's arguments as the safe reference reads them."""
    key, value, key_cache, value_cache, slot_mapping = case.args
    return ReshapeAndCacheArgs(LAYOUTS[case.kwargs["kv_cache_cfg"]], key, value, key_cache, value_cache, slot_mapping)


def run_host(case: Case, view: Callable[[torch.Tensor], torch.Tensor] = lambda t: t) -> None:
    """The public call on the host paths, ``slot_mapping`` passed through ``view``."""
    key, value, key_cache, value_cache, slots = case.args
    with ascend_kv.use_backend("fallback"), ran_on(HOST_PATHS):
        ascend_kv.reshape_and_cache(key, value, key_cache, value_cache, view(slots), **case.kwargs)


def run_device(case: Case, view: Callable[[torch.Tensor], torch.Tensor] = lambda t: t) -> None:
    """The public call on the fake NPU's device fallback, every tensor there with its host layout
    (slot_mapping through ``view``); nothing is read back; the device memory is then copied back
    over the host tensors."""
    key, value, key_cache, value_cache, slots = case.args
    mirror = fake_npu.same_layout([key, value, key_cache, value_cache, view(slots)])
    with ascend_kv.use_backend("fallback"), ran_on(DEVICE_FALLBACK), fake_npu.counting() as seen:
        ascend_kv.reshape_and_cache(*mirror.values, **case.kwargs)
    assert seen.transfers == 0 and seen.blocking_uploads == 0
    mirror.copy_back()


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


def check_against_reference(case: Case, run: Callable[..., None],
                            view: Callable[[torch.Tensor], torch.Tensor] = lambda t: t) -> None:
    """Run ``run`` on ``case`` and compare every buffer involved with the reference."""
    key, value, key_cache, value_cache, _ = case.args
    expected = reference.reshape_and_cache(*case.cloned().args, **case.kwargs)
    before = buffers([key, value, key_cache, value_cache])
    run(case, view)
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
        FALLBACKS[fallback](case)
        assert all(bits_equal(t, b) for t, b in zip(case.tensors(), before))


@pytest.mark.parametrize("fallback", sorted(FALLBACKS))
@pytest.mark.parametrize("layout", ["nd", "nz"])
def test_a_write_then_a_paged_load_returns_the_tokens(fallback: str, layout: str) -> None:
    # 40 tokens into blocks 2, 0, 3 (16 slots each): the paged load of that block table reads them back.
    case = reshape_and_cache_case(layout, [2 * 16 + j for j in range(16)] + list(range(16)) + [48 + j for j in range(8)],
                                  num_heads=2, head_size_k=16, head_size_v=32, block_size=16, num_blocks=4, seed=9)
    key, value, key_cache, value_cache, _ = case.args
    FALLBACKS[fallback](case)
    loaded_key, loaded_value = reference.paged_cache_load(
        key_cache, value_cache, torch.tensor([[2, 0, 3]]), torch.tensor([40]), kv_cache_cfg=LAYOUTS[layout])
    assert bits_equal(loaded_key, key.reshape(loaded_key.shape))
    assert bits_equal(loaded_value, value.reshape(loaded_value.shape))


# ----------------------------------------------------------------------------- the host paths


def _case_for(layout: str) -> Case:
    """A call in one of the layouts the Python host path once told apart."""
    slots = [40, -1, 3, 17, 63, 0]
    if layout == "blocks strided":                                               # K/V block by block
        return reshape_and_cache_case("nd", slots, num_tokens=7, num_heads=1, strided=True)
    if layout == "nz blocks strided":
        return reshape_and_cache_case("nz", slots, num_tokens=7, key_dtype=torch.int8, value_dtype=torch.bfloat16,
                                      num_heads=1, head_size_k=64, head_size_v=32, strided=True)
    if layout == "14-byte rows":                                                 # not whole 32-byte pieces
        return reshape_and_cache_case("nd", slots, num_heads=1, head_size_k=7, head_size_v=7)
    if layout == "14-byte rows, no padding":                                     # and tokens beyond the slots
        return reshape_and_cache_case("nd", [40, 3, 17], num_tokens=5, num_heads=1, head_size_k=7, head_size_v=7)
    if layout == "gapped cache rows":                                            # contiguous tokens, heads apart
        key, value, key_cache, value_cache, mapping = reshape_and_cache_case("nd", slots, num_heads=2).args
        return Case((key, value, in_wider_buffer(key_cache, -1, 1), in_wider_buffer(value_cache, -1, 2), mapping),
                    {"kv_cache_cfg": "nd"})
    return heads_apart(reshape_and_cache_case("nd", slots, num_heads=2, head_size_k=7, head_size_v=7,
                                              strided=True))                   # everything apart


@pytest.mark.parametrize("layout", ["blocks strided", "nz blocks strided", "14-byte rows", "14-byte rows, no padding",
                                    "gapped cache rows", "everything apart"])
def test_each_old_host_path_layout_matches_reference(layout: str) -> None:
    check_against_reference(_case_for(layout), run_host)


@pytest.mark.parametrize("layout", ["nd", "nz"])
@pytest.mark.parametrize("threads", [1, 2])
def test_host_large_writes_match_reference(layout: str, threads: int) -> None:
    """1024 tokens x 2 KB per cache (2 MiB: split over the threads, streamed on x86-64), every
    other slot, K and V block by block in one buffer."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        case = reshape_and_cache_case(layout, list(range(0, 2048, 2)), num_heads=8, head_size_k=128, head_size_v=128,
                                      block_size=128, num_blocks=16, strided=True)
        check_against_reference(case, run_host)
    finally:
        torch.set_num_threads(before)


def test_host_negative_slots_write_nothing_before_the_cache() -> None:
    """Padding slots name no place, not even the rows a negative index would reach before the cache."""
    buffer = random_bits((10, 1, 16), torch.float16, 3)                           # rows 0, 1: before the cache
    cache = buffer[2:].view(2, 4, 1, 16)
    key = random_bits((4, 1, 16), torch.float16, 4)
    expected = buffer.clone()
    expected[2 + 5], expected[2 + 0] = key[0], key[2]
    run_host(Case((key, None, cache, None, torch.tensor([5, -1, 0, -2])), {"kv_cache_cfg": "nd"}))
    assert bits_equal(buffer, expected)


_READ_ONLY_CALL = textwrap.dedent("""
    import ctypes, mmap, sys
    import torch, ascend_kv
    from cases import random_bits

    libc = ctypes.CDLL(None)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

    def read_only(t):
        # t's bytes in a private mapping, then made read-only: a write of any of its bytes is a SIGSEGV
        n = t.untyped_storage().nbytes()
        size = -(-n // mmap.PAGESIZE) * mmap.PAGESIZE
        area = mmap.mmap(-1, size)
        mapped = torch.frombuffer(area, dtype=torch.uint8)[:n]
        mapped.copy_(t.view(-1).view(torch.uint8))
        address = ctypes.addressof(ctypes.c_char.from_buffer(area))
        assert libc.mprotect(address, size, mmap.PROT_READ) == 0
        return mapped.view(t.dtype).view(t.shape), area

    with ascend_kv.use_backend("fallback"):
        for layout in ("nd", "nz"):
            # K and V block by block in one buffer (blocks strided apart); ND rows of 3 x 7 float16 (42 bytes)
            shape = (4, 2, 16, 3, 7) if layout == "nd" else (4, 2, 6, 16, 16)
            both, area = read_only(random_bits(shape, torch.float16, 1))
            key_cache, value_cache = both[:, 0], both[:, 1]
            tokens = (5, 3, 7) if layout == "nd" else (5, 2, 48)
            key, value = random_bits(tokens, torch.float16, 2), random_bits(tokens, torch.float16, 3)
            ascend_kv.reshape_and_cache(key, value, key_cache, value_cache, torch.tensor([-1] * 5),
                                        kv_cache_cfg=layout)
            ascend_kv.reshape_and_cache(key, value, key_cache, value_cache, torch.tensor([-1, -7, -(2**31)]),
                                        kv_cache_cfg=layout)
            if layout == "nd":
                ascend_kv.reshape_and_cache(key, None, key_cache, None, torch.tensor([-1] * 5))
    print("no byte written")
""")


def run_isolated(script: str, done_says: str) -> None:
    """``script`` in a Python subprocess (a stray store there is its SIGSEGV, not this process's)."""
    done = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).parent, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0 and done_says in done.stdout, (done.returncode, done.stderr[-2000:])


def test_a_padding_only_call_on_the_host_writes_no_byte() -> None:
    """Every slot padding: no byte of either cache is written, not even slot (0, 0) with its own bits
    (the old general path's index_put rewrote it; a concurrent writer's update would be lost). The
    caches lie in read-only memory, in a subprocess: any store there is a SIGSEGV. ND rows of 42
    bytes (not whole 32-byte pieces) and NZ, K and V blocks strided apart, key-only too."""
    run_isolated(_READ_ONLY_CALL, "no byte written")


_SLOTS_INSIDE_THE_CACHE = textwrap.dedent("""
    import torch, ascend_kv
    from ascend_kv.tools import reference

    with ascend_kv.use_backend("fallback"):
        for threads in (1, 2):
            torch.set_num_threads(threads)
            # an int32 cache of 1-element rows whose slots 4 and 5 hold slot_mapping: token 0 writes
            # 10**8 over slot_mapping[1] before token 1 is written
            cache = torch.zeros(2, 4, 1, 1, dtype=torch.int32)
            flat = cache.view(-1)
            flat[4], flat[5] = 5, 0
            key = torch.tensor([10**8, 7], dtype=torch.int32).view(2, 1, 1)
            expected = cache.clone()
            reference.reshape_and_cache(key, None, expected, None, flat[4:6].clone())
            ascend_kv.reshape_and_cache(key, None, cache, None, flat[4:6])
            assert torch.equal(cache, expected), (cache.view(-1).tolist(), expected.view(-1).tolist())
    print("the slots as checked")
""")


def test_host_slots_sharing_memory_with_a_cache_are_read_before_any_write() -> None:
    """slot_mapping inside an int32 cache: the host paths write the slots the rules checked (read
    once before any write), so a token writing over a later slot cannot send that one outside the
    cache (it did: a SIGSEGV, hence the subprocess)."""
    run_isolated(_SLOTS_INSIDE_THE_CACHE, "the slots as checked")


def test_nz_rows_are_the_fractal_groups_of_the_token() -> None:
    # Slot 17 of a 16-slot NZ cache is block 1, position 1: its [T // E, E] fractal rows are the token's row, cut.
    case = reshape_and_cache_case("nz", [17], num_heads=2, head_size_k=16, head_size_v=16)
    key, _, key_cache, _, _ = case.args
    run_host(case)
    assert bits_equal(key_cache[1, :, 1, :], key[0].reshape(2, 16))
    assert math.prod(key_cache.shape) == 4 * 2 * 16 * 16


# ----------------------------------------------------------------------------- out of domain: the safe semantics on the device


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
    run_device(case, scattered if noncontiguous else lambda t: t)
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
    run_device(case)
    assert bits_equal(key_cache, expected.args[2]) and bits_equal(case.args[3], expected.args[3])
    for slot, token in ((capacity - 1, 0), (0, 3)):                             # the first and the last slot written
        assert torch.equal(_token(key_cache, layout, slot), bits(case.args[0][token]).reshape(_token(key_cache, layout, slot).shape))


def test_device_slots_near_int64_limits_are_skipped() -> None:
    case = reshape_and_cache_case("nd", [0] * 6, index_dtype=torch.int64)
    key, value, key_cache, value_cache, _ = case.args
    before = key_cache.clone()
    slots = torch.tensor([INT64_MIN, INT64_MAX, 64, -1, 2**62, 64 + 2**63 - 65])
    run_device(Case((key, value, key_cache, value_cache, slots), case.kwargs))
    assert bits_equal(key_cache, before)


def recorded_writes(case: Case) -> IndexPutRecorder:
    """The device fallback's ``index_put_`` calls on ``case``, as the fake NPU runs them."""
    recorder = IndexPutRecorder()
    with fake_npu.recording("aten::_index_put_impl_") as calls:
        run_device(case)
    recorder.calls = [(indices, values, accumulate) for _, indices, values, accumulate, *_ in (c.args for c in calls)]
    return recorder


@given(case=garbage_cases())
def test_device_changes_each_slot_at_most_once(case: Case) -> None:
    # index_put_ on a parallel device leaves duplicate indices with different values undefined.
    recorder = recorded_writes(case)
    assert len(recorder.calls) <= 2                                              # one per cache
    recorder.require_one_change_per_place()


@pytest.mark.parametrize("layout", ["nd", "nz"])
def test_device_padding_only_call_changes_no_byte(layout: str) -> None:
    """All slots -1 or past the cache: no byte of either cache changes, not even slot (0, 0)
    rewritten with its own earlier bits (a concurrent writer's update would be lost)."""
    case = reshape_and_cache_case(layout, [-1, -1, 10**6, -5], num_tokens=4)
    before = [t.clone() for t in case.args[2:4]]
    recorder = recorded_writes(case)
    assert len(recorder.calls) == 2
    recorder.require_no_change()
    assert all(bits_equal(t, b) for t, b in zip(case.args[2:4], before))


@pytest.mark.parametrize("layout", ["nd", "nz"])
def test_device_memory_is_proportional_to_tokens_not_the_cache(layout: str) -> None:
    """Four tokens into 512 KB caches: the call runs with a device memory budget of a sixteenth of
    one cache beyond what its arguments hold (a cache-sized temporary would be out of memory)."""
    case = reshape_and_cache_case(layout, [5, 900, -1, 4000], num_heads=1, head_size_k=32, head_size_v=32,
                                  block_size=128, num_blocks=64, index_dtype=torch.int64)
    expected = reference.reshape_and_cache(*case.cloned().args, **case.kwargs)
    mirror = fake_npu.same_layout(list(case.args))
    cache_bytes = case.args[2].untyped_storage().nbytes()
    with ascend_kv.use_backend("fallback"), fake_npu.memory_capacity(fake_npu.memory_in_use() + cache_bytes // 16):
        ascend_kv.reshape_and_cache(*mirror.values, **case.kwargs)
    mirror.copy_back()
    assert bits_equal(case.args[2], expected[0]) and bits_equal(case.args[3], expected[1])
