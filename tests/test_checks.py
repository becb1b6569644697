"""Every rule of the domain (docs/semantics.md): the error, its type, the argument it names, and
that nothing was written. The checks run before dispatch, so one backend is enough here."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest
import torch
from cases import (
    KV_ARGS,
    ND,
    NZ,
    Case,
    argument,
    bits_equal,
    judge,
    judge_kv_cache,
    judge_paged_cache_load,
    kv_cache_case,
    paged_case,
    random_bits,
    with_argument,
)
from hypothesis import given
from hypothesis import strategies as st

import ascend_kv
from ascend_kv.operators.library import cache_dtypes
from ascend_kv.tools import reference

CACHE_DTYPES = cache_dtypes()


def dtype_names(dtypes: tuple[torch.dtype, ...]) -> str:
    """``"float16, bfloat16 or int8"``: a dtype list as the messages give it."""
    names = [str(d).removeprefix("torch.") for d in dtypes]
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]

Mutation = Callable[[Case], None]


def set_arg(i: int, value) -> Mutation:
    def mutate(case: Case) -> None:
        args = list(case.args)
        args[i] = value(args[i]) if callable(value) else value
        case.args = tuple(args)
    return mutate


def set_kwarg(name: str, value) -> Mutation:
    def mutate(case: Case) -> None:
        case.kwargs[name] = value(case.kwargs.get(name)) if callable(value) else value
    return mutate


def assert_rejected(call: Callable[[], object], case: Case, error: type, *fragments: str) -> None:
    """``call`` raises ``error`` whose message holds every fragment, and no tensor changed."""
    before = [t.clone() for t in case.tensors()]
    with pytest.raises(error) as info:
        call()
    for fragment in fragments:
        assert fragment in str(info.value), f"{fragment!r} not in {str(info.value)!r}"
    for t, b in zip(case.tensors(), before):
        assert bits_equal(t, b), "a rejected call wrote"


def kv_base() -> Case:
    # batch 3, max_seq_len 16, hidden 64, 2 layers; ntokens 6
    return kv_cache_case(torch.float16, [2, 0, 4], [5, 0, 16])


I32 = torch.int32

KV_CACHE_RULES: list[tuple[str, Mutation, type, tuple[str, ...]]] = [
    ("new_kv not a tensor", set_arg(0, [[1.0]]), TypeError, ("new_kv", "torch.Tensor", "list")),
    ("past not a tensor", set_arg(2, None), TypeError, ("past", "NoneType")),
    ("new_kv dtype differs", set_arg(0, lambda x: x.view(torch.bfloat16)), TypeError, ("new_kv.dtype", "past.dtype")),
    ("past rank", set_arg(2, lambda p: p[0]), ValueError, ("past", "4-D", "(3, 16, 64)")),
    ("new_kv rank 3", set_arg(0, lambda x: x[None]), ValueError, ("new_kv", "2-D", "4-D", "(1, 6, 64)")),
    ("hidden mismatch", set_arg(0, lambda x: x[:, :32]), ValueError, ("new_kv.shape[1] = 32", "hidden = 64")),
    ("4-D heads*head_size mismatch", set_arg(0, lambda x: x.reshape(1, 6, 4, 16)[:, :, :2]), ValueError,
     ("new_kv.shape[2] * new_kv.shape[3] = 32", "hidden = 64")),
    ("hidden not 32-byte aligned", set_arg(2, lambda p: p[..., :8]), ValueError, ("hidden", "multiple of 16", "16 bytes")),
    ("layer_id out of range", set_arg(1, 2), ValueError, ("layer_id = 2", "[0, 2)")),
    ("layer_id negative", set_arg(1, -1), ValueError, ("layer_id = -1",)),
    ("layer_id beyond int64", set_arg(1, 2**70), ValueError, ("layer_id = ", "must be in [0, 2)")),
    ("layer_id below int64", set_arg(1, -(2**70)), ValueError, ("layer_id = ", "must be in [0, 2)")),
    ("layer_id bool", set_arg(1, True), TypeError, ("layer_id", "bool")),
    ("layer_id float", set_arg(1, 1.0), TypeError, ("layer_id", "float")),
    ("layer_id two elements", set_arg(1, torch.tensor([1, 0])), ValueError, ("layer_id", "one element")),
    ("token_offset rank", set_arg(3, lambda t: t[None]), ValueError, ("token_offset", "1-D")),
    ("token_offset length", set_arg(3, lambda t: t[:2]), ValueError, ("token_offset", "3 entries", "got 2")),
    ("seq_len length", set_arg(4, torch.tensor([2, 0, 4, 0], dtype=I32)), ValueError, ("seq_len", "3 entries", "got 4")),
    ("seq_len negative", set_arg(4, torch.tensor([3, -1, 4], dtype=I32)), ValueError, ("seq_len[1] = -1", "negative")),
    ("sum(seq_len) != ntokens", set_arg(4, torch.tensor([2, 1, 4], dtype=I32)), ValueError,
     ("sum(seq_len) = 7", "ntokens = 6")),
    ("token_offset < seq_len", set_arg(3, torch.tensor([1, 0, 16], dtype=I32)), ValueError,
     ("token_offset[0] = 1 is smaller than seq_len[0] = 2 (token_offset is the position after the write)",)),
    ("token_offset negative", set_arg(3, torch.tensor([2, -1, 16], dtype=I32)), ValueError,
     ("token_offset[1] = -1 is negative",)),
    ("token_offset > max_seq_len", set_arg(3, torch.tensor([5, 0, 17], dtype=I32)), ValueError,
     ("token_offset[2] = 17 exceeds max_seq_len = 16 (past.shape[2])",)),
    ("past requires grad", set_arg(2, lambda p: p.float().half().requires_grad_()), ValueError,
     ("past requires grad",)),
]


@pytest.mark.parametrize("name, mutate, error, fragments", KV_CACHE_RULES, ids=[r[0] for r in KV_CACHE_RULES])
def test_kv_cache_rule(name: str, mutate: Mutation, error: type, fragments: tuple[str, ...]) -> None:
    case = kv_base()
    mutate(case)
    assert_rejected(lambda: ascend_kv.kv_cache(*case.args), case, error, *fragments)


def test_kv_cache_token_offset_equal_to_seq_len_is_the_last_accepted() -> None:
    """The boundary of the rule above: token_offset[0] = seq_len[0] writes from row 0; one less is refused."""
    case = kv_base()
    set_arg(3, torch.tensor([2, 0, 16], dtype=I32))(case)
    new_kv, layer, past, *indices = case.args
    expected = reference.kv_cache(new_kv, layer, past.clone(), *indices)
    ascend_kv.kv_cache(*case.args)
    assert bits_equal(past, expected)


def paged_base(layout=ND, **kwargs) -> Case:
    # batch 2, lens [20, 5], block_size 16, 8 blocks, 2 heads x 16, float16; block_table [2, 3]
    return paged_case(layout, [20, 5], give_outputs=True, **kwargs)


def nz_cache(blocks: int, pieces: int, block_size: int, dtype: torch.dtype, e: int | None = None) -> torch.Tensor:
    return random_bits((blocks, pieces, block_size, e or 32 // dtype.itemsize), dtype, 5)


PAGED_RULES: list[tuple[str, Callable[[], Case], Mutation, type, tuple[str, ...]]] = [
    ("kv_cache_cfg bad string", paged_base, set_kwarg("kv_cache_cfg", "nhd"), ValueError, ("kv_cache_cfg", "'nhd'")),
    ("kv_cache_cfg bad int", paged_base, set_kwarg("kv_cache_cfg", 2), ValueError, ("kv_cache_cfg", "got 2")),
    ("kv_cache_cfg float", paged_base, set_kwarg("kv_cache_cfg", 1.0), TypeError, ("kv_cache_cfg", "float")),
    ("cumsum not bool", paged_base, set_kwarg("cumsum", 1), TypeError, ("cumsum", "bool")),
    ("key_cache not a tensor", paged_base, set_arg(0, "cache"), TypeError, ("key_cache", "str")),
    ("ND output not its cache's dtype", paged_base, set_arg(1, lambda c: c.view(torch.bfloat16)), TypeError,
     ("value.dtype must equal value_cache.dtype", "bfloat16")),
    ("ND rank", paged_base, set_arg(0, lambda c: c[0]), ValueError, ("key_cache", "4-D ND cache")),
    ("ND num_blocks differ", paged_base, set_arg(1, lambda c: c[:4]), ValueError, ("value_cache.shape[0]", "num_blocks")),
    ("ND block_size differ", paged_base, set_arg(1, lambda c: c[:, :8]), ValueError, ("value_cache.shape[1]", "block_size")),
    ("ND num_heads differ", paged_base, set_arg(1, lambda c: c[:, :, :1]), ValueError, ("value_cache.shape[2]", "num_heads")),
    ("ND row not 32-byte aligned", paged_base, set_arg(0, lambda c: c[..., :4]), ValueError,
     ("key_cache", "num_heads * head_size = 8", "16 bytes")),
    ("NZ cumsum", lambda: paged_base(NZ), set_kwarg("cumsum", True), ValueError, ("cumsum", "NZ")),
    ("NZ seq_starts", lambda: paged_base(NZ), set_kwarg("seq_starts", torch.tensor([0, 0])), ValueError,
     ("seq_starts", "NZ")),
    ("NZ wrong E", lambda: paged_base(NZ), set_arg(0, nz_cache(8, 4, 16, torch.float16, e=8)), ValueError,
     ("key_cache.shape[3] must be E = 16",)),
    ("NZ block_size not multiple of 16", lambda: paged_base(NZ),
     lambda c: (set_arg(0, nz_cache(8, 2, 8, torch.float16))(c), set_arg(1, nz_cache(8, 2, 8, torch.float16))(c)),
     ValueError, ("block_size", "= 8", "multiple of 16")),
    ("NZ row too large", lambda: paged_base(NZ), set_arg(1, nz_cache(8, 4609, 16, torch.float16)), ValueError,
     ("value_cache", "147456", "147488")),
    ("NZ float64 values", lambda: paged_base(NZ), set_arg(1, torch.zeros(8, 8, 16, 4, dtype=torch.float64)), TypeError,
     ("value_cache must have dtype", "float8_e5m2", "got float64")),
    ("ND bool keys", paged_base, set_arg(0, torch.zeros(8, 16, 2, 16, dtype=torch.bool)), TypeError,
     ("key_cache must have dtype", "got bool")),
    ("ND complex values", paged_base, set_arg(1, torch.zeros(8, 16, 2, 16, dtype=torch.complex64)), TypeError,
     ("value_cache must have dtype", "got complex64")),
    ("ND int64 keys", paged_base, set_arg(0, torch.zeros(8, 16, 2, 16, dtype=torch.int64)), TypeError,
     ("key_cache must have dtype", "got int64")),
    ("block_table rank", paged_base, set_arg(2, lambda t: t.reshape(-1)), ValueError, ("block_table", "2-D")),
    ("context_lens length", paged_base, set_arg(3, torch.tensor([20, 5, 1], dtype=I32)), ValueError,
     ("context_lens", "2 entries", "got 3")),
    ("context_lens negative", paged_base, set_arg(3, torch.tensor([20, -5], dtype=I32)), ValueError,
     ("context_lens[1] = -5", "negative")),
    ("cumsum length", paged_base, set_kwarg("cumsum", True), ValueError, ("context_lens", "3 entries", "cumsum")),
    ("cumsum decreasing", paged_base,
     lambda c: (set_kwarg("cumsum", True)(c), set_arg(3, torch.tensor([0, 20, 19], dtype=I32))(c)), ValueError,
     ("context_lens[2] = 19", "context_lens[1] = 20", "non-decreasing")),
    ("cumsum negative start", paged_base,
     lambda c: (set_kwarg("cumsum", True)(c), set_arg(3, torch.tensor([-1, 20, 25], dtype=I32))(c)), ValueError,
     ("context_lens[0] = -1",)),
    ("seq_starts length", paged_base, set_kwarg("seq_starts", torch.tensor([0], dtype=I32)), ValueError,
     ("seq_starts", "2 entries")),
    ("seq_starts negative", paged_base, set_kwarg("seq_starts", torch.tensor([0, -16], dtype=I32)), ValueError,
     ("seq_starts[1] = -16", "negative")),
    ("block table too narrow", paged_base, set_arg(3, torch.tensor([49, 5], dtype=I32)), ValueError,
     ("block_table has 3 columns", "batch entry 0 needs columns 0..3")),
    ("block table too narrow from seq_starts", paged_base, set_kwarg("seq_starts", torch.tensor([0, 48], dtype=I32)),
     ValueError, ("batch entry 1 needs columns 3..3",)),
    ("block id too large", paged_base, lambda c: c.args[2].__setitem__((0, 1), 8), ValueError,
     ("block_table[0, 1] = 8", "[0, 8)")),
    ("block id negative", paged_base, lambda c: c.args[2].__setitem__((1, 0), -1), ValueError,
     ("block_table[1, 0] = -1",)),
    ("key dtype", paged_base, set_kwarg("key", lambda k: k.view(torch.bfloat16)), TypeError, ("key.dtype",)),
    ("key too few rows", paged_base, set_kwarg("key", lambda k: k[:24]), ValueError, ("key", "rows >= 25", "(24, 2, 16)")),
    ("value trailing shape", paged_base, set_kwarg("value", lambda v: v[:, :1]), ValueError, ("value", "[rows >= 25, 2, 16]")),
    ("NZ key given in ND shape", lambda: paged_base(NZ), set_kwarg("key", lambda k: k.reshape(-1, 2, 16)), ValueError,
     ("key", "[rows >= 25, 32]")),
    ("key requires grad", paged_base, set_kwarg("key", lambda k: k.clone().requires_grad_()), ValueError,
     ("key requires grad",)),
]


@pytest.mark.parametrize("name, base, mutate, error, fragments", PAGED_RULES, ids=[r[0] for r in PAGED_RULES])
def test_paged_rule(name: str, base, mutate: Mutation, error: type, fragments: tuple[str, ...]) -> None:
    case = base()
    mutate(case)
    assert_rejected(lambda: ascend_kv.paged_cache_load(*case.args, **case.kwargs), case, error, *fragments)


def test_unneeded_block_table_entries_are_ignored() -> None:
    """-1 and out-of-range ids in columns no token needs are fine (paged_case puts them there)."""
    case = paged_base(extra_columns=3)
    assert (case.args[2][:, 2:] < 0).any() or (case.args[2][:, 2:] >= 8).any()
    ascend_kv.paged_cache_load(*case.args, **case.kwargs)


def test_a_call_reads_the_blocks_its_tokens_need_in_output_order_and_no_other_entry() -> None:
    """Entry 0 reads columns 1..2 (seq_starts 4, block_size 4, 6 tokens: blocks 1, 2), entry 1
    nothing, entry 2 columns 0..1 (5 tokens: blocks 7, 6); every other entry of the block table,
    however far out of range, is never read."""
    cache = random_bits((10, 4, 1, 16), torch.float16, 30)
    table = torch.tensor([[99, 1, 2, -1], [2**31 - 1, -(2**31), -1, 10], [7, 6, -7, 12]], dtype=torch.int32)
    key, value = ascend_kv.paged_cache_load(cache, cache.clone(), table, torch.tensor([6, 0, 5]), kv_cache_cfg=ND,
                                            seq_starts=torch.tensor([4, 0, 0]))
    want = torch.cat([cache[1], cache[2, :2], cache[7], cache[6, :1]])
    assert bits_equal(key, want) and bits_equal(value, want)


def test_operation_param_checks() -> None:
    with pytest.raises(TypeError, match="param must be a PagedCacheLoadParam"):
        ascend_kv.PagedCacheLoadOperation({"kv_cache_cfg": 1})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kv_cache_cfg"):
        ascend_kv.PagedCacheLoadOperation(ascend_kv.PagedCacheLoadParam(kv_cache_cfg=3))
    with pytest.raises(TypeError, match="param must be a KVCacheParam"):
        ascend_kv.KVCacheOperation(3)  # type: ignore[arg-type]
    case = paged_base()
    op = ascend_kv.PagedCacheLoadOperation(ascend_kv.PagedCacheLoadParam(kv_cache_cfg=ND, has_seq_starts=True))
    assert_rejected(lambda: op(*case.args, case.kwargs["key"], case.kwargs["value"]), case, ValueError,
                    "seq_starts", "has_seq_starts")


def test_first_offending_entry_is_named() -> None:
    case = kv_cache_case(torch.int8, [1] * 6, [1, 2, 99, 3, 98, 4], hidden=32)
    assert_rejected(lambda: ascend_kv.kv_cache(*case.args), case, ValueError, "token_offset[2] = 99")


def test_numpy_integer_layer_id_is_accepted() -> None:
    case = kv_base()
    args = list(case.args)
    args[1] = np.int64(1)
    reference_args = list(case.cloned().args)
    reference_args[1] = 1
    expected = reference.kv_cache(*reference_args)
    before = args[2].clone()
    assert ascend_kv.kv_cache(*args) is args[2]
    assert bits_equal(args[2], expected)
    assert bits_equal(args[2][0], before[0]) and not bits_equal(args[2][1], before[1])  # layer 1 written, only


def test_mixed_devices_name_the_odd_argument() -> None:
    """A data tensor on another device than the others is a ValueError naming both devices, an index
    tensor on a device that is neither the host nor the data's too, and nothing is written (the
    fake NPU of tests/fake_npu is the second device)."""
    import fake_npu

    fake_npu.install()
    npu = torch.device("npu", 0)
    case = kv_base()
    new_kv, layer, past, offsets, lens = case.args
    assert_rejected(lambda: ascend_kv.kv_cache(new_kv.to(npu), layer, past, offsets, lens), case, ValueError,
                    "new_kv is on npu:0 but past is on cpu: all tensor arguments must be on one device")
    paged = paged_base()
    for name in ("key", "value"):
        moved = dict(paged.kwargs, **{name: paged.kwargs[name].to(npu)})
        assert_rejected(lambda moved=moved: ascend_kv.paged_cache_load(*paged.args, **moved), paged, ValueError,
                        f"{name} is on npu:0 but key_cache is on cpu")
    on_npu = [t.to(npu) for t in (new_kv, past)]
    other = torch.device("npu", 1)
    with pytest.raises(ValueError, match=re.escape("seq_len is on npu:1, but index tensors must be on the host (cpu) "
                                                   "or on the data's device npu:0")):
        ascend_kv.kv_cache(on_npu[0], layer, on_npu[1], offsets, lens.to(other))
    assert bits_equal(on_npu[1].cpu(), past)


@st.composite
def views_of_one_buffer(draw: st.DrawFn) -> tuple[torch.Tensor, torch.Tensor]:
    """Two strided views ``[rows, columns]`` (or ``[rows, 1, columns]``) of one ``[n, w]`` int32 buffer
    (a cache element type) whose elements hold their own index."""
    n, w = draw(st.integers(1, 8)), draw(st.integers(1, 12))
    buffer = torch.arange(n * w, dtype=torch.int32).view(n, w)
    views = []
    for _ in range(2):
        r0, c0 = draw(st.integers(0, n - 1)), draw(st.integers(0, w - 1))
        view = buffer[r0 : draw(st.integers(r0 + 1, n)) : draw(st.integers(1, 3)),
                      c0 : draw(st.integers(c0 + 1, w)) : draw(st.integers(1, 3))]
        views.append(view.unsqueeze(1) if draw(st.booleans()) else view)
    return views[0], views[1]


def empty_copies() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.zeros(0, dtype=torch.int32), torch.zeros(0, dtype=torch.int32), torch.zeros(0, dtype=torch.int32)


@given(views=views_of_one_buffer())
def test_memory_sharing_is_never_missed(views: tuple[torch.Tensor, torch.Tensor]) -> None:
    """Any two views that share an element are refused as two written tensors (block_copy's two
    caches, as ``[1, ...]`` caches of one block), in either order, and nothing is written; unless
    they are the same view (address, dtype, shape, strides), which is one cache, copied once."""
    a, b = views
    same_view = a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride()
    if same_view:
        ascend_kv.block_copy(a[None], b[None], *empty_copies())
    elif set(a.flatten().tolist()) & set(b.flatten().tolist()):
        buffer = a._base if a._base is not None else a
        before = buffer.clone()
        for key_cache, value_cache in ((a[None], b[None]), (b[None], a[None])):
            with pytest.raises(ValueError, match="value_cache shares memory with key_cache"):
                ascend_kv.block_copy(key_cache, value_cache, *empty_copies())
        assert bits_equal(buffer, before)


@given(rows=st.integers(1, 8), width=st.integers(2, 12), data=st.data())
def test_column_ranges_of_one_buffer_are_apart(rows: int, width: int, data: st.DataObject) -> None:
    """Two disjoint column ranges of one ``[rows, width]`` buffer (interleaved rows) share no memory:
    accepted as block_copy's two caches of ``rows`` blocks, in either order, and copied exactly."""
    buffer = random_bits((rows, width), torch.float16, data.draw(st.integers(0, 99)))
    split = data.draw(st.integers(1, width - 1))
    left, right = buffer[:, data.draw(st.integers(0, split - 1)) : split], buffer[:, split:]
    copies = [torch.tensor(v, dtype=torch.int32) for v in ([0], [rows - 1], [1])] if rows > 1 else empty_copies()
    for key_cache, value_cache in ((left, right), (right, left)):
        expected = buffer.clone()
        reference.block_copy(*(expected.as_strided(t.shape, t.stride(), t.storage_offset()) for t in
                               (key_cache, value_cache)), *copies)
        ascend_kv.block_copy(key_cache, value_cache, *copies)
        assert bits_equal(buffer, expected)


