"""Inputs from the wild through the public API, beyond the domain's rules (tests/test_checks.py has
those, each at its boundary): any strides, every bit pattern, offsets beyond int32, threads, fuzzing.

Every call either matches ascend_kv/tools/reference.py bit for bit, or raises TypeError/ValueError
naming an argument and leaves every tensor as it was (the judges in tests/cases.py). The backend
is the automatic choice, as users get it.
"""

from __future__ import annotations

import math
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from cases import (
    KV_ARGS,
    LOAD_ARGS,
    ND,
    NZ,
    Case,
    argument,
    bits_equal,
    judge,
    judge_kv_cache,
    judge_paged_cache_load,
    kv_cache_case,
    kv_cache_cases,
    paged_case,
    paged_cases,
    random_bits,
    require_named_error,
    with_argument,
)
from hypothesis import event, given
from hypothesis import strategies as st

import ascend_kv
from ascend_kv.tools import reference

# ----------------------------------------------------------------------------- any strides


def sentinel_like(shape: list[int], dtype: torch.dtype) -> torch.Tensor:
    """A tensor whose every byte is 0xA5."""
    t = torch.empty(shape, dtype=dtype)
    t.view(-1).view(torch.uint8).fill_(0xA5)
    return t


@st.composite
def relaid_out(draw: st.DrawFn, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, tuple[slice, ...]]:
    """``t``'s values in a random strided view: dims permuted in memory, padded, offset.

    Returns ``(view, storage, region)``: the padding of ``storage`` (outside ``storage[region]``)
    holds sentinel bytes, so a write outside the view shows.
    """
    order = draw(st.permutations(range(t.dim())))
    pads = [draw(st.integers(0, 2)) for _ in order]
    starts = [draw(st.integers(0, pad)) for pad in pads]
    storage = sentinel_like([t.shape[d] + pad for d, pad in zip(order, pads)], t.dtype)
    region = tuple(slice(start, start + t.shape[d]) for d, start in zip(order, starts))
    view = storage[region].permute([order.index(d) for d in range(t.dim())])
    view.copy_(t)
    return view, storage, region


def padding_intact(storage: torch.Tensor, region: tuple[slice, ...]) -> bool:
    """Whether every element of ``storage`` outside ``storage[region]`` still holds the sentinel."""
    outside = torch.ones(storage.shape, dtype=torch.bool)
    outside[region] = False
    return bits_equal(storage[outside], sentinel_like(list(storage.shape), storage.dtype)[outside])


@st.composite
def strided_case(draw: st.DrawFn, case: Case) -> tuple[Case, list[tuple[torch.Tensor, tuple[slice, ...]]]]:
    """``case`` with each tensor argument of rank >= 1 moved, or not, into a random strided view."""
    storages = []

    def move(value: Any) -> Any:
        if not isinstance(value, torch.Tensor) or value.dim() == 0 or not draw(st.booleans()):
            return value
        view, storage, region = draw(relaid_out(value))
        storages.append((storage, region))
        return view

    return Case(tuple(move(a) for a in case.args), {k: move(v) for k, v in case.kwargs.items()}), storages


@given(kv_cache_cases().flatmap(strided_case))
def test_kv_cache_honours_any_strides(strided: tuple[Case, list[tuple[torch.Tensor, tuple[slice, ...]]]]) -> None:
    case, storages = strided
    assert judge("kv_cache", case) is None
    assert all(padding_intact(storage, region) for storage, region in storages)


@given(paged_cases().flatmap(strided_case))
def test_paged_cache_load_honours_any_strides(
    strided: tuple[Case, list[tuple[torch.Tensor, tuple[slice, ...]]]],
) -> None:
    case, storages = strided
    assert judge("paged_cache_load", case) is None
    assert all(padding_intact(storage, region) for storage, region in storages)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int8])
