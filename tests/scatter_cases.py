"""scatter_nd_update's inputs (docs/semantics.md §15.1) as hypothesis strategies: caches in the memory
sparse-attention engines give them, index tuples with padding and repeats, and strided updates.

A cache is a view of one base tensor (``make(base)``), so a test can clone the base, rebuild the same
view over the clone, and compare every byte of the base (page padding and other columns included):

- ``plain``: the cache itself;
- ``pages``: each first-dim entry a page with padding after it (DSA's compressed caches in a page);
- ``columns``: the last dim a column slice of a wider buffer (K and V halves of one row);
- ``layers``: one layer's view of a ``[layers, ...]`` buffer;
- ``transposed``: the last two dims transposed (rows not contiguous: outside the kernel's domain).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from hypothesis import strategies as st
from state_cases import random_bits

#: Element types of caches: every width scatter_nd_update takes, float32 included.
DTYPES = (torch.int8, torch.float16, torch.bfloat16, torch.float32, torch.int32, torch.float64)
INDEX_DTYPES = (torch.int32, torch.int64)
STORAGE = ("plain", "pages", "columns", "layers", "transposed")


@dataclass
class ScatterCase:
    base: torch.Tensor
    make: Callable[[torch.Tensor], torch.Tensor]
    storage: str
    k: int
    tuples: list[list[int]]
    index_dtype: torch.dtype
    one_dim: bool              # k = 1 given as [n] rather than [n, 1]
    strided_index: bool
    updates: torch.Tensor

    def var(self, base: torch.Tensor | None = None) -> torch.Tensor:
        return self.make(self.base if base is None else base)

    def indices(self, device: torch.device | str = "cpu", dtype: torch.dtype | None = None) -> torch.Tensor:
        dtype = self.index_dtype if dtype is None else dtype
        wide = torch.tensor([[*t, 7] for t in self.tuples], dtype=dtype).reshape(len(self.tuples), self.k + 1)
        index = wide[:, :self.k] if self.strided_index else wide[:, :self.k].contiguous()
        return (index[:, 0] if self.one_dim else index).to(device)

    def in_kernel_domain(self) -> bool:
        """Whether the kernel takes the call in place: the rows of var (dims k..) and of updates contiguous."""
        return dense_from(self.var(), self.k) and dense_from(self.updates, 1)


def dense_from(t: torch.Tensor, first_dim: int) -> bool:
    """Whether dims ``first_dim..`` of ``t`` are row-major contiguous (size-1 dims ignored)."""
    expected = 1
    for size, stride in reversed(list(zip(t.shape[first_dim:], t.stride()[first_dim:]))):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _view(storage: str, shape: tuple[int, ...], dtype: torch.dtype, seed: int
          ) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
    if storage == "pages":
        inner = math.prod(shape[1:])
        return random_bits((shape[0], inner + 5), dtype, seed), lambda b: b[:, :inner].view(shape)
    if storage == "columns":
        last = shape[-1]
        return random_bits((*shape[:-1], 2 * last + 1), dtype, seed), lambda b: b[..., last + 1:]
    if storage == "layers":
        return random_bits((3, *shape), dtype, seed), lambda b: b[1]
    if storage == "transposed":
        return random_bits((*shape[:-2], shape[-1], shape[-2]), dtype, seed), lambda b: b.transpose(-1, -2)
    return random_bits(shape, dtype, seed), lambda b: b


@st.composite
def scatter_cases(draw: st.DrawFn, k: int | None = None, storage: str | None = None) -> ScatterCase:
    k = draw(st.sampled_from([1, 2])) if k is None else k
    dtype = draw(st.sampled_from(DTYPES))
    blocks, block_size = draw(st.integers(1, 5)), draw(st.integers(1, 4))
    grid = (blocks, block_size) if k == 2 else (blocks * block_size,)
    row = draw(st.sampled_from([(), (1,), (3,), (1, 5), (2, 4), (3, 1, 2)]))
    storage = draw(st.sampled_from(STORAGE)) if storage is None else storage
    if (storage == "transposed" and len(row) < 2) or (storage == "columns" and not row):
        storage = "pages"
    seed = draw(st.integers(0, 2**16))
    base, make = _view(storage, (*grid, *row), dtype, seed)
    n = draw(st.integers(0, 7))
    inside = st.tuples(*[st.integers(0, size - 1) for size in grid]).map(list)
    padding = st.tuples(*[st.integers(-3, size - 1) for size in grid]).map(list).filter(lambda t: min(t) < 0)
    tuples = draw(st.lists(st.one_of(inside, inside, padding), min_size=n, max_size=n))  # repeats included
    rows = random_bits((n, 2, *row), dtype, seed + 1)
    updates = rows[:, 1] if draw(st.booleans()) else rows[:, 1].contiguous()
    return ScatterCase(base, make, storage, k, tuples, draw(st.sampled_from(INDEX_DTYPES)),
                       k == 1 and draw(st.booleans()), draw(st.booleans()), updates)