@given(views=st.integers(0, 3), data=st.data())
def test_column_slices_of_higher_rank_buffers_are_apart(views: int, data: st.DataObject) -> None:
    """Column ranges of one ``[nb, bs, h, w]`` buffer (MLA's 512 + 64 split) share no byte, at any
    rank: accepted as two caches; one column more on either side shares one: refused, nothing written."""
    shape = tuple(data.draw(st.integers(1, 4)) for _ in range(3))
    width = data.draw(st.integers(2, 12))
    buffer = random_bits((*shape, width), torch.float16, views)
    split = data.draw(st.integers(1, width - 1))
    left, right = buffer[..., :split], buffer[..., split:]
    ascend_kv.block_copy(left, right, *empty_copies())
    ascend_kv.block_copy(right, left, *empty_copies())
    before = buffer.clone()
    for key_cache, value_cache in ((buffer[..., : split + 1], right), (right, buffer[..., : split + 1]),
                                   (left, buffer[..., split - 1 :])):
        with pytest.raises(ValueError, match="value_cache shares memory with key_cache"):
            ascend_kv.block_copy(key_cache, value_cache, *empty_copies())
    assert bits_equal(buffer, before)


def _mla_buffer() -> torch.Tensor:
    return torch.zeros(4, 16, 1, 576, dtype=torch.float16)


