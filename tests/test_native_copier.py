"""The host paths' copy primitive (cpu_fallback/copy.cpp), through the public functions.

The Python fallback had a compiled run copier (``cpu_fallback/_rowcopy.c``) with streaming stores;
its tests drove it directly. The C++ host paths copy every layout with one primitive: pieces
addressed through byte strides, dims contiguous on both sides merged into one chunk, large calls
split over torch's intra-op threads (``at::parallel_for``), and stores streamed past the CPU
caches (x86-64, 32-byte chunks to 16-byte aligned destinations) when a call writes at least
1 MiB, or 6 MiB for a paged load (its outputs are read next). What the copier tests held is held
here, each call compared byte for byte with :mod:`ascend_kv.tools.reference` over the whole
destination buffer (a write outside the rows fails):

- the layouts it took (ND token rows, NZ 32-byte pieces, kv_cache runs, cache rows, blocks) with
  destinations at every offset and row padding (16-byte aligned or not), every element width;
- runs of zero items, and calls writing nothing;
- large calls (several MB: split over threads, and streamed) with one thread and with two, at the
  streaming thresholds and on both sides of them, aligned and misaligned.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from cases import ANY_DTYPE_PAIRS, ND, NZ, bits_equal, random_bits
from hypothesis import given
from hypothesis import strategies as st

import ascend_kv
from ascend_kv.operators.library import cache_dtypes
from ascend_kv.tools import reference

CACHE_DTYPES = cache_dtypes()
#: Where a destination starts, in bytes from a 64-byte aligned allocation (rounded to whole
#: elements): 1 or 2 is not 16-byte aligned.
OFFSETS = st.sampled_from([0, 2, 16])
#: Bytes after each destination row: 8 makes the row step not a multiple of 16.
PADDINGS = st.sampled_from([0, 8, 32])
MIB = 1 << 20


@pytest.fixture(autouse=True)
def on_fallback() -> Iterator[None]:
    with ascend_kv.use_backend("fallback"):
        yield


@pytest.fixture(params=[1, 2], ids=["1 thread", "2 threads"])
def threads(request: pytest.FixtureRequest) -> Iterator[int]:
    """torch's intra-op threads for the test (the host paths split large calls over them)."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield int(request.param)
    torch.set_num_threads(before)