def test_new_kv_as_a_slice_of_a_fused_qkv_tensor(dtype: torch.dtype) -> None:
    hidden = 64
    qkv = random_bits((7, 3 * hidden), dtype, seed=1)
    past = random_bits((2, 3, 9, hidden), dtype, seed=2)
    for part in range(3):
        new_kv = qkv[:, part * hidden:(part + 1) * hidden]
        assert judge_kv_cache(new_kv, 1, past, torch.tensor([2, 9, 4]), torch.tensor([2, 4, 1])) is None
        heads = qkv.view(1, 7, 3 * 4, hidden // 4)[:, :, part * 4:(part + 1) * 4]  # [b, s, heads, head_size]
        assert judge_kv_cache(heads, 0, past, torch.tensor([7, 0, 0]), torch.tensor([7, 0, 0])) is None


def test_transposed_caches_are_written_and_read_in_place() -> None:
    storage = random_bits((2, 9, 3, 64), torch.float16, seed=3)    # [layers, max_seq_len, batch, hidden]
    past = storage.transpose(1, 2)                                  # [layers, batch, max_seq_len, hidden]
    new_kv = random_bits((5, 64), torch.float16, seed=4)
    assert judge_kv_cache(new_kv, 1, past, torch.tensor([2, 9, 4]), torch.tensor([2, 2, 1])) is None
    assert bits_equal(storage[1, 7:9, 1], new_kv[2:4])             # the caller's memory holds the tokens
    nd = random_bits((16, 6, 2, 32), torch.float16, seed=5).transpose(0, 1)   # [blocks, block_size, ...]
    nz = ascend_kv.nd_to_nz(nd).transpose(1, 2).contiguous().transpose(1, 2)  # same NZ values, other strides
    table = torch.tensor([[5, 0, 3], [1, 2, 4]], dtype=torch.int32)
    for cache, cfg in ((nd, ND), (nz, NZ)):
        assert judge_paged_cache_load(cache, cache, table, torch.tensor([40, 17]), kv_cache_cfg=cfg) is None


def test_strided_block_table_and_lengths() -> None:
    cache = random_bits((6, 16, 2, 16), torch.float16, seed=6)
    wide = torch.tensor([[5, -1, 0, -1, 3, -1], [1, -1, 2, -1, -1, -1]], dtype=torch.int32)
    table = wide[:, ::2]                                            # stride (6, 2)
    assert judge_paged_cache_load(cache, cache, table, torch.tensor([40, 99, 20])[::2], kv_cache_cfg=ND) is None
    columns = torch.tensor([[5, 1], [0, 2], [3, -1]], dtype=torch.int64).t()   # a transposed block table
    assert judge_paged_cache_load(cache, cache, columns, torch.tensor([33, 16]), kv_cache_cfg=ND,
                                  seq_starts=torch.tensor([0, 7, 16, 9])[::2]) is None


def test_key_and_value_as_halves_of_one_fused_output() -> None:
    cache = random_bits((6, 16, 2, 16), torch.float16, seed=7)
    fused = random_bits((60, 2, 2, 16), torch.float16, seed=8)     # [rows, k/v, heads, head_size]
    table = torch.tensor([[5, 0, 3], [1, 2, 4]], dtype=torch.int32)
    assert judge_paged_cache_load(cache, cache, table, torch.tensor([2, 40, 57]), kv_cache_cfg=ND, cumsum=True,
                                  key=fused[:, 0], value=fused[:, 1]) is None


# ----------------------------------------------------------------------------- payload bits


def every_bit_pattern(dtype: torch.dtype) -> torch.Tensor:
    """All 2**(8 * itemsize) values of a 1- or 2-byte dtype (NaNs with every payload, infinities, -0)."""
    view = torch.int8 if dtype.itemsize == 1 else torch.int16
    info = torch.iinfo(view)
    return torch.arange(info.min, info.max + 1, dtype=torch.int32).to(view).view(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int8])