def test_reshape_and_cache_writes_k_and_v_as_column_slices_of_one_buffer() -> None:
    """MLA's ``[nb, bs, 1, 576]`` buffer split 512 + 64 into key_cache and value_cache (the issue's repro)."""
    buf = _mla_buffer()
    key, value = torch.ones(2, 1, 512, dtype=torch.float16), torch.full((2, 1, 64), 2.0, dtype=torch.float16)
    ascend_kv.reshape_and_cache(key, value, buf[..., :512], buf[..., 512:], torch.tensor([0, 5]))
    want = _mla_buffer()
    want[0, [0, 5], :, :512], want[0, [0, 5], :, 512:] = 1.0, 2.0
    assert bits_equal(buf, want)


def test_reshape_and_cache_rejects_column_slices_that_overlap_by_one_column() -> None:
    buf = _mla_buffer()
    key, value = torch.ones(2, 1, 512, dtype=torch.float16), torch.ones(2, 1, 65, dtype=torch.float16)
    with pytest.raises(ValueError, match="value_cache shares memory with key_cache"):
        ascend_kv.reshape_and_cache(key, value, buf[..., :512], buf[..., 511:], torch.tensor([0, 5]))
    assert not buf.any()


def test_paged_cache_load_reads_and_writes_column_slices_of_one_buffer() -> None:
    """Caches as column slices of one buffer, outputs as column slices of another: accepted, exact;
    outputs overlapping by one column: refused, nothing written."""
    cache = random_bits((4, 16, 1, 576), torch.float16, seed=21)
    out = torch.zeros(20, 1, 576, dtype=torch.float16)
    table, lens = torch.tensor([[2, 0]], dtype=torch.int32), torch.tensor([20], dtype=torch.int32)
    ascend_kv.paged_cache_load(cache[..., :512], cache[..., 512:], table, lens, kv_cache_cfg=ND,
                               key=out[..., :512], value=out[..., 512:])
    assert bits_equal(out, torch.cat([cache[2], cache[0]])[:20])
    overlapping = torch.zeros(20, 1, 577, dtype=torch.float16)
    with pytest.raises(ValueError, match="value shares memory with key"):
        ascend_kv.paged_cache_load(cache[..., :512], cache[..., 512:], table, lens, kv_cache_cfg=ND,
                                   key=overlapping[..., :512], value=overlapping[..., 511:575])
    assert not overlapping.any()