def placed(shape: tuple[int, ...], dtype: torch.dtype, offset: int, padding: int,
           seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(buffer, view)``: ``view`` of ``shape`` inside a 1-D buffer of random bits, starting
    ``offset`` bytes in, each row (the last dim) followed by ``padding`` bytes (both rounded up to
    whole elements)."""
    item = dtype.itemsize
    first, gap = -(-offset // item), -(-padding // item)
    rows, row = (int(torch.tensor(shape[:-1]).prod()) if len(shape) > 1 else 1), shape[-1]
    step = row + gap
    buffer = random_bits((first + max(rows, 1) * step,), dtype, seed)
    view = buffer[first:first + rows * step].view(rows, step)[:, :row]
    return buffer, view.unflatten(0, shape[:-1]) if len(shape) > 1 else view[0]


def twins(shape: tuple[int, ...], dtype: torch.dtype, offset: int, padding: int,
          seed: int) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """Two equal placements: one for the operation, one for the reference."""
    buffer, view = placed(shape, dtype, offset, padding, seed)
    copy = buffer.clone()
    return (buffer, view), (copy, copy.as_strided(view.shape, view.stride(), view.storage_offset()))


# ----------------------------------------------------------------------------- the layouts, every width


@st.composite
def lens_and_table(draw: st.DrawFn, num_blocks: int, block_size: int) -> tuple[list[int], torch.Tensor]:
    """Up to 4 entries of 0.. tokens (zero-item runs included) and a block table whose entries no
    token needs are garbage."""
    lens = draw(st.lists(st.integers(0, 3 * block_size), max_size=4))
    columns = max([-(-n // block_size) for n in lens], default=0) + 1
    table = torch.full((len(lens), columns), -7, dtype=torch.int32)
    for b, n in enumerate(lens):
        needed = -(-n // block_size)
        table[b, :needed] = torch.tensor(draw(st.lists(st.integers(0, num_blocks - 1), min_size=needed,
                                                       max_size=needed)), dtype=torch.int32)
        table[b, needed:] = draw(st.sampled_from([-1, num_blocks, 2**31 - 1]))
    return lens, table


@given(dtypes=st.sampled_from(ANY_DTYPE_PAIRS), blocks=st.integers(1, 4), block_size=st.integers(1, 6),
       heads=st.integers(1, 3), data=st.data(), offset=OFFSETS, padding=PADDINGS, seed=st.integers(0, 2**31))
def test_nd_token_rows_like_a_paged_load(dtypes: tuple[torch.dtype, torch.dtype], blocks: int, block_size: int,
                                         heads: int, data: st.DataObject, offset: int, padding: int,
                                         seed: int) -> None:
    """Token rows of any width to output rows at any offset and row step."""
    key_dtype, value_dtype = dtypes
    sizes = [data.draw(st.integers(1, 3)) * 32 // d.itemsize for d in dtypes]      # rows of whole 32-byte pieces
    caches = [random_bits((blocks, block_size, heads, s), d, seed + i) for i, (s, d) in enumerate(zip(sizes, dtypes))]
    lens, table = data.draw(lens_and_table(blocks, block_size))
    rows = sum(lens) + data.draw(st.integers(0, 2))
    (kb, key), (rkb, rkey) = twins((rows, heads * sizes[0]), key_dtype, offset, padding, seed + 2)
    (vb, value), (rvb, rvalue) = twins((rows, heads * sizes[1]), value_dtype, padding, offset, seed + 3)
    context_lens = torch.tensor(lens, dtype=torch.int32)
    ascend_kv.paged_cache_load(*caches, table, context_lens, kv_cache_cfg="nd", key=key.unflatten(1, (heads, -1)),
                               value=value.unflatten(1, (heads, -1)))
    reference.paged_cache_load(*caches, table, context_lens, kv_cache_cfg=ND, key=rkey.unflatten(1, (heads, -1)),
                               value=rvalue.unflatten(1, (heads, -1)))
    assert bits_equal(kb, rkb) and bits_equal(vb, rvb)


@given(dtypes=st.sampled_from(ANY_DTYPE_PAIRS), blocks=st.integers(1, 4), block_size=st.sampled_from([16, 32]),
       pieces=st.integers(1, 5), data=st.data(), offset=OFFSETS, padding=PADDINGS, seed=st.integers(0, 2**31))
def test_nz_pieces_like_a_paged_load(dtypes: tuple[torch.dtype, torch.dtype], blocks: int, block_size: int,
                                     pieces: int, data: st.DataObject, offset: int, padding: int, seed: int) -> None:
    """A token's output row is its ``pieces`` 32-byte pieces, ``block_size * 32`` bytes apart in the cache."""
    caches = [random_bits((blocks, pieces + i, block_size, 32 // d.itemsize), d, seed + i) for i, d in enumerate(dtypes)]
    lens, table = data.draw(lens_and_table(blocks, block_size))
    rows = sum(lens) + data.draw(st.integers(0, 2))
    (kb, key), (rkb, rkey) = twins((rows, pieces * 32 // dtypes[0].itemsize), dtypes[0], offset, padding, seed + 2)
    (vb, value), (rvb, rvalue) = twins((rows, (pieces + 1) * 32 // dtypes[1].itemsize), dtypes[1], offset, padding,
                                       seed + 3)
    context_lens = torch.tensor(lens, dtype=torch.int64)
    ascend_kv.paged_cache_load(*caches, table, context_lens, kv_cache_cfg="nz", key=key, value=value)
    reference.paged_cache_load(*caches, table, context_lens, kv_cache_cfg=NZ, key=rkey, value=rvalue)
    assert bits_equal(kb, rkb) and bits_equal(vb, rvb)


@given(dtype=st.sampled_from(CACHE_DTYPES), batch=st.integers(1, 4), max_seq=st.integers(1, 6),
       width=st.integers(1, 5), data=st.data(), offset=OFFSETS, padding=PADDINGS, seed=st.integers(0, 2**31))
def test_kv_cache_runs_with_a_run_step(dtype: torch.dtype, batch: int, max_seq: int, width: int, data: st.DataObject,
                                       offset: int, padding: int, seed: int) -> None:
    """Entry b's ``seq_len[b]`` rows of new_kv to past[layer, b] from ``token_offset[b] - seq_len[b]``,
    past's rows at any offset and step (a zero-length entry writes nothing)."""
    hidden = width * 32 // dtype.itemsize
    seq_len = [data.draw(st.integers(0, max_seq)) for _ in range(batch)]
    token_offset = [data.draw(st.integers(n, max_seq)) for n in seq_len]
    (pb, past), (rpb, rpast) = twins((2, batch, max_seq, hidden), dtype, offset, padding, seed)
    new_kv = random_bits((sum(seq_len), hidden), dtype, seed + 1)
    if data.draw(st.booleans()):  # new_kv's rows apart too
        new_kv = placed(tuple(new_kv.shape), dtype, 0, padding + 32, seed + 2)[1].copy_(new_kv)
    index = [torch.tensor(v, dtype=torch.int32) for v in (token_offset, seq_len)]
    ascend_kv.kv_cache(new_kv, 1, past, *index)
    reference.kv_cache(new_kv, 1, rpast, *index)
    assert bits_equal(pb, rpb)


@given(dtypes=st.sampled_from(ANY_DTYPE_PAIRS), blocks=st.integers(1, 4), block_size=st.integers(1, 5),
       heads=st.integers(1, 3), sizes=st.tuples(st.integers(1, 40), st.integers(1, 40)), data=st.data(),
       offset=OFFSETS, padding=PADDINGS, seed=st.integers(0, 2**31))
def test_cache_rows_like_reshape_and_cache(dtypes: tuple[torch.dtype, torch.dtype], blocks: int, block_size: int,
                                           heads: int, sizes: tuple[int, int], data: st.DataObject, offset: int,
                                           padding: int, seed: int) -> None:
    """ND token rows of any size (not a multiple of 32 bytes included) into cache rows at any
    offset and step; slots named twice take their last token, padding slots write nothing."""
    capacity = blocks * block_size
    slots = data.draw(st.lists(st.one_of(st.integers(0, capacity - 1), st.just(-1)), max_size=10))
    tokens = len(slots) + data.draw(st.integers(0, 2))
    caches, ref_caches, buffers, ref_buffers = [], [], [], []
    for i, (size, dtype) in enumerate(zip(sizes, dtypes)):
        (b, cache), (rb, ref) = twins((blocks, block_size, heads, size), dtype, offset, padding, seed + i)
        caches.append(cache), ref_caches.append(ref), buffers.append(b), ref_buffers.append(rb)
    key, value = (random_bits((tokens, heads, s), d, seed + 5 + i) for i, (s, d) in enumerate(zip(sizes, dtypes)))
    mapping = torch.tensor(slots, dtype=torch.int64)
    ascend_kv.reshape_and_cache(key, value, *caches, mapping)
    reference.reshape_and_cache(key, value, *ref_caches, mapping)
    assert all(bits_equal(b, r) for b, r in zip(buffers, ref_buffers))


@given(dtype=st.sampled_from(CACHE_DTYPES), blocks=st.integers(2, 6), rows=st.integers(1, 4), width=st.integers(1, 9),
       data=st.data(), offset=OFFSETS, padding=PADDINGS, seed=st.integers(0, 2**31))
def test_blocks_like_block_copy_and_swap_blocks(dtype: torch.dtype, blocks: int, rows: int, width: int,
                                                data: st.DataObject, offset: int, padding: int, seed: int) -> None:
    """Whole blocks of rows at any offset and step, within one cache and between two."""
    (cb, cache), (rcb, rcache) = twins((blocks, rows, width), dtype, offset, padding, seed)
    order = data.draw(st.permutations(range(blocks)))
    n = data.draw(st.integers(1, blocks // 2))
    src, dst = torch.tensor(order[:n]), torch.tensor(order[n:2 * n])
    ascend_kv.block_copy(cache, None, src, dst, torch.arange(1, n + 1))
    reference.block_copy(rcache, None, src, dst, torch.arange(1, n + 1))
    assert bits_equal(cb, rcb)
    (tb, target), (rtb, rtarget) = twins((blocks, rows, width), dtype, padding, offset, seed + 1)
    mapping = torch.stack([src, dst], 1)
    ascend_kv.swap_blocks(cache, target, mapping)
    reference.swap_blocks(rcache, rtarget, mapping)
    assert bits_equal(tb, rtb)


def test_calls_writing_nothing_touch_nothing() -> None:
    """Entries of no tokens (their block-table rows garbage), no slots, no copies: every byte kept."""
    cache = random_bits((4, 16, 2, 16), torch.float16, 1)
    buffer, key = placed((8, 2, 16), torch.float16, 2, 8, 2)
    before = buffer.clone()
    table = torch.tensor([[-1, 99], [2**31 - 1, -(2**31)]], dtype=torch.int32)
    ascend_kv.paged_cache_load(cache, cache, table, torch.tensor([0, 0]), kv_cache_cfg="nd", key=key, value=key.clone())
    assert bits_equal(buffer, before)
    past_buffer, past = placed((1, 3, 4, 16), torch.float16, 2, 8, 3)
    before = past_buffer.clone()
    ascend_kv.kv_cache(torch.zeros(0, 16, dtype=torch.float16), 0, past, torch.tensor([0, 4, 2]), torch.zeros(3, dtype=torch.int64))
    ascend_kv.reshape_and_cache(random_bits((3, 1, 16), torch.float16, 4), None, past[0].unsqueeze(2), None,
                                torch.tensor([-1, -1, -1]))
    ascend_kv.block_copy(past[0], None, torch.tensor([0]), torch.zeros(0, dtype=torch.int64), torch.tensor([0]))
    ascend_kv.swap_blocks(past[0], past[0].clone(), torch.zeros(0, 2, dtype=torch.int64))
    assert bits_equal(past_buffer, before)


# ----------------------------------------------------------------------------- large calls: threads and streaming


def kv_cache_call(tokens: int, row_bytes: int, offset: int, padding: int) -> None:
    """A kv_cache call writing ``tokens`` rows of ``row_bytes`` bytes (float16) over 4 entries."""
    hidden = row_bytes // 2
    per = [tokens // 4 + (i < tokens % 4) for i in range(4)]
    (pb, past), (rpb, rpast) = twins((1, 4, max(per) + 3, hidden), torch.float16, offset, padding, 1)
    new_kv = random_bits((tokens, hidden), torch.float16, 2)
    index = torch.tensor([n + 3 * (i % 2) for i, n in enumerate(per)]), torch.tensor(per)
    ascend_kv.kv_cache(new_kv, 0, past, *index)
    reference.kv_cache(new_kv, 0, rpast, *index)
    assert bits_equal(pb, rpb)


@pytest.mark.parametrize("tokens", [MIB // 1024 - 1, MIB // 1024, 4 * MIB // 1024],
                         ids=["below 1 MiB", "1 MiB", "4 MiB"])
@pytest.mark.parametrize("offset, padding", [(0, 0), (2, 8), (16, 32)], ids=["dense", "misaligned", "padded"])
def test_kv_cache_large_writes(threads: int, tokens: int, offset: int, padding: int) -> None:
    """1 KB rows: from 1 MiB written the stores stream (x86-64), split over the threads."""
    kv_cache_call(tokens, 1024, offset, padding)


def paged_call(layout: str, tokens: int, offset: int, padding: int, interleaved: bool = False) -> None:
    """A paged load of ``tokens`` tokens of 1 KB per output (float16, 16-token blocks) in 3 entries."""
    block_size = 16
    num_blocks = -(-tokens // block_size) + 3
    if layout == "nd":
        caches = [random_bits((num_blocks, block_size, 4, 128), torch.float16, 3 + i) for i in range(2)]
        row: tuple[int, ...] = (4, 128)
    else:
        caches = [random_bits((num_blocks, 32, block_size, 16), torch.float16, 3 + i) for i in range(2)]
        row = (512,)
    lens = [tokens // 2, tokens - tokens // 2 - 5, 5]
    g = torch.Generator().manual_seed(tokens)
    table = torch.randint(0, num_blocks, (3, -(-max(lens) // block_size) + 1), generator=g, dtype=torch.int32)
    if interleaved:  # key and value the two halves of one buffer's rows
        buffer = random_bits((tokens, 2, *row), torch.float16, 5)
        ref_buffer = buffer.clone()
        outputs, ref_outputs = (buffer[:, 0], buffer[:, 1]), (ref_buffer[:, 0], ref_buffer[:, 1])
        buffers, ref_buffers = [buffer], [ref_buffer]
    else:
        (kb, key), (rkb, rkey) = twins((tokens, 512), torch.float16, offset, padding, 5)
        (vb, value), (rvb, rvalue) = twins((tokens, 512), torch.float16, padding, offset, 6)
        outputs = (key.view(tokens, *row), value.view(tokens, *row))
        ref_outputs = (rkey.view(tokens, *row), rvalue.view(tokens, *row))
        buffers, ref_buffers = [kb, vb], [rkb, rvb]
    context_lens = torch.tensor(lens)
    ascend_kv.paged_cache_load(*caches, table, context_lens, kv_cache_cfg=layout, key=outputs[0], value=outputs[1])
    reference.paged_cache_load(*caches, table, context_lens, kv_cache_cfg=ND if layout == "nd" else NZ,
                               key=ref_outputs[0], value=ref_outputs[1])
    assert all(bits_equal(b, r) for b, r in zip(buffers, ref_buffers))


@pytest.mark.parametrize("layout", ["nd", "nz"])
@pytest.mark.parametrize("tokens", [3 * 1024 - 1, 3 * 1024, 8 * 1024], ids=["below 6 MiB", "6 MiB", "16 MiB"])
@pytest.mark.parametrize("offset, padding", [(0, 0), (2, 8)], ids=["dense", "misaligned"])
def test_paged_load_large_writes(threads: int, layout: str, tokens: int, offset: int, padding: int) -> None:
    """Key and value of 1 KB rows each: from 6 MiB written in all the stores stream (x86-64)."""
    paged_call(layout, tokens, offset, padding)


def test_paged_load_large_interleaved_outputs(threads: int) -> None:
    paged_call("nd", 8 * 1024, 0, 0, interleaved=True)


@pytest.mark.parametrize("cache_gap", [0, 8], ids=["dense caches", "cache rows apart"])
def test_allocating_paged_load_large(threads: int, cache_gap: int) -> None:
    """The allocating form of a 16 MiB load: zero-filled outputs, then every row written."""
    caches = [random_bits((520, 16, 4, 128 + cache_gap), torch.float16, 7 + i)[..., :128] for i in range(2)]
    table = torch.arange(520, dtype=torch.int32).flip(0).view(2, 260)
    lens = torch.tensor([4096, 4096])
    got = ascend_kv.paged_cache_load(*caches, table, lens, kv_cache_cfg="nd")
    want = reference.paged_cache_load(*caches, table, lens, kv_cache_cfg=ND)
    assert all(bits_equal(g, w) for g, w in zip(got, want))


@pytest.mark.parametrize("row_bytes", [1024, 1000], ids=["1 KB rows", "1000-byte rows"])
def test_reshape_and_cache_large_writes_take_the_last_token_of_each_slot(threads: int, row_bytes: int) -> None:
    """8192 tokens of 1 KB per cache (8 MiB each: split over the threads, streamed), a tenth of the
    slots named twice or three times (the last token wins, whichever thread owns its block), a
    twentieth padding; rows of 1000 bytes (not whole 32-byte chunks) too, in caches whose blocks lie apart."""
    tokens, block_size, heads = 8192, 16, 4
    head = row_bytes // 2 // heads
    g = torch.Generator().manual_seed(row_bytes)
    slots = torch.randperm(tokens, generator=g)
    named_again = torch.randint(0, tokens, (tokens // 10,), generator=g)
    slots[named_again] = slots[torch.randint(0, tokens, (tokens // 10,), generator=g)]
    slots[torch.randint(0, tokens, (tokens // 20,), generator=g)] = -1
    assert len(set(slots.tolist())) < tokens - tokens // 20                     # duplicates there are
    num_blocks = tokens // block_size
    gap = 0 if row_bytes % 32 == 0 else 3                                        # K and V blocks apart; rows too
    both = random_bits((num_blocks, 2, block_size, heads, head + gap), torch.float16, 8)[..., :head]
    caches, ref = (both[:, 0], both[:, 1]), both.clone()
    key, value = (random_bits((tokens, heads, head), torch.float16, 9 + i) for i in range(2))
    ascend_kv.reshape_and_cache(key, value, *caches, slots)
    reference.reshape_and_cache(key, value, ref[:, 0], ref[:, 1], slots)
    assert bits_equal(both, ref)


def test_block_copy_and_swap_blocks_large(threads: int) -> None:
    """64 KB blocks, 40 copies (2.5 MiB per cache) within two caches, and swapped to a strided target."""
    key, value = (random_bits((96, 16, 4, 512), torch.float16, 10 + i) for i in range(2))
    expected = key.clone(), value.clone()
    src, dst = torch.arange(0, 40), torch.arange(50, 90)
    ascend_kv.block_copy(key, value, src, dst, torch.arange(1, 41))
    reference.block_copy(*expected, src, dst, torch.arange(1, 41))
    assert bits_equal(key, expected[0]) and bits_equal(value, expected[1])
    target = random_bits((48, 16, 4, 520), torch.float16, 12)[..., 4:516]
    want = target.clone()
    mapping = torch.stack([torch.arange(90, 50, -1), torch.arange(0, 40)], 1)
    ascend_kv.swap_blocks(key, target, mapping)
    reference.swap_blocks(key, want, mapping)
    assert bits_equal(target, want)
