"""The oracle itself, checked on examples small enough to work out by hand."""

from __future__ import annotations

import torch
from cases import ND, NZ, bits_equal

from ascend_kv.tools import reference


def test_kv_cache_by_hand() -> None:
    past = torch.zeros(2, 2, 4, 16, dtype=torch.int8)
    new_kv = torch.arange(1, 4, dtype=torch.int8)[:, None].expand(3, 16).contiguous()   # rows 1, 2, 3
    reference.kv_cache(new_kv, 1, past, torch.tensor([3, 1]), torch.tensor([2, 1]))
    assert past[0].eq(0).all()
    assert past[1, 0, :, 0].tolist() == [0, 1, 2, 0]   # positions 1..2 of entry 0
    assert past[1, 1, :, 0].tolist() == [3, 0, 0, 0]   # position 0 of entry 1


def test_paged_nd_by_hand() -> None:
    # block b, slot s holds the value 10*b + s
    cache = (10 * torch.arange(3)[:, None] + torch.arange(4)).to(torch.int8)[:, :, None, None].expand(3, 4, 1, 32)
    table = torch.tensor([[2, 0], [1, -1]])
    key, _ = reference.paged_cache_load(cache, cache, table, torch.tensor([6, 2]), kv_cache_cfg=ND)
    assert key[:, 0, 0].tolist() == [20, 21, 22, 23, 0, 1, 10, 11]


def test_paged_cumsum_and_seq_starts_by_hand() -> None:
    cache = (10 * torch.arange(3)[:, None] + torch.arange(4)).to(torch.int8)[:, :, None, None].expand(3, 4, 1, 32)
    table = torch.tensor([[2, 0], [1, 2]])
    key, _ = reference.paged_cache_load(cache, cache, table, torch.tensor([1, 3, 5]), kv_cache_cfg=ND, cumsum=True,
                                        seq_starts=torch.tensor([5, 7]))
    # entry 0: 2 tokens from column 1 (5 // 4), rows 1..2; entry 1: 2 tokens from column 1, rows 3..4
    assert key[:, 0, 0].tolist() == [0, 0, 1, 20, 21]


def test_paged_nz_by_hand() -> None:
    # one block of 16 slots, T = 32 float16 elements = 2 fractals of E = 16
    nd = torch.arange(16 * 32, dtype=torch.float16).reshape(1, 16, 1, 32)
    nz = nd.reshape(1, 16, 2, 16).transpose(1, 2).contiguous()
    key, _ = reference.paged_cache_load(nz, nz, torch.tensor([[0]]), torch.tensor([3]), kv_cache_cfg=NZ)
    assert bits_equal(key, nd[0, :3, 0])


def test_every_element_type_is_copied_bit_for_bit() -> None:
    """The oracle moves bytes for every cache element type (NaN payloads included): each operation,
    worked out on the bytes (a uint8 view) by hand."""
    from ascend_kv.operators.library import cache_dtypes

    for dtype in cache_dtypes():
        width = dtype.itemsize
        raw = torch.randint(0, 256, (3, 4, 1, 32 * width), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
        cache = raw.view(dtype)                                        # [3 blocks, 4 slots, 1 head, 32]
        key, _ = reference.paged_cache_load(cache, cache, torch.tensor([[2, 0]]), torch.tensor([6]), kv_cache_cfg=ND)
        assert torch.equal(key.view(torch.uint8), torch.cat([raw[2], raw[0, :2]])), dtype
        written = torch.zeros_like(raw)
        tokens = raw[1].view(dtype)                                    # 4 tokens [1, 32]
        reference.reshape_and_cache(tokens, None, written.view(dtype), None, torch.tensor([9, -1, 0, 9]))
        want = torch.zeros_like(raw)
        want[0, 0], want[2, 1] = raw[1, 2], raw[1, 3]                  # slot 9 = block 2, slot 1: the last token
        assert torch.equal(written, want), dtype
        past = torch.zeros(1, 2, 4, 32 * width, dtype=torch.uint8)
        reference.kv_cache(raw[0, :3, 0].view(dtype), 0, past.view(dtype), torch.tensor([2, 4]), torch.tensor([1, 2]))
        assert torch.equal(past[0, 0, 1], raw[0, 0, 0]) and torch.equal(past[0, 1, 2:], raw[0, 1:3, 0]), dtype
        blocks = raw.clone()
        reference.block_copy(blocks.view(dtype), None, torch.tensor([1]), torch.tensor([0, 2]), torch.tensor([2]))
        assert torch.equal(blocks, raw[[1, 1, 1]]), dtype
        target = torch.zeros_like(raw)
        reference.swap_blocks(raw.view(dtype), target.view(dtype), torch.tensor([[2, 0]]))
        assert torch.equal(target[0], raw[2]) and not target[1:].any(), dtype