def test_kv_cache_reads_new_kv_from_columns_beside_past() -> None:
    """new_kv in columns of a buffer that past's rows do not reach is not an alias of past."""
    buf = torch.zeros(1, 1, 8, 128, dtype=torch.float16)
    past, new_kv = buf[..., :64], buf[0, 0, :2, 64:]
    new_kv.fill_(3.0)
    ascend_kv.kv_cache(new_kv, 0, past, torch.tensor([2]), torch.tensor([2]))
    assert bits_equal(past[0, 0, :2], new_kv) and not past[0, 0, 2:].any()


def test_a_layout_enum_of_the_other_operation_is_a_type_error() -> None:
    """The two layout enums number ND and NZ differently: a member of the wrong one is never read as an int."""
    cache = torch.zeros(4, 16, 2, 16, dtype=torch.float16)
    wrong = ascend_kv.ReshapeAndCacheParam.KvCacheCfg.K_CACHE_V_CACHE  # ND, value 0: NZ for the load
    with pytest.raises(TypeError, match=r"got ReshapeAndCacheParam.KvCacheCfg.K_CACHE_V_CACHE, a member of another "
                                        r"enum .*pass KvCacheCfg.K_CACHE_V_CACHE_ND"):
        ascend_kv.paged_cache_load(cache, cache, torch.tensor([[0]]), torch.tensor([3]), kv_cache_cfg=wrong)
    key = torch.zeros(1, 2, 16, dtype=torch.float16)
    with pytest.raises(TypeError, match=r"got KvCacheCfg.K_CACHE_V_CACHE_NZ, a member of another enum .*pass "
                                        r"ReshapeAndCacheParam.KvCacheCfg.K_CACHE_V_CACHE_NZ"):
        ascend_kv.reshape_and_cache(key, key, cache, cache.clone(), torch.tensor([1]),
                                    kv_cache_cfg=ascend_kv.KvCacheCfg.K_CACHE_V_CACHE_NZ)
    assert not cache.any()


