"""Valid block copies (``block_copy``, ``copy_blocks``, ``swap_blocks``) as hypothesis strategies and fixed cases.

Caches come in the layouts serving engines pass: plain ND or NZ tensors, MLA column slices of one
``[num_blocks, block_size, 1, k + v]`` buffer, and K and V held block by block in one
``[num_blocks, 2, ...]`` buffer. Payloads are random bits, compared bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from cases import random_bits, random_cache
from hypothesis import strategies as st

from ascend_kv.operators.library import cache_dtypes

#: How a case's caches sit in memory.
STORAGE = ("plain", "column slices", "interleaved")

CACHE_DTYPES = cache_dtypes()


def caches(storage: str, layout: str, num_blocks: int, key_dtype: torch.dtype, value_dtype: torch.dtype | None,
           seed: int, block_size: int = 16, heads: int = 2, head_size: int = 16,
           value_head_size: int = 32) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(key_cache, value_cache)`` of random bits (``value_dtype`` None: key only).

    ``"column slices"``: ND MLA style, the key the first ``head_size`` columns of one buffer,
    the value its last ``value_head_size`` (the key's dtype). ``"interleaved"``: both halves ``buf[:, 0]``/``buf[:, 1]`` of one buffer (the key's
    dtype and head size).
    """
    if storage == "column slices":  # MLA: K and V the two column ranges of one [nb, bs, 1, k + v] buffer
        buf = random_bits((num_blocks, block_size, 1, head_size + value_head_size), key_dtype, seed)
        return buf[..., :head_size], (None if value_dtype is None else buf[..., head_size:])
    if storage == "interleaved":
        buf = torch.stack([random_cache(layout, num_blocks, block_size, heads, head_size, key_dtype, seed + k)
                           for k in range(2)], dim=1)
        return buf[:, 0], (None if value_dtype is None else buf[:, 1])
    key = random_cache(layout, num_blocks, block_size, heads, head_size, key_dtype, seed)
    value = None if value_dtype is None else random_cache(layout, num_blocks, block_size, heads, value_head_size,
                                                          value_dtype, seed + 1)
    return key, value


@dataclass
class Copies:
    """``block_copy``'s index values: ``sources[i]`` to ``destinations[ends[i-1]:ends[i]]``."""

    sources: list[int]
    destinations: list[int]
    ends: list[int]

    def tensors(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return tuple(torch.tensor(v, dtype=dtype) for v in (self.sources, self.destinations, self.ends))  # type: ignore[return-value]

    def pairs(self) -> list[tuple[int, int]]:
        """Every ``(source, destination)`` copy, in destination order."""
        out, start = [], 0
        for s, end in zip(self.sources, self.ends):
            out += [(s, d) for d in self.destinations[start:end]]
            start = end
        return out


@st.composite
def copies(draw: st.DrawFn, num_blocks: int, max_sources: int = 4) -> Copies:
    """Valid copies among ``num_blocks`` blocks: sources and destinations disjoint, destinations
    distinct, any fan-out (a source with no destination included)."""
    order = draw(st.permutations(range(num_blocks)))
    n = draw(st.integers(0, min(max_sources, num_blocks)))
    sources, pool = list(order[:n]), list(order[n:])
    m = draw(st.integers(0, len(pool))) if n else 0
    cuts = sorted(draw(st.lists(st.integers(0, m), min_size=n - 1, max_size=n - 1))) if n else []
    return Copies(sources, pool[:m], [*cuts, m] if n else [])


@dataclass
class BlockCase:
    """One ``block_copy`` call's arguments."""

    key_cache: torch.Tensor
    value_cache: torch.Tensor | None
    copies: Copies
    index_dtype: torch.dtype

    def args(self) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor]:
        return (self.key_cache, self.value_cache, *self.copies.tensors(self.index_dtype))

    def cloned_args(self) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor]:
        key, value, *index = self.args()
        return (key.clone(), None if value is None else value.clone(), *index)  # type: ignore[return-value]


@st.composite
def block_cases(draw: st.DrawFn) -> BlockCase:
    storage = draw(st.sampled_from(STORAGE))
    layout = "nd" if storage == "column slices" else draw(st.sampled_from(["nd", "nz"]))
    key_dtype = draw(st.sampled_from(CACHE_DTYPES))
    value_dtype = draw(st.sampled_from([None, key_dtype, *CACHE_DTYPES]))
    num_blocks = draw(st.integers(1, 12))
    block_size = 16 if layout == "nz" else draw(st.sampled_from([1, 3, 16]))
    head_size = 32 if layout == "nz" else draw(st.sampled_from([1, 5, 16]))
    key, value = caches(storage, layout, num_blocks, key_dtype, value_dtype, draw(st.integers(0, 2**16)),
                        block_size=block_size, head_size=head_size)
    return BlockCase(key, value, draw(copies(num_blocks)), draw(st.sampled_from([torch.int32, torch.int64])))
