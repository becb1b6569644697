"""The sim backend: the AscendC kernels on the host model, bit for bit against the reference.

Calls go through the public functions with the sim backend requested (``use_backend("sim")``,
host tensors; index tensors of either width), under core counts 1, 2, 7, 40 and 48 and UB sizes
small enough to force many chunks and many staged windows; ``torch.ops.ascend_kv._runs()`` shows
the sim ran each. Strided tensors (MLA column slices, K and V held block by block in one buffer,
strided outputs) run in place, and the bytes of the underlying buffers outside the views' elements
must not change; that the kernels take them in place is the operators' kernel-domain rule, asked
of the same call on the fake NPU (:func:`outside_reason`). Then the instrument itself: the
operators' checks before the kernels, the model's and the tiling's errors, the build cache.

Shared with the other kernel tests: :func:`public` (a call of tests/calls.py through its public
function), :func:`on_the_sim`, :func:`on_the_kernels`, :func:`on_the_device_fallback`, :func:`ran_on` and
:func:`kernels_on_the_fake_npu`.
"""

from __future__ import annotations

import contextlib
import math
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fake_npu
import pytest
import torch
from calls import BlockCopyArgs, KvCacheArgs, PagedLoadArgs, ReshapeAndCacheArgs
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

import ascend_kv
from ascend_kv.api.errors import BackendUnavailableError
from ascend_kv.api.params import KvCacheCfg
from ascend_kv.backends import npu, sim
from ascend_kv.dispatch import policy
from ascend_kv.operators import build
from ascend_kv.tools import reference

CORES = [1, 2, 7, 40, 48]
DEFAULT_UB = 192 * 1024 - 256 - 8 * 1024
# 256 B: the smallest UB the tiling takes (32-byte index windows, 64-byte copy buffers);
# 1 KB: many chunks per run; default: the A2/A3 UB.
UB_SIZES = [256, 1024, DEFAULT_UB]

#: Positions in torch.ops.ascend_kv._runs(): where the operators' calls ran.
HOST_PATHS, SIM, KERNELS, DEVICE_FALLBACK = range(4)
WHERE = ("the host paths", "the sim", "the kernels", "the device fallback")
#: An A2 part: on the fake NPU the kernels may run there.
SUPPORTED_SOC = "Ascend910B3"


# ----------------------------------------------------------------------------- running calls


def runs() -> list[int]:
    """``torch.ops.ascend_kv._runs()``: calls run so far on the host paths, the sim, the kernels, the device fallback."""
    return list(torch.ops.ascend_kv._runs())


@contextlib.contextmanager
def ran_on(where: int, calls: int = 1) -> Iterator[None]:
    """The block runs ``calls`` operator calls, each on ``where`` (a position in :func:`runs`), none elsewhere."""
    before = runs()
    yield
    ran = [a - b for a, b in zip(runs(), before)]
    assert ran == [calls if i == where else 0 for i in range(4)], (
        f"expected {calls} call(s) on {WHERE[where]}, ran: {dict(zip(WHERE, ran))}")


def public(args: KvCacheArgs | PagedLoadArgs | ReshapeAndCacheArgs | BlockCopyArgs) -> None:
    """Run a call of tests/calls.py through its public function (on whatever backend is requested)."""
    if isinstance(args, KvCacheArgs):
        ascend_kv.kv_cache(args.new_kv, args.layer_id, args.past, args.token_offset, args.seq_len)
    elif isinstance(args, PagedLoadArgs):
        if args.zero_fill:  # not a public option: the operator itself (the torch_npu facade's)
            torch.ops.ascend_kv.paged_cache_load.into(args.key_cache, args.value_cache, args.block_table,
                                                      args.context_lens, args.key, args.value, int(args.layout),
                                                      args.cumsum, args.seq_starts, True)
        else:
            ascend_kv.paged_cache_load(args.key_cache, args.value_cache, args.block_table, args.context_lens,
                                       kv_cache_cfg=args.layout, cumsum=args.cumsum, seq_starts=args.seq_starts,
                                       key=args.key, value=args.value)
    elif isinstance(args, ReshapeAndCacheArgs):
        ascend_kv.reshape_and_cache(args.key, args.value, args.key_cache, args.value_cache, args.slot_mapping,
                                    kv_cache_cfg="nd" if args.layout == ND else "nz")
    elif args.cum_sum is not None:
        ascend_kv.block_copy(args.caches[0], args.caches[1] if len(args.caches) > 1 else None, args.src, args.dst,
                             args.cum_sum)
    else:
        mapping = torch.stack([args.src.long(), args.dst.long()], 1) if args.src.numel() else torch.zeros(
            (0, 2), dtype=torch.int64, device=args.src.device)
        ascend_kv.copy_blocks(list(args.caches[:1]), list(args.caches[1:]), mapping)