def test_an_nz_read_of_valid_nd_caches_says_to_pass_nd() -> None:
    """paged_cache_load reads NZ by default (ATB's), reshape_and_cache writes ND by default (ATB's):
    an NZ shape error on caches that are valid ND names kv_cache_cfg='nd'; one that is no ND cache does not."""
    cache = torch.zeros(4, 16, 2, 16, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"block_size\) = 2 must be a multiple of 16 in NZ\. The caches are valid ND "
                                         r"caches .*: pass kv_cache_cfg='nd'"):
        ascend_kv.paged_cache_load(cache, cache, torch.tensor([[0]]), torch.tensor([3]))
    not_nd = torch.zeros(4, 16, 1, 8, dtype=torch.float16)        # 16-byte rows: no ND cache either
    with pytest.raises(ValueError) as error:
        ascend_kv.paged_cache_load(not_nd, not_nd, torch.tensor([[0]]), torch.tensor([3]))
    assert "kv_cache_cfg='nd'" not in str(error.value)


# ----------------------------------------------------------------------------- what is written: its own memory, writable, plain


def test_outputs_whose_elements_share_memory_are_rejected_before_any_write() -> None:
    """An expand() view as past/key/value would make one write overwrite another: ValueError."""
    new_kv = torch.ones(2, 16, dtype=torch.float16)
    past = torch.zeros(1, 1, 4, 16, dtype=torch.float16).expand(1, 2, 4, 16)
    with pytest.raises(ValueError, match=r"past is written in place.*strides \(64, 0, 16, 1\)"):
        ascend_kv.kv_cache(new_kv, 0, past, torch.tensor([1, 1]), torch.tensor([1, 1]))
    assert not past.any()
    cache = torch.ones(2, 16, 1, 16, dtype=torch.float16)
    key = torch.zeros(1, 1, 16, dtype=torch.float16).expand(16, 1, 16)
    for name in ("key", "value"):
        outputs = {"key": torch.zeros(16, 1, 16, dtype=torch.float16), "value": torch.zeros(16, 1, 16, dtype=torch.float16)}
        outputs[name] = key
        with pytest.raises(ValueError, match=f"{name} is written in place"):
            ascend_kv.paged_cache_load(cache, cache, torch.tensor([[0]]), torch.tensor([16]), kv_cache_cfg=ND, **outputs)
        assert not any(t.any() for t in outputs.values())


