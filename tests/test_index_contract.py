"""The index contract (docs/semantics.md §15.3), op by op through the public functions: int32 and int64
index tensors of the same values write the same bytes, and caches that are views into padded pages
(each block or slot followed by bytes no call may touch) are written where they are, equal to the
plain reference on the same views. Every byte of each page buffer is compared."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from cases import bits_equal, random_bits

import ascend_kv
from ascend_kv.tools import reference

INDEX = {"int32": torch.int32, "int64": torch.int64}
PAD = 5  # elements of padding after each block / slot / row


def paged(base: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """``base`` ``[n, m + PAD]`` (m = prod(shape[1:])) as ``[n, *shape[1:]]``: each entry a page with padding after it."""
    inner = base.shape[1] - PAD
    return base[:, :inner].view(shape)


def pages(n: int, shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    inner = 1
    for size in shape:
        inner *= size
    return random_bits((n, inner + PAD), dtype, seed)


#: op -> (buffers, call(buffers, index dtype, fn)) where fn is the public function or the reference; the call
#: returns the tensors to compare (the page buffers it wrote, or the outputs it allocated).
Build = Callable[[], tuple[list[torch.Tensor], Callable[[list[torch.Tensor], torch.dtype, bool], list[torch.Tensor]]]]


def _kv_cache() -> tuple[list[torch.Tensor], Callable[..., list[torch.Tensor]]]:
    bufs = [random_bits((2, 2, 8, 16 + PAD), torch.float16, 1), random_bits((3, 16), torch.float16, 2)]

    def call(b: list[torch.Tensor], dt: torch.dtype, ours: bool) -> list[torch.Tensor]:
        past = b[0][..., :16]
        args = (b[1], 1, past, torch.tensor([3, 6], dtype=dt), torch.tensor([2, 1], dtype=dt))
        (ascend_kv.kv_cache if ours else reference.kv_cache)(*args)
        return [b[0]]
    return bufs, call


def _paged_cache_load() -> tuple[list[torch.Tensor], Callable[..., list[torch.Tensor]]]:
    bufs = [pages(5, (4, 2, 8), torch.bfloat16, 3), pages(5, (4, 2, 8), torch.bfloat16, 4)]

    def call(b: list[torch.Tensor], dt: torch.dtype, ours: bool) -> list[torch.Tensor]:
        caches = [paged(x, (5, 4, 2, 8)) for x in b]
        table = torch.tensor([[3, 0, -1], [4, -1, -1]], dtype=dt)
        lens = torch.tensor([6, 3], dtype=dt)
        fn = ascend_kv.paged_cache_load if ours else reference.paged_cache_load
        return list(fn(*caches, table, lens, kv_cache_cfg=ascend_kv.KvCacheCfg.K_CACHE_V_CACHE_ND))
    return bufs, call


def _reshape_and_cache() -> tuple[list[torch.Tensor], Callable[..., list[torch.Tensor]]]:
    bufs = [pages(4, (4, 2, 8), torch.float16, 5), pages(4, (4, 2, 8), torch.float16, 6),
            random_bits((5, 2, 8), torch.float16, 7), random_bits((5, 2, 8), torch.float16, 8)]

    def call(b: list[torch.Tensor], dt: torch.dtype, ours: bool) -> list[torch.Tensor]:
        caches = [paged(x, (4, 4, 2, 8)) for x in b[:2]]
        slots = torch.tensor([13, -1, 0, 7, 15], dtype=dt)
        (ascend_kv.reshape_and_cache if ours else reference.reshape_and_cache)(b[2], b[3], *caches, slots)
        return b[:2]
    return bufs, call


def _block_copy() -> tuple[list[torch.Tensor], Callable[..., list[torch.Tensor]]]:
    bufs = [pages(6, (4, 2, 8), torch.int8, 9), pages(6, (4, 2, 8), torch.int8, 10)]

    def call(b: list[torch.Tensor], dt: torch.dtype, ours: bool) -> list[torch.Tensor]:
        caches = [paged(x, (6, 4, 2, 8)) for x in b]
        args = (*caches, torch.tensor([0, 5], dtype=dt), torch.tensor([2, 3, 1], dtype=dt), torch.tensor([1, 3], dtype=dt))
        (ascend_kv.block_copy if ours else reference.block_copy)(*args)
        return b
    return bufs, call


def _copy_blocks() -> tuple[list[torch.Tensor], Callable[..., list[torch.Tensor]]]:
    bufs = [pages(6, (4, 8), torch.float32, 11 + i) for i in range(4)]

    def call(b: list[torch.Tensor], dt: torch.dtype, ours: bool) -> list[torch.Tensor]:
        caches = [paged(x, (6, 4, 8)) for x in b]
        mapping = torch.tensor([[0, 4], [5, 1]], dtype=dt)
        (ascend_kv.copy_blocks if ours else reference.copy_blocks)(caches[:2], caches[2:], mapping)
        return b
    return bufs, call


def _swap_blocks() -> tuple[list[torch.Tensor], Callable[..., list[torch.Tensor]]]:
    bufs = [pages(4, (4, 8), torch.bfloat16, 15), pages(6, (4, 8), torch.bfloat16, 16)]

    def call(b: list[torch.Tensor], dt: torch.dtype, ours: bool) -> list[torch.Tensor]:
        src, dst = paged(b[0], (4, 4, 8)), paged(b[1], (6, 4, 8))
        (ascend_kv.swap_blocks if ours else reference.swap_blocks)(src, dst, torch.tensor([[3, 0], [1, 5]], dtype=dt))
        return [b[1]]
    return bufs, call


def _gather_blocks() -> tuple[list[torch.Tensor], Callable[..., list[torch.Tensor]]]:
    bufs = [pages(5, (4, 2, 8), torch.float16, 17 + i) for i in range(4)] + [random_bits((2, 2, 3, 4, 2, 8),
                                                                                         torch.float16, 21)]

    def call(b: list[torch.Tensor], dt: torch.dtype, ours: bool) -> list[torch.Tensor]:
        caches = [paged(x, (5, 4, 2, 8)) for x in b[:4]]
        ids = torch.tensor([4, 0, 2], dtype=dt)
        (ascend_kv.gather_blocks if ours else reference.gather_blocks)(caches[:2], caches[2:], ids, b[4])
        return [b[4]]
    return bufs, call


def _scatter_blocks() -> tuple[list[torch.Tensor], Callable[..., list[torch.Tensor]]]:
    bufs = [pages(5, (4, 2, 8), torch.float16, 22 + i) for i in range(4)] + [random_bits((2, 2, 3, 4, 2, 8),
                                                                                         torch.float16, 26)]

    def call(b: list[torch.Tensor], dt: torch.dtype, ours: bool) -> list[torch.Tensor]:
        caches = [paged(x, (5, 4, 2, 8)) for x in b[:4]]
        ids = torch.tensor([4, 0, 2], dtype=dt)
        (ascend_kv.scatter_blocks if ours else reference.scatter_blocks)(b[4], caches[:2], caches[2:], ids)
        return b[:4]
    return bufs, call


def _copy_state_slots() -> tuple[list[torch.Tensor], Callable[..., list[torch.Tensor]]]:
    bufs = [pages(6, (3, 4), torch.bfloat16, 27), pages(6, (2, 2, 2), torch.float32, 28)]

    def call(b: list[torch.Tensor], dt: torch.dtype, ours: bool) -> list[torch.Tensor]:
        states = [paged(b[0], (6, 3, 4)), paged(b[1], (6, 2, 2, 2))]
        args = (states, torch.tensor([0, -1, 4], dtype=dt), torch.tensor([5, 2, 1], dtype=dt))
        (ascend_kv.copy_state_slots if ours else reference.copy_state_slots)(*args)
        return b
    return bufs, call


def _gather_state_slots() -> tuple[list[torch.Tensor], Callable[..., list[torch.Tensor]]]:
    bufs = [pages(6, (3, 4), torch.bfloat16, 29), pages(6, (2, 2, 2), torch.float32, 30),
            random_bits((3, 24 + 32), torch.uint8, 31)]

    def call(b: list[torch.Tensor], dt: torch.dtype, ours: bool) -> list[torch.Tensor]:
        states = [paged(b[0], (6, 3, 4)), paged(b[1], (6, 2, 2, 2))]
        (ascend_kv.gather_state_slots if ours else reference.gather_state_slots)(states, torch.tensor([5, -1, 0],
                                                                                                     dtype=dt), b[2])
        return [b[2]]
    return bufs, call


def _scatter_state_slots() -> tuple[list[torch.Tensor], Callable[..., list[torch.Tensor]]]:
    bufs = [pages(6, (3, 4), torch.bfloat16, 32), pages(6, (2, 2, 2), torch.float32, 33),
            random_bits((3, 24 + 32), torch.uint8, 34)]

    def call(b: list[torch.Tensor], dt: torch.dtype, ours: bool) -> list[torch.Tensor]:
        states = [paged(b[0], (6, 3, 4)), paged(b[1], (6, 2, 2, 2))]
        (ascend_kv.scatter_state_slots if ours else reference.scatter_state_slots)(b[2], states,
                                                                                   torch.tensor([5, -1, 0], dtype=dt))
        return b[:2]
    return bufs, call


def _scatter_nd_update() -> tuple[list[torch.Tensor], Callable[..., list[torch.Tensor]]]:
    bufs = [pages(4, (4, 1, 8), torch.int8, 35), random_bits((4, 1, 8), torch.int8, 36)]

    def call(b: list[torch.Tensor], dt: torch.dtype, ours: bool) -> list[torch.Tensor]:
        pairs = torch.tensor([[3, 3], [-1, 0], [0, 0], [3, 3]], dtype=dt)
        (ascend_kv.scatter_nd_update if ours else reference.scatter_nd_update)(paged(b[0], (4, 4, 1, 8)), pairs, b[1])
        return [b[0]]
    return bufs, call


OPS = {"kv_cache": _kv_cache, "paged_cache_load": _paged_cache_load, "reshape_and_cache": _reshape_and_cache,
       "block_copy": _block_copy, "copy_blocks": _copy_blocks, "swap_blocks": _swap_blocks,
       "gather_blocks": _gather_blocks, "scatter_blocks": _scatter_blocks, "copy_state_slots": _copy_state_slots,
       "gather_state_slots": _gather_state_slots, "scatter_state_slots": _scatter_state_slots,
       "scatter_nd_update": _scatter_nd_update}


@pytest.mark.parametrize("op", sorted(OPS))
def test_int32_and_int64_indices_write_the_same_bytes_into_padded_pages(backend: str, op: str) -> None:
    bufs, call = OPS[op]()
    ref_bufs = [b.clone() for b in bufs]
    want = call(ref_bufs, torch.int64, False)
    # the case writes something (paged_cache_load: into outputs it allocates)
    assert op == "paged_cache_load" or any(not bits_equal(r, b) for r, b in zip(ref_bufs, bufs)), op
    for index in INDEX.values():
        got = call([b.clone() for b in bufs], index, True)
        assert len(got) == len(want) and all(bits_equal(g, w) for g, w in zip(got, want)), f"{op} with {index}"