def on_the_sim(args: KvCacheArgs | PagedLoadArgs | ReshapeAndCacheArgs | BlockCopyArgs) -> None:
    """``args`` (host tensors) through the public function on the sim backend; asserts the sim ran it."""
    with ran_on(SIM), ascend_kv.use_backend("sim"):
        public(args)


@contextlib.contextmanager
def kernels_on_the_fake_npu() -> Iterator[None]:
    """Inside the block, calls on the fake NPU (tests/fake_npu) run the kernels: the kernels' host build is
    the NPU kernel library (``ASCEND_KV_NPU_LIB``) and the device an A2 part (``ASCEND_KV_SOC``)."""
    fake_npu.install()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(npu.LIBRARY_ENV, str(sim.library_path()))
        patch.setenv("ASCEND_KV_SOC", SUPPORTED_SOC)
        npu.library.cache_clear()
        policy.forget()
        try:
            yield
        finally:
            patch.undo()
            npu.library.cache_clear()
            policy.forget()


def on_the_fake_npu(args: KvCacheArgs | PagedLoadArgs | ReshapeAndCacheArgs | BlockCopyArgs, where: int) -> None:
    """``args`` (host tensors) through the public function on the fake NPU: every tensor on the device with
    its host memory layout, so the index values reach the backend unchecked (the default validation reads
    no device index tensor). Asserts the call ran on ``where`` (:data:`KERNELS` or :data:`DEVICE_FALLBACK`)
    and read nothing back, then copies the device memory back into the host tensors' (the bytes around
    views included)."""
    fake_npu.install()
    fields = dict(vars(args))
    caches = list(fields.pop("caches", ()))
    mirror = fake_npu.same_layout([*caches, *fields.values()])
    moved = dict(zip(fields, mirror.values[len(caches):]))
    if caches:
        moved["caches"] = tuple(mirror.values[:len(caches)])
    with ran_on(where), fake_npu.counting() as seen:
        public(type(args)(**moved))
    assert seen.transfers == 0
    mirror.copy_back()


def on_the_kernels(args: KvCacheArgs | PagedLoadArgs | ReshapeAndCacheArgs | BlockCopyArgs) -> None:
    """``args`` on the kernels through the fake NPU (inside :func:`kernels_on_the_fake_npu`): :func:`on_the_fake_npu`."""
    on_the_fake_npu(args, KERNELS)


def on_the_device_fallback(args: KvCacheArgs | PagedLoadArgs | ReshapeAndCacheArgs | BlockCopyArgs) -> None:
    """``args`` on the device fallback (requested explicitly) through the fake NPU: :func:`on_the_fake_npu`."""
    with ascend_kv.use_backend("fallback"):
        on_the_fake_npu(args, DEVICE_FALLBACK)


def outside_reason(function: Callable[..., Any], *args: Any, **kwargs: Any) -> str | None:
    """Why the kernels cannot take this call's tensors in place (the operators' kernel-domain rule), or
    None when they take it: the call runs on the fake NPU, each tensor with its host memory layout, with
    the npu backend requested (which refuses a call outside the domain, saying why)."""
    fake_npu.install()
    mirror = fake_npu.same_layout([*args, *kwargs.values()])
    device_args, device_kwargs = mirror.values[:len(args)], dict(zip(kwargs, mirror.values[len(args):]))
    with kernels_on_the_fake_npu(), ascend_kv.use_backend("npu"):
        try:
            with ran_on(KERNELS):
                function(*device_args, **device_kwargs)
        except BackendUnavailableError as error:
            found = re.search(r"the call is outside the kernels' domain: (.*)", str(error))
            assert found is not None, error
            return found.group(1)
    return None


def paged_call(args: PagedLoadArgs) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args`` as the public function's ``(args, kwargs)``."""
    return ((args.key_cache, args.value_cache, args.block_table, args.context_lens),
            {"kv_cache_cfg": args.layout, "cumsum": args.cumsum, "seq_starts": args.seq_starts, "key": args.key,
             "value": args.value})