def test_direct_operator_calls_refuse_shared_elements_and_index_tensors_of_another_rank() -> None:
    """torch.ops.ascend_kv.* check what the public functions check: a written tensor whose elements
    share memory, and an index tensor with the right entry count but the wrong rank, are ValueErrors
    naming the argument, and nothing is written."""
    h = torch.float16
    ops = torch.ops.ascend_kv
    cache = torch.ones(2, 16, 1, 16, dtype=h)
    shared_rows = torch.zeros(1, 1, 16, dtype=h).expand(16, 1, 16)
    with pytest.raises(ValueError, match="key is written in place"):
        ops.paged_cache_load.into(cache, cache, torch.tensor([[0]]), torch.tensor([16]), kv_cache_cfg=1,
                                  key=shared_rows, value=torch.zeros(16, 1, 16, dtype=h))
    with pytest.raises(ValueError, match=re.escape("context_lens must be a 1-D tensor [batch], got shape (1, 1)")):
        ops.paged_cache_load(cache, cache, torch.tensor([[0]]), torch.tensor([[16]]), kv_cache_cfg=1)
    shared_blocks = torch.zeros(1, 16, 1, 16, dtype=h).expand(2, 16, 1, 16)
    for call in (ops.reshape_and_cache, ascend_kv.reshape_and_cache):
        with pytest.raises(ValueError, match="key_cache is written in place"):
            call(torch.ones(2, 1, 16, dtype=h), None, shared_blocks, None, torch.tensor([0, 17]))
        assert not shared_blocks.any()
    with pytest.raises(ValueError, match=re.escape("slot_mapping must be [n] flat slots or [n, 2] (block, offset) "
                                                   "pairs, got shape (1, 3)")):
        ops.reshape_and_cache(torch.ones(2, 1, 16, dtype=h), None, torch.zeros(2, 16, 1, 16, dtype=h), None,
                              torch.tensor([[0, 1, 17]]))
    with pytest.raises(ValueError, match="past is written in place"):
        ops.kv_cache(torch.ones(2, 16, dtype=h), 0, torch.zeros(1, 1, 4, 16, dtype=h).expand(1, 2, 4, 16),
                     torch.tensor([1, 1]), torch.tensor([1, 1]))
    with pytest.raises(ValueError, match=re.escape("token_offset must be a 1-D tensor [batch], got shape (1, 2)")):
        ops.kv_cache(torch.ones(2, 16, dtype=h), 0, torch.zeros(1, 2, 4, 16, dtype=h), torch.tensor([[1, 1]]),
                     torch.tensor([1, 1]))


def test_outputs_sharing_memory_with_what_the_call_reads_are_rejected() -> None:
    """Reading a tensor while writing over it has no single answer (the reference and a vectorized copy differ)."""
    past = random_bits((1, 1, 8, 64), torch.float16, seed=13)
    error = judge_kv_cache(past[0, 0, 0:4], 0, past, torch.tensor([5]), torch.tensor([4]))
    assert isinstance(error, ValueError) and str(error).startswith("past shares memory with new_kv")
    cache = random_bits((4, 16, 1, 64), torch.float16, seed=14)
    other = torch.zeros(64, 1, 64, dtype=torch.float16)
    for outputs in ({"key": cache.view(64, 1, 64), "value": other}, {"key": other, "value": cache[2:].view(32, 1, 64)}):
        error = judge_paged_cache_load(cache, cache.clone(), torch.tensor([[1, 0]]), torch.tensor([20]),
                                       kv_cache_cfg=ND, **outputs)
        assert isinstance(error, ValueError) and "shares memory with key_cache" in str(error)


def test_outputs_sharing_memory_with_each_other_are_rejected() -> None:
    """key and value are both written: if they meet, which write lands is undefined."""
    cache = random_bits((4, 16, 1, 64), torch.float16, seed=21)
    load = (cache, cache.clone(), torch.tensor([[1, 0], [2, 3]]), torch.tensor([20, 12]))
    buffer = torch.zeros(64, 1, 64, dtype=torch.float16)
    for key, value in ((buffer[:32], buffer[:32]), (buffer[:32], buffer[16:48]), (buffer[:32], buffer[31:63])):
        error = judge_paged_cache_load(*load, kv_cache_cfg=ND, key=key, value=value)
        assert isinstance(error, ValueError) and str(error).startswith("value shares memory with key")


def test_outputs_interleaved_in_one_buffer_are_accepted() -> None:
    """Rows of one buffer split between key and value share no byte: accepted, and bit-exact."""
    cache = random_bits((4, 16, 1, 64), torch.float16, seed=22)
    load = (cache, cache.clone(), torch.tensor([[1, 0], [2, 3]]), torch.tensor([20, 12]))
    pairs = torch.zeros(32, 2, 1, 64, dtype=torch.float16)                          # [tokens, K or V, heads, head]
    assert judge_paged_cache_load(*load, kv_cache_cfg=ND, key=pairs[:, 0], value=pairs[:, 1]) is None
    mla = random_bits((4, 16, 1, 512), torch.float16, seed=23), random_bits((4, 16, 1, 64), torch.float16, seed=24)
    rows = torch.zeros(32, 1, 576, dtype=torch.float16)                             # [tokens, 1, K 512 + V 64]
    assert judge_paged_cache_load(*mla, *load[2:], kv_cache_cfg=ND, key=rows[..., :512], value=rows[..., 512:]) is None


