"""Valid ``gather_blocks`` / ``scatter_blocks`` calls as a hypothesis strategy: every layout pair,
head splits, key-only caches, int32/int64 ids, caches as separate tensors or per-layer views of
one buffer. Payloads are random bits, compared bit for bit."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from cases import random_bits
from hypothesis import strategies as st

from ascend_kv.api.arguments import nz_elements

LAYOUTS = ("nd", "hnd", "nz")


def block_shape(layout: str, bs: int, heads: int, head_size: int, dtype: torch.dtype, splits: int = 1) -> tuple[int, ...]:
    """One block's shape in ``layout`` (``"nd"`` with ``splits`` head groups on the buffer side)."""
    if layout == "hnd":
        return (heads, bs, head_size)
    if layout == "nz":
        e = nz_elements(dtype)
        return (heads * head_size // e, bs, e)
    return (splits, bs, heads // splits, head_size) if splits > 1 else (bs, heads, head_size)


@dataclass
class TransferCase:
    """One call's arguments (the caches and the buffer hold random bits)."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    ids: list[int]
    buffer: torch.Tensor
    cache_layout: str
    buffer_layout: str
    splits: int
    index_dtype: torch.dtype

    def block_ids(self) -> torch.Tensor:
        return torch.tensor(self.ids, dtype=self.index_dtype)

    def caches(self) -> list[torch.Tensor]:
        return [*self.keys, *self.values]


def make_case(cache_layout: str, buffer_layout: str, *, layers: int = 2, kv: int = 2, num_blocks: int = 6,
              bs: int = 16, heads: int = 4, head_size: int = 16, splits: int = 1, dtype: torch.dtype = torch.float16,
              ids: list[int] | None = None, one_buffer: bool = False, index_dtype: torch.dtype = torch.int64,
              seed: int = 0) -> TransferCase:
    """A case; ``one_buffer``: the caches are the per-layer views ``kv[l][0]``, ``kv[l][1]`` of one buffer."""
    block = block_shape(cache_layout, bs, heads, head_size, dtype)
    if one_buffer:
        whole = random_bits((layers, kv, num_blocks, *block), dtype, seed)
        keys, values = [whole[l][0] for l in range(layers)], [whole[l][1] for l in range(layers)] if kv == 2 else []
    else:
        keys = [random_bits((num_blocks, *block), dtype, seed + l) for l in range(layers)]
        values = [random_bits((num_blocks, *block), dtype, seed + 100 + l) for l in range(layers)] if kv == 2 else []
    ids = [num_blocks - 1, 0] if ids is None else ids
    buffer = random_bits((kv, layers, len(ids), *block_shape(buffer_layout, bs, heads, head_size, dtype, splits)),
                         dtype, seed + 1000)
    return TransferCase(keys, values, ids, buffer, cache_layout, buffer_layout, splits, index_dtype)


@st.composite
def transfer_cases(draw: st.DrawFn, distinct: bool) -> TransferCase:
    """Valid calls (``distinct``: ids without repeats, as scatter_blocks needs)."""
    dtype = draw(st.sampled_from([torch.float16, torch.int8, torch.float32]))
    e = nz_elements(dtype)
    cache_layout, buffer_layout = draw(st.sampled_from(LAYOUTS)), draw(st.sampled_from(LAYOUTS))
    nz = "nz" in (cache_layout, buffer_layout)
    splits = draw(st.sampled_from([1, 2, 4])) if buffer_layout == "nd" else 1
    heads = splits * draw(st.integers(1, 3))
    # D: whole NZ pieces, a part of one piece (r heads a piece), or neither (the ATen route)
    head_size = draw(st.sampled_from([e, 2 * e, e // 2, 24 if e == 16 else 3 * e // 2] if nz else [1, 5, 8, 16]))
    if nz and (heads * head_size) % e:
        heads *= e // head_size if e % head_size == 0 else 2
    bs = 16 * draw(st.integers(1, 2)) if nz else draw(st.integers(1, 17))
    num_blocks = draw(st.integers(1, 7))
    n = draw(st.integers(0, num_blocks if distinct else 2 * num_blocks))
    ids = (draw(st.permutations(range(num_blocks)))[:n] if distinct
           else draw(st.lists(st.integers(0, num_blocks - 1), min_size=n, max_size=n)))
    return make_case(cache_layout, buffer_layout, layers=draw(st.integers(1, 3)), kv=draw(st.sampled_from([1, 2])),
                     num_blocks=num_blocks, bs=bs, heads=heads, head_size=head_size, splits=splits, dtype=dtype,
                     ids=ids, one_buffer=draw(st.booleans()), index_dtype=draw(st.sampled_from([torch.int32, torch.int64])),
                     seed=draw(st.integers(0, 1000)))