def assert_kv_matches(case: Case) -> None:
    expected = reference.kv_cache(*case.cloned().args)
    call = case.cloned()
    with ran_on(SIM), ascend_kv.use_backend("sim"):
        result = ascend_kv.kv_cache(*call.args)
    assert result is call.args[2] and bits_equal(result, expected)


def assert_paged_matches(case: Case) -> None:
    ref = case.cloned()
    expected = reference.paged_cache_load(*ref.args, **ref.kwargs)
    call = case.cloned()
    with ran_on(SIM), ascend_kv.use_backend("sim"):
        key, value = ascend_kv.paged_cache_load(*call.args, **call.kwargs)
    assert bits_equal(key, expected[0]) and bits_equal(value, expected[1])


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
    assert outside_reason(ascend_kv.kv_cache, new_kv, 1, past, token_offset, seq_len) is None
    expected = reference.kv_cache(new_kv.clone(), 1, past.clone(), token_offset, seq_len)
    before = past_buffer.clone()
    on_the_sim(args)
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
    assert outside_reason(ascend_kv.kv_cache, new_kv, 0, past, token_offset, seq_len) is None
    expected = reference.kv_cache(new_kv.contiguous(), 0, past.clone(), token_offset, seq_len)
    on_the_sim(args)
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
    positional, options = paged_call(args)
    assert outside_reason(ascend_kv.paged_cache_load, *positional, **options) is None
    expected = reference.paged_cache_load(key_cache.contiguous(), value_cache.contiguous(), table, context_lens,
                                          kv_cache_cfg=layout)
    cache_before, key_before, value_before = buffer.clone(), key_buffer.clone(), value_buffer.clone()
    on_the_sim(args)
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
    positional, options = paged_call(args)
    assert outside_reason(ascend_kv.paged_cache_load, *positional, **options) is None
    expected = reference.paged_cache_load(cache.contiguous(), cache.contiguous(), args.block_table,
                                          args.context_lens, kv_cache_cfg=NZ)
    on_the_sim(args)
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
    reason = outside_reason(ascend_kv.kv_cache, args.new_kv, layer_id, strided_past, token_offset, seq_len)
    assert "new_kv has sizes (8, 32) and strides (1, 8)" in (reason or "")
    on_the_sim(args)
    assert bits_equal(strided_past, expected)

    case = paged_case(NZ, [7, 20], give_outputs=True, seed=40)
    ref = case.cloned()
    expected_key, expected_value = reference.paged_cache_load(*ref.args, **ref.kwargs)
    key_cache, value_cache, block_table, context_lens = case.args
    args = PagedLoadArgs(NZ, key_cache.transpose(1, 3).contiguous().transpose(1, 3), value_cache, block_table,
                         context_lens, None, False, case.kwargs["key"].t().contiguous().t(), case.kwargs["value"])
    positional, options = paged_call(args)
    assert "key_cache has sizes" in (outside_reason(ascend_kv.paged_cache_load, *positional, **options) or "")
    on_the_sim(args)
    assert bits_equal(args.key, expected_key) and bits_equal(args.value, expected_value)


# ----------------------------------------------------------------------------- the operators' checks before the kernels
#
# The kernel library checks nothing (ascendc/host/kernel_library.h): the operators' rules refuse a bad
# call before the sim runs, naming the tensor, and write nothing; tensors outside the kernels' domain
# (rows not contiguous, strided index tensors) are no longer refused but run on contiguous copies.


def _kv_call() -> list[torch.Tensor]:
    return [random_bits((4, 32), torch.float16, 1), random_bits((2, 2, 8, 32), torch.float16, 2),
            torch.tensor([4, 2]), torch.tensor([2, 2])]


def _paged_call() -> dict[str, Any]:
    cache = random_bits((4, 16, 2, 16), torch.float16, 3)
    return {"key_cache": cache, "value_cache": cache.clone(), "block_table": torch.tensor([[1, 2]]),
            "context_lens": torch.tensor([5]), "seq_starts": None,
            "key": torch.zeros((5, 2, 16), dtype=torch.float16), "value": torch.zeros((5, 2, 16), dtype=torch.float16),
            "layout": 1, "cumsum": False}