@pytest.mark.parametrize("strided", [False, True])
def test_inference_tensors_are_written_inside_inference_mode_only(strided: bool) -> None:
    """Outside inference mode PyTorch forbids in-place updates of inference tensors: a ValueError on every path."""
    with torch.inference_mode():
        past = random_bits((2, 3, 16, 128 if strided else 64), torch.float16, seed=15)
        key = random_bits((20, 2, 32 if strided else 16), torch.float16, seed=16)
    past, key = (past[..., ::2], key[..., ::2]) if strided else (past, key)
    new_kv, cache = random_bits((3, 64), torch.float16, seed=17), random_bits((4, 16, 2, 16), torch.float16, seed=18)
    args = (new_kv, 0, past, torch.tensor([1, 2, 3]), torch.tensor([1, 1, 1]))
    load = (cache, cache, torch.tensor([[0, 1]]), torch.tensor([20]))
    outputs = {"kv_cache_cfg": ND, "key": key, "value": torch.zeros(20, 2, 16, dtype=torch.float16)}
    for error, name in ((judge_kv_cache(*args), "past"), (judge_paged_cache_load(*load, **outputs), "key")):
        assert isinstance(error, ValueError) and str(error).startswith(f"{name} was made under torch.inference_mode()")
    with torch.inference_mode():
        assert judge_kv_cache(*args) is None
        assert judge_paged_cache_load(*load, **outputs) is None


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_lazily_negated_views_are_rejected() -> None:
    """A view whose memory holds the negated values (complex.conj().imag) would be copied as raw memory."""
    values = random_bits((3, 64), torch.float16, seed=20)
    negated = torch._neg_view(-values)                                 # equal to values, memory holds -values
    past = torch.zeros(1, 3, 4, 64, dtype=torch.float16)
    error = judge_kv_cache(negated, 0, past, torch.tensor([1, 1, 1]), torch.tensor([1, 1, 1]))
    assert isinstance(error, TypeError) and str(error).startswith("new_kv is a lazily negated view")
    error = judge_kv_cache(values, 0, torch._neg_view(past), torch.tensor([1, 1, 1]), torch.tensor([1, 1, 1]))
    assert isinstance(error, TypeError) and str(error).startswith("past is a lazily negated view")
    imaginary = torch.zeros(3, 64, dtype=torch.complex32).conj().imag  # the public way to get one
    assert imaginary.dtype == torch.float16 and imaginary.is_neg()
    error = judge_kv_cache(imaginary, 0, past, torch.tensor([1, 1, 1]), torch.tensor([1, 1, 1]))
    assert isinstance(error, TypeError)


# ----------------------------------------------------------------------------- each argument, each defect


def base_case(op: str) -> Case:
    if op == "kv_cache":
        new_kv, _, past, offsets, lens = kv_cache_case(torch.float16, [2, 0, 3], [5, 0, 16]).args
        return Case((new_kv, torch.tensor(1), past, offsets, lens))
    return paged_case(ND, [20, 3], seq_starts=[16, 0], give_outputs=True, extra_rows=2)


TENSOR_ARGUMENTS = [("kv_cache", n) for n in KV_ARGS] + [
    ("paged_cache_load", n) for n in ("key_cache", "value_cache", "block_table", "context_lens", "seq_starts",
                                      "key", "value")]


#: The other device each argument is compared with (the first tensor argument of its call checked before it).
DEVICE_ERRORS = {
    ("kv_cache", "past"): "new_kv is on cpu but past is on meta",
    ("paged_cache_load", "key_cache"): "value_cache is on cpu but key_cache is on meta",
    ("paged_cache_load", "key"): "key is on meta but key_cache is on cpu",
    ("paged_cache_load", "value"): "value is on meta but key_cache is on cpu",
}


@pytest.mark.parametrize(("op", "name"), TENSOR_ARGUMENTS)
def test_a_tensor_on_the_wrong_device_is_an_error_naming_it(op: str, name: str) -> None:
    """Meta tensors stand for any other device (no second real device on a CPU-only machine): an output on
    another device is a ValueError naming both devices, an input that holds no data a TypeError."""
    case = base_case(op)
    error = judge(op, with_argument(op, case, name, argument(op, case, name).to("meta")))
    if (op, name) in DEVICE_ERRORS:
        assert isinstance(error, ValueError) and str(error).startswith(DEVICE_ERRORS[op, name]), error
    else:
        assert isinstance(error, TypeError) and str(error) == f"{name} must hold data, got a meta tensor", error


#: What each tensor argument's dtype must be, as its error says it.
DTYPE_RULES = {
    **{name: f"{name} must have dtype {dtype_names(CACHE_DTYPES)}" for name in ("new_kv", "past", "key_cache",
                                                                               "value_cache")},
    **{name: f"{name} must have dtype int32 or int64" for name in ("token_offset", "seq_len", "block_table",
                                                                   "context_lens", "seq_starts")},
    "layer_id": "layer_id must be an int or an integer tensor",
    "key": "key.dtype must equal key_cache.dtype", "value": "value.dtype must equal value_cache.dtype",
}

#: A cache dtype that is not its partner's: the error of the pair (a tensor and the cache it is copied to or from).
PAIR_RULES = {"new_kv": "new_kv.dtype must equal past.dtype", "past": "new_kv.dtype must equal past.dtype",
              "key_cache": "key.dtype must equal key_cache.dtype", "value_cache": "value.dtype must equal value_cache.dtype"}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.uint8, torch.int16, torch.bool,
                                   torch.complex64, torch.float16, torch.int32, torch.int64, torch.float8_e5m2])
@pytest.mark.parametrize(("op", "name"), TENSOR_ARGUMENTS)
def test_a_wrong_dtype_is_a_type_error_naming_it(op: str, name: str, dtype: torch.dtype) -> None:
    case = base_case(op)
    given = argument(op, case, name)
    error = judge(op, with_argument(op, case, name, given.to(dtype)))
    if dtype == given.dtype:
        assert error is None
    elif name == "layer_id" and not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool):
        assert error is None  # any integer tensor holds a layer number
    elif {dtype, given.dtype} <= {torch.int32, torch.int64}:
        assert error is None
    elif name in PAIR_RULES and dtype in CACHE_DTYPES:  # an element type the operation takes, not its partner's
        assert isinstance(error, TypeError) and str(error).startswith(PAIR_RULES[name]), error
    else:
        assert isinstance(error, TypeError) and str(error).startswith(DTYPE_RULES[name]), error
        assert str(dtype).removeprefix("torch.") in str(error).split("got")[-1], error  # the dtype given