def test_every_bit_pattern_is_copied_exactly(dtype: torch.dtype) -> None:
    values = every_bit_pattern(dtype).reshape(-1, 32)                               # [tokens, 32]
    tokens = values.shape[0]
    past = torch.zeros(1, 2, tokens, 32, dtype=dtype)
    ascend_kv.kv_cache(values, 0, past, torch.tensor([0, tokens]), torch.tensor([0, tokens]))
    assert bits_equal(past[0, 1], values)
    values = values.repeat(max(1, 16 // tokens), 1)                                 # whole blocks of 16
    tokens = values.shape[0]
    nd = values.reshape(-1, 16, 1, 32)                                              # [blocks, 16, 1, 32]
    table = torch.arange(nd.shape[0], dtype=torch.int32).flip(0)[None]
    key, value = ascend_kv.paged_cache_load(nd, nd, table, torch.tensor([tokens]), kv_cache_cfg=ND)
    assert bits_equal(key, nd.flip(0).reshape(tokens, 1, 32)) and bits_equal(value, key)
    nz = ascend_kv.nd_to_nz(nd)
    key, value = ascend_kv.paged_cache_load(nz, nz, table, torch.tensor([tokens]), kv_cache_cfg=NZ)
    assert bits_equal(key, nd.flip(0).reshape(tokens, 32)) and bits_equal(value, key)


# ----------------------------------------------------------------------------- offsets beyond int32


def sparse_tensor(path: Path, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A zero tensor backed by a sparse file: only the pages a test touches take memory or disk."""
    numel = math.prod(shape)
    with path.open("wb") as f:
        f.truncate(numel * dtype.itemsize)
    return torch.from_file(str(path), shared=True, size=numel, dtype=dtype).view(shape)


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@pytest.mark.parametrize("spread", [1, 2])
def test_kv_cache_writes_past_offsets_beyond_int32(tmp_path: Path, spread: int) -> None:
    """past has over 2**32 elements; the last rows of its last entry sit beyond 2**32.

    ``spread = 2`` makes past every other element of its memory, which takes the strided paths.
    """
    max_seq_len = 2**25 + 64
    memory = sparse_tensor(tmp_path / "past", (2, 2, max_seq_len, 32 * spread), torch.int8)
    past = memory[..., ::spread]
    new_kv = random_bits((5, 32), torch.int8, seed=11)
    resident = resident_bytes()
    ascend_kv.kv_cache(new_kv, 1, past, torch.tensor([2, max_seq_len], dtype=torch.int32),
                       torch.tensor([2, 3], dtype=torch.int32))
    assert resident_bytes() - resident < 2**27, "a copy of the cache was made"
    assert bits_equal(past[1, 0, :2], new_kv[:2]) and bits_equal(past[1, 1, -3:], new_kv[2:])
    flat = memory.view(-1)
    last = ((1 * 2 + 1) * max_seq_len + max_seq_len - 3) * 32 * spread       # flat offset of the first far row
    assert last > 2**32
    for wrapped in (last % 2**31, last % 2**32):                             # where 32-bit offsets would land
        assert not flat[wrapped:wrapped + 96 * spread].any()
    if spread > 1:
        assert not memory[1, 1, -3:, 1::2].any()                             # the elements between stay


def test_paged_cache_load_reads_and_writes_beyond_int32(tmp_path: Path) -> None:
    """An ND cache of over 2**32 elements read at its last blocks, written into rows beyond 2**31 elements."""
    num_blocks, block_size, row = 2**18 + 4, 16, 1024
    cache = sparse_tensor(tmp_path / "cache", (num_blocks, block_size, 1, row), torch.int8)
    cache[-3:] = random_bits((3, block_size, 1, row), torch.int8, seed=12)
    table = torch.tensor([[num_blocks - 1, num_blocks - 3, num_blocks - 2]], dtype=torch.int32)
    rows = 2**21 + 64
    key = sparse_tensor(tmp_path / "key", (rows, 1, row), torch.int8)
    value = sparse_tensor(tmp_path / "value", (rows, 1, row), torch.int8)
    resident = resident_bytes()
    ascend_kv.paged_cache_load(cache, cache, table, torch.tensor([rows - 40, rows]), kv_cache_cfg=ND, cumsum=True,
                               key=key, value=value)
    assert resident_bytes() - resident < 2**27, "a copy of the 4 GiB cache or of the outputs was made"
    expected, _ = reference.paged_cache_load(cache, cache, table, torch.tensor([40]), kv_cache_cfg=ND)
    assert bits_equal(key[-40:], expected) and bits_equal(value[-40:], expected)
    assert not key[: rows - 40].view(-1)[-(2**20):].any()
    assert (rows - 40) * row > 2**31 and (num_blocks - 3) * block_size * row > 2**32


# ----------------------------------------------------------------------------- threads


def test_concurrent_calls_on_disjoint_caches_equal_serial_calls() -> None:
    threads_n, rounds = 4, 8
    kv = [kv_cache_case(torch.bfloat16, [1, 2, 0, 3], [4, 16, 0, 9], seed=20 + i) for i in range(threads_n)]
    load = [paged_case(ND, [20, 1, 33], give_outputs=True, seed=40 + i) for i in range(threads_n)]
    serial_kv, threaded_kv = [c.cloned() for c in kv], [c.cloned() for c in kv]
    serial_load, threaded_load = [c.cloned() for c in load], [c.cloned() for c in load]
    new_loads: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in range(threads_n)]

    def work(i: int, kv_case: Case, load_case: Case, barrier: threading.Barrier | None) -> None:
        if barrier is not None:
            barrier.wait()
        for r in range(rounds):
            new_kv, _, past, offsets, lens = kv_case.args
            ascend_kv.kv_cache(new_kv.roll(r, 0), r % 2, past, offsets, lens)
            ascend_kv.paged_cache_load(*load_case.args, **load_case.kwargs)
            new_loads[i].append(ascend_kv.paged_cache_load(*load_case.args[:4], kv_cache_cfg=ND))

    for i in range(threads_n):
        work(i, serial_kv[i], serial_load[i], None)
    serial_new, new_loads[:] = [list(x) for x in new_loads], [[] for _ in range(threads_n)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads_n)

    def run(i: int) -> None:
        try:
            work(i, threaded_kv[i], threaded_load[i], barrier)
        except BaseException as error:  # noqa: BLE001 - reported below, in the test's thread
            errors.append(error)

    pool = [threading.Thread(target=run, args=(i,)) for i in range(threads_n)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors
    for s, t in zip(serial_kv + serial_load, threaded_kv + threaded_load):
        assert all(bits_equal(a, b) for a, b in zip(s.tensors(), t.tensors()))
    for s_calls, t_calls in zip(serial_new, new_loads):
        assert all(bits_equal(a, b) for s_out, t_out in zip(s_calls, t_calls) for a, b in zip(s_out, t_out))


# ----------------------------------------------------------------------------- malformed inputs

FUZZ_DTYPES = [torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
               torch.float32, torch.float64, torch.bool, torch.complex64]
JUNK = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.text(max_size=3),
    st.lists(st.integers(-3, 40), max_size=4), st.sampled_from([np.int64(1), np.bool_(True), np.float16(1.0)]),
    st.lists(st.integers(0, 5), max_size=3).map(np.array), st.sampled_from([ND, NZ, "nd", "NZ", "x", 2, -1]),
)


@st.composite
def any_tensor(draw: st.DrawFn) -> torch.Tensor:
    shape = draw(st.lists(st.integers(0, 5), max_size=5))
    dtype = draw(st.sampled_from(FUZZ_DTYPES))
    return torch.randint(-3, 40, shape, dtype=torch.int64).to(dtype)


@st.composite
def damaged_tensor(draw: st.DrawFn, t: torch.Tensor) -> Any:
    """``t`` with one defect: dtype, shape, values, layout, device or autograd."""
    kind = draw(st.sampled_from(["dtype", "other", "unsqueeze", "flatten", "narrow", "grow", "transpose", "meta",
                                 "grad", "scalar", "list"] + ["narrow", "grow", "transpose"] + ["values"] * 6
                                + ["extreme"] * 3))
    if t.is_meta or t.is_complex():  # no values to read or change as integers
        return draw(any_tensor())
    if kind == "dtype":
        return t.to(draw(st.sampled_from(FUZZ_DTYPES)))
    if kind == "unsqueeze":
        return t.unsqueeze(draw(st.integers(0, t.dim())))
    if kind == "flatten":
        return t.reshape(-1)
    if kind == "narrow" and t.dim():
        dim = draw(st.integers(0, t.dim() - 1))
        return t.narrow(dim, 0, draw(st.integers(0, max(t.shape[dim] - 1, 0))))
    if kind == "grow" and t.dim():
        return torch.cat([t, t], dim=draw(st.integers(0, t.dim() - 1)))
    if kind in ("values", "extreme") and t.numel() and not t.dtype.is_floating_point:
        out = t.to(torch.int64).reshape(-1)                                  # holds every value below
        i = draw(st.integers(0, out.numel() - 1))
        if kind == "extreme":
            # not 2**31 - 1: a valid output of that many rows is tens of GiB (see the allocation test)
            out[i] = draw(st.sampled_from([-1, -(2**31), 2**31, 2**62, -(2**63), 2**63 - 1]))
        else:
            out[i] = max(min(int(out[i]) + draw(st.integers(-3, 3)), 2**63 - 1), -(2**63))
        return out.reshape(t.shape)
    if kind == "transpose" and t.dim() >= 2:
        return t.transpose(0, draw(st.integers(1, t.dim() - 1)))
    if kind == "meta":
        return t.to("meta")
    if kind == "grad" and t.dtype.is_floating_point:
        return t.clone().requires_grad_()
    if kind == "scalar" and t.numel():
        return t.reshape(-1)[0].item()
    if kind == "list":
        return t.tolist()
    return draw(any_tensor())


@st.composite
def malformed(draw: st.DrawFn, op: str) -> Case:
    """A valid call of ``op`` with one to three arguments damaged, replaced by junk, or added."""
    case = draw(kv_cache_cases() if op == "kv_cache" else paged_cases())
    names = KV_ARGS if op == "kv_cache" else LOAD_ARGS
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 3]))):
        name = draw(st.sampled_from(names))
        current = argument(op, case, name) if (name in case.kwargs or name in names[:len(case.args)]) else None
        if isinstance(current, torch.Tensor) and draw(st.integers(0, 3)):
            value = draw(damaged_tensor(current))
        else:
            value = draw(st.one_of(JUNK, any_tensor()))
        case = with_argument(op, case, name, value)
    return case


@given(malformed("kv_cache"))
def test_malformed_kv_cache_calls_match_the_reference_or_raise_a_named_error(case: Case) -> None:
    error = judge("kv_cache", case)
    event("accepted" if error is None else type(error).__name__)


@given(malformed("paged_cache_load"))
def test_malformed_paged_cache_load_calls_match_the_reference_or_raise_a_named_error(case: Case) -> None:
    error = judge("paged_cache_load", case)
    event("accepted" if error is None else type(error).__name__)


@given(st.one_of(JUNK, st.sampled_from([0, 1])), st.one_of(JUNK, st.booleans()), st.one_of(JUNK, st.booleans()))
def test_malformed_operation_parameters_raise_a_named_error(cfg: Any, cumsum: Any, has_starts: Any) -> None:
    param = ascend_kv.PagedCacheLoadParam(kv_cache_cfg=cfg, is_seq_lens_cumsum_mode=cumsum, has_seq_starts=has_starts)
    try:
        ascend_kv.PagedCacheLoadOperation(param)
    except (TypeError, ValueError) as error:
        assert any(n in str(error) for n in ("kv_cache_cfg", "is_seq_lens_cumsum_mode", "has_seq_starts")), error
    if cfg is not None:  # None is the default parameter
        with pytest.raises(TypeError, match="param must be a KVCacheParam"):
            ascend_kv.KVCacheOperation(cfg)


@given(malformed("kv_cache"), malformed("paged_cache_load"))
def test_malformed_calls_through_the_atb_classes_raise_only_named_errors(kv: Case, load: Case) -> None:
    try:
        ascend_kv.KVCacheOperation(ascend_kv.KVCacheParam())(*kv.args)
    except (TypeError, ValueError) as error:
        require_named_error(error, KV_ARGS)
    kwargs = dict(load.kwargs)
    try:
        param = ascend_kv.PagedCacheLoadParam(
            kv_cache_cfg=kwargs.pop("kv_cache_cfg", NZ), is_seq_lens_cumsum_mode=kwargs.pop("cumsum", False),
            has_seq_starts="seq_starts" in kwargs)
        ascend_kv.PagedCacheLoadOperation(param)(
            *load.args, kwargs.get("key"), kwargs.get("value"), kwargs.get("seq_starts"))
    except (TypeError, ValueError) as error:
        require_named_error(error, (*LOAD_ARGS, "is_seq_lens_cumsum_mode", "has_seq_starts"))  # the param's fields