def _paged(call: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    return ascend_kv.paged_cache_load(call["key_cache"], call["value_cache"], call["block_table"], call["context_lens"],
                                      kv_cache_cfg=call["layout"], cumsum=call["cumsum"], seq_starts=call["seq_starts"],
                                      key=call["key"], value=call["value"])


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"value_cache": random_bits((3, 16, 2, 16), torch.float16, 4)}, ValueError,
         "value_cache.shape[0] (num_blocks) = 3 must equal key_cache.shape[0] = 4"),
        ({"value": torch.zeros((5, 2, 8), dtype=torch.float16)}, ValueError,
         "value must have shape [rows >= 5, 2, 16], got (5, 2, 8)"),
        ({"block_table": torch.tensor([[1.0, 2.0]])}, TypeError, "block_table must have dtype int32 or int64, got float32"),
        ({"context_lens": torch.tensor([5, 1])}, ValueError,
         "context_lens must have 1 entries (batch = block_table.shape[0]), got 2"),
        ({"context_lens": torch.tensor([[5, 0]])[:, 0]}, None, None),
        # outside the kernels' domain: run on contiguous copies
        ({"block_table": torch.tensor([[1, 9], [2, 9]]).t()[:1]}, None, None),
        ({"key": torch.zeros((5, 16, 2), dtype=torch.float16).transpose(1, 2)}, None, None),
        ({"key_cache": random_bits((4, 16, 16, 2), torch.float16, 5).transpose(2, 3)}, None, None),
        ({"layout": 2}, ValueError, "kv_cache_cfg must be 0 (K_CACHE_V_CACHE_NZ) or 1 (K_CACHE_V_CACHE_ND), got 2"),
        ({"key": torch.zeros((5, 2, 16), dtype=torch.bfloat16)}, TypeError,
         "key.dtype must equal key_cache.dtype = torch.float16, got torch.bfloat16"),
        # written tensors: rows 32 elements apart are distinct, 31 apart overlap (an expand() view shares all)
        ({"key": torch.zeros(5 * 32, dtype=torch.float16).as_strided((5, 2, 16), (32, 16, 1))}, None, None),
        ({"key": torch.zeros(5 * 32, dtype=torch.float16).as_strided((5, 2, 16), (31, 16, 1))}, ValueError,
         ("key is written in place, so each element needs its own memory, but shape (5, 2, 16) with strides "
          "(31, 16, 1)")),
        ({"value": torch.zeros((1, 2, 16), dtype=torch.float16).expand(5, 2, 16)}, ValueError,
         "value is written in place, so each element needs its own memory"),
        # index tensors: the rank as well as the entry count
        ({"context_lens": torch.tensor([[5]])}, ValueError, "context_lens must be a 1-D tensor [batch], got shape (1, 1)"),
        ({"seq_starts": torch.tensor([[0]])}, ValueError, "seq_starts must be a 1-D tensor [batch], got shape (1, 1)"),
        ({"cumsum": True, "context_lens": torch.tensor([[0, 5]])}, ValueError,
         "context_lens must be a 1-D tensor [batch], got shape (1, 2)"),
        ({"block_table": torch.tensor([1, 2])}, ValueError,
         "block_table must be a 2-D tensor [batch, max_blocks], got shape (2,)"),
    ],
)
def test_paged_checks_every_tensor_before_the_sim(change: dict[str, Any], error: type[Exception] | None,
                                                  message: str | None) -> None:
    call = {**_paged_call(), **change}
    if error is None:  # accepted: the sim's result is the reference's
        expected = reference.paged_cache_load(*(call[k].contiguous() for k in ("key_cache", "value_cache",
                                                                                "block_table", "context_lens")),
                                              kv_cache_cfg=call["layout"])
        with ran_on(SIM), ascend_kv.use_backend("sim"):
            key, value = _paged(call)
        assert key is call["key"] and bits_equal(key, expected[0]) and bits_equal(value, expected[1])
        return
    before = {k: v.clone() for k, v in call.items() if isinstance(v, torch.Tensor)}
    with ran_on(SIM, calls=0), ascend_kv.use_backend("sim"), pytest.raises(error, match=re.escape(message)):
        _paged(call)
    assert all(bits_equal(call[k], v) for k, v in before.items())  # nothing written