@pytest.mark.parametrize(("op", "name"), TENSOR_ARGUMENTS)
def test_a_wrong_rank_is_a_value_error_naming_it(op: str, name: str) -> None:
    case = base_case(op)
    error = judge(op, with_argument(op, case, name, argument(op, case, name)[None]))
    if name == "layer_id":
        assert error is None  # a one-element tensor of any rank
    else:
        assert isinstance(error, ValueError) and name in str(error)


@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize(("op", "name"), TENSOR_ARGUMENTS)
def test_an_empty_tensor_is_handled_or_a_named_error(op: str, name: str, dim: int) -> None:
    case = base_case(op)
    given = argument(op, case, name)
    empty = given.narrow(dim, 0, 0) if given.dim() else given.reshape(-1)[:0]
    judge(op, with_argument(op, case, name, empty))


def test_empty_calls_are_valid_and_write_nothing() -> None:
    past = random_bits((2, 0, 16, 64), torch.float16, seed=9)
    none = torch.zeros(0, dtype=torch.int32)
    assert judge_kv_cache(torch.zeros(0, 64, dtype=torch.float16), 0, past, none, none) is None
    past = random_bits((2, 3, 16, 64), torch.float16, seed=9)
    assert judge_kv_cache(torch.zeros(0, 64, dtype=torch.float16), 1, past, torch.tensor([0, 16, 3]),
                          torch.zeros(3, dtype=torch.int64)) is None
    cache = random_bits((0, 16, 1, 16), torch.float16, seed=10)
    assert judge_paged_cache_load(cache, cache, torch.zeros(2, 0, dtype=torch.int32), torch.zeros(2, dtype=torch.int32),
                                  kv_cache_cfg=ND) is None


# ----------------------------------------------------------------------------- the extent of the output


def test_cumsum_with_no_batch_entries_still_has_context_lens_last_rows() -> None:
    """cumsum mode: the output has context_lens[-1] rows even when block_table has no rows."""
    cache = torch.zeros(2, 16, 1, 16, dtype=torch.float16)
    table, context_lens = torch.zeros(0, 0, dtype=torch.int32), torch.tensor([3], dtype=torch.int32)
    key, value = ascend_kv.paged_cache_load(cache, cache, table, context_lens, kv_cache_cfg=ND, cumsum=True)
    expected = reference.paged_cache_load(cache, cache, table, context_lens, kv_cache_cfg=ND, cumsum=True)
    assert key.shape == (3, 1, 16) and bits_equal(key, expected[0]) and bits_equal(value, expected[1])


def test_an_output_too_big_to_allocate_is_a_value_error_naming_context_lens() -> None:
    """cumsum mode lets a 4-token call ask for 2**31 - 1 rows: 256 TiB here, more than any address space."""
    cache = random_bits((2, 16, 256, 256), torch.float16, seed=19)
    error = judge_paged_cache_load(cache, cache, torch.tensor([[1]]), torch.tensor([2**31 - 5, 2**31 - 1]),
                                   kv_cache_cfg=ND, cumsum=True)
    assert isinstance(error, ValueError) and str(error).startswith("key: the output [2147483647, 256, 256]")
    assert "context_lens" in str(error)


def test_num_tokens_must_fit_int32() -> None:
    case = paged_case(ND, [0, 0], cumsum_base=0)
    case.args = (*case.args[:3], torch.tensor([2**31 - 1, 2**31 - 1, 2**31], dtype=torch.int64))
    assert_rejected(lambda: ascend_kv.paged_cache_load(*case.args, **case.kwargs), case, ValueError, "int32")


def test_a_list_for_a_tensor_is_named_by_its_length_not_dumped() -> None:
    with pytest.raises(TypeError) as raised:
        ascend_kv.reshape_and_cache(torch.ones(2, 1, 16), None, torch.zeros(2, 16, 1, 16), None,
                                    list(range(1000)))  # type: ignore[arg-type]
    assert str(raised.value) == "slot_mapping must be a torch.Tensor, got a list of 1000 items [0, 1, 2, ...]"
    with pytest.raises(TypeError, match=r"got a tuple of 2 items \[3, 4\]$"):
        ascend_kv.reshape_and_cache(torch.ones(2, 1, 16), None, torch.zeros(2, 16, 1, 16), None, (3, 4))  # type: ignore[arg-type]


def test_an_nz_write_into_nd_caches_says_to_pass_nd() -> None:
    """As the load does: NZ caches that are not, but are valid ND caches for these tokens, get the hint."""
    key, cache = torch.ones(2, 1, 16, dtype=torch.float16), torch.zeros(4, 16, 1, 16, dtype=torch.float16)
    with pytest.raises(ValueError) as raised:
        ascend_kv.reshape_and_cache(key, key, cache, cache.clone(), torch.tensor([0, 1]), kv_cache_cfg="nz")
    assert str(raised.value) == (
        "key_cache.shape[1] * E = 256 must equal num_heads * head_size = 16 (key.shape[1] * key.shape[2]). The caches "
        "are valid ND caches [num_blocks, block_size, num_heads, head_size]: pass kv_cache_cfg='nd' (or make NZ caches "
        "[num_blocks, T // E, block_size, E] with ascend_kv.nd_to_nz)")
    assert not cache.any()
    with pytest.raises(ValueError) as raised:  # neither layout: the NZ error alone
        ascend_kv.reshape_and_cache(key, key, cache[:, :, :, :8], cache[:, :, :, :8], torch.tensor([0, 1]),
                                    kv_cache_cfg="nz")
    assert "kv_cache_cfg='nd'" not in str(raised.value)