@pytest.mark.parametrize(
    ("index", "value", "error", "message"),
    [
        (0, random_bits((4, 16), torch.float16, 1), ValueError, "new_kv.shape[1] = 16 must equal hidden = 32 (past.shape[3])"),
        (1, random_bits((2, 2, 8, 24), torch.float16, 2), ValueError,
         "past: hidden (past.shape[3]) = 24 must be a positive multiple of 16 elements (32 bytes of float16)"),
        (2, torch.tensor([4, 2, 1]), ValueError, "token_offset must have 2 entries (batch = past.shape[1]), got 3"),
        (3, torch.tensor([2, 2], dtype=torch.int16), TypeError, "seq_len must have dtype int32 or int64, got int16"),
        # rows not contiguous: outside the kernels' domain, run on a contiguous copy
        (1, random_bits((2, 2, 32, 8), torch.float16, 2).transpose(2, 3), None, None),
        (1, torch.zeros((2, 1, 8, 32), dtype=torch.float16).expand(2, 2, 8, 32), ValueError,
         ("past is written in place, so each element needs its own memory, but shape (2, 2, 8, 32) with strides "
          "(256, 0, 32, 1)")),
        (2, torch.tensor([[4, 2]]), ValueError, "token_offset must be a 1-D tensor [batch], got shape (1, 2)"),
        (3, torch.tensor([[2], [2]]), ValueError, "seq_len must be a 1-D tensor [batch], got shape (2, 1)"),
    ],
)
def test_kv_checks_every_tensor_before_the_sim(index: int, value: torch.Tensor, error: type[Exception] | None,
                                               message: str | None) -> None:
    call = _kv_call()
    call[index] = value
    new_kv, past, token_offset, seq_len = call
    if error is None:  # accepted: the sim's result is the reference's
        expected = reference.kv_cache(new_kv, 0, past.contiguous(), token_offset, seq_len)
        with ran_on(SIM), ascend_kv.use_backend("sim"):
            ascend_kv.kv_cache(new_kv, 0, past, token_offset, seq_len)
        assert bits_equal(past, expected)
        return
    before = [t.clone() for t in call]
    with ran_on(SIM, calls=0), ascend_kv.use_backend("sim"), pytest.raises(error, match=re.escape(message)):
        ascend_kv.kv_cache(new_kv, 0, past, token_offset, seq_len)
    assert all(bits_equal(a, b) for a, b in zip(call, before))


def test_the_sim_reads_a_layer_tensor_of_one_element_of_any_rank() -> None:
    new_kv, past, token_offset, seq_len = _kv_call()
    expected = reference.kv_cache(new_kv, 1, past.clone(), token_offset, seq_len)
    with ascend_kv.use_backend("sim"):
        with ran_on(SIM):
            ascend_kv.kv_cache(new_kv, torch.tensor([1], dtype=torch.int32), past, token_offset, seq_len)
        assert bits_equal(past, expected)
        with ran_on(SIM, calls=0), pytest.raises(ValueError,
                                                 match=re.escape("layer_id must have exactly one element, got shape (2,)")):
            ascend_kv.kv_cache(new_kv, torch.tensor([1, 1]), past, token_offset, seq_len)
        for layer in (torch.tensor(0), torch.tensor([[0]])):  # one element of any rank
            with ran_on(SIM):
                ascend_kv.kv_cache(new_kv, layer, past, token_offset, seq_len)
    assert bits_equal(past, reference.kv_cache(new_kv, 0, expected.clone(), token_offset, seq_len))


def test_meta_implementations_trace_without_data() -> None:
    """With the sim requested, calls on meta tensors run the operators' shape rules only: nothing runs."""
    new_kv, past, token_offset, seq_len = (t.to("meta") for t in _kv_call())
    call = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in _paged_call().items()}
    with ran_on(SIM, calls=0), ascend_kv.use_backend("sim"):
        ascend_kv.kv_cache(new_kv, 0, past, token_offset, seq_len)
        _paged(call)
    with pytest.raises(ValueError, match=re.escape("new_kv.shape[1] = 16 must equal hidden = 32")):
        ascend_kv.kv_cache(new_kv[:, :16], 0, past, token_offset, seq_len)  # the rules still run


# ----------------------------------------------------------------------------- the instrument


def test_settings_are_validated(configure) -> None:
    configure(0, DEFAULT_UB)
    with pytest.raises(RuntimeError, match="ASCEND_KV_SIM_CORES must be an integer >= 1, got '0'"):
        assert_kv_matches(kv_cache_case(torch.float16, [1], [1]))


def test_ub_too_small_for_the_tiling(configure) -> None:
    configure(2, 96)
    with pytest.raises(RuntimeError, match="ascend_kv_host.kv_cache: tiling failed: the UB size leaves no room"):
        assert_kv_matches(kv_cache_case(torch.float16, [2], [2]))


def test_ub_larger_than_the_hardware_is_refused_by_the_model(configure) -> None:
    configure(2, 256 * 1024)
    with pytest.raises(RuntimeError, match="host model of the AscendC API stopped the kernel: .*ubBytes 262144"):
        assert_kv_matches(kv_cache_case(torch.float16, [2], [2]))


def test_a_written_tensor_sharing_elements_with_another_is_refused_before_the_model() -> None:
    """new_kv inside past: the operator's memory rule refuses it (the host model would too, on a direct launch)."""
    past = random_bits((1, 1, 4, 16), torch.float16, 0)
    before = past.clone()
    with ran_on(SIM, calls=0), ascend_kv.use_backend("sim"), pytest.raises(
            ValueError, match=re.escape("past shares memory with new_kv, which the operation reads while it writes past")):
        ascend_kv.kv_cache(past[0, 0, :2], 0, past, torch.tensor([2]), torch.tensor([2]))
    assert bits_equal(past, before)


def test_missing_compiler_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    message = "builds the AscendC kernels for the host with a C++ compiler, and 'c++' was not found"
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(sim, "_loaded", None)  # as in a process that has not built it yet
    monkeypatch.setattr(shutil, "which", lambda *_, **__: None)
    decision = ascend_kv.explain("kv_cache", "cpu", backend="sim")
    assert decision.backend is None and message in decision.reason
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    with pytest.raises(BackendUnavailableError, match="the C\\+\\+ compiler '/nonexistent/c\\+\\+' cannot be run"):
        sim.library_path()


def cached_path() -> Path:
    """Where the host build of the current sources and settings is cached (built or not)."""
    library = sim.definition()
    return build.cache_dir() / f"lib{library.name}-{build._key(library, *build.flags(library))}.so"


def test_cache_key_follows_every_source(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An edited kernel, header, model, tiling or kernel entry gets a new library; the same sources keep it."""
    copy = tmp_path / "ascendc"
    shutil.copytree(sim.source_root(), copy)
    monkeypatch.setattr(sim, "source_root", lambda: copy)
    monkeypatch.setenv("ASCEND_KV_CACHE_DIR", str(tmp_path / "cache"))
    first = cached_path()
    assert first.parent == tmp_path / "cache" and cached_path() == first
    seen = {first}
    for name in ("kernels/copy_common.h", "sim/include/kernel_operator.h", "host/tiling.cpp", "host/kernel_entry.cpp",
                 "host/kernel_library.h", "sim/launch_host.cpp", "tiling.h"):
        (copy / name).write_text((copy / name).read_text() + "\n")
        assert cached_path() not in seen, name
        seen.add(cached_path())
    (copy / "sim" / "tests" / "model_cases.cpp").write_text("// not part of the library\n")
    assert cached_path() in seen


def test_a_failed_build_reports_the_compiler(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    copy = tmp_path / "ascendc"
    shutil.copytree(sim.source_root(), copy)
    kernel = copy / "kernels" / "kv_cache.cpp"
    kernel.write_text(kernel.read_text() + "\nthis is not C++;\n")
    monkeypatch.setattr(sim, "source_root", lambda: copy)
    monkeypatch.setenv("ASCEND_KV_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(BackendUnavailableError, match="(?s)compiling .*kernels/kv_cache.cpp failed.*not C\\+\\+"):
        sim.library_path()
    assert not list((tmp_path / "cache").glob("*.so"))


def test_the_wheel_ships_every_file_the_host_build_reads() -> None:
    """The sim builds from ascend_kv/_sources/ascendc in a wheel: pyproject.toml's package data for it
    must cover every file the build reads (the same globs setuptools expands)."""
    root = sim.source_root()
    pyproject = (root.parent / "pyproject.toml").read_text()
    entry = re.search(r'^"ascend_kv\._sources\.ascendc" = \[(.*?)\]', pyproject, re.MULTILINE)
    assert entry is not None, "pyproject.toml ships no package data for ascend_kv._sources.ascendc"
    patterns = re.findall(r'"([^"]+)"', entry.group(1))
    shipped = {path for pattern in patterns for path in root.glob(pattern)}
    library = sim.definition()
    read = {*library.sources, *library.hashed}
    assert len(read) > 10
    missing = sorted(str(p.relative_to(root)) for p in read if p not in shipped)
    assert not missing, f"add to [tool.setuptools.package-data] 'ascend_kv._sources.ascendc': {missing}"
