"""Hybrid models' state caches (docs/semantics.md §14) as hypothesis strategies: the layouts serving
engines allocate, slot pairs with padding, and the plain references' inputs.

States live in the memory serving engines give them, built from a few base tensors so that a test
can clone the bases, rebuild the same views over the clones, and compare every byte of the bases
(the bytes between the views included) bit for bit:

- ``pages``: vLLM's hybrid allocation, one byte buffer per layer ``[num_slots, page_bytes]`` whose
  pages hold the convolution state and then the SSM state, with padding after each (views of
  other dtypes into the page);
- ``layers``: SGLang's mamba pool, one buffer per state kind ``[layers, num_slots, ...]``, a
  per-layer view each;
- ``transposed``: a convolution state kept ``[num_slots, kernel - 1, dim]`` and used as
  ``[num_slots, dim, kernel - 1]`` (inner strides not row-major);
- ``plain``: contiguous states of their own shapes, 1-D ones (a scalar per slot) and empty slots included.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from hypothesis import strategies as st

#: Element types of states: every width the operations take (1, 2, 4 and 8 bytes).
STATE_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int8, torch.float64, torch.int64)
INDEX_DTYPES = (torch.int32, torch.int64)
STORAGE = ("pages", "layers", "transposed", "plain")
_INT = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def random_bits(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """A tensor of ``dtype`` whose bytes are random (NaN payloads included)."""
    view = _INT[torch.empty(0, dtype=dtype).element_size()]
    info = torch.iinfo(view)
    g = torch.Generator().manual_seed(seed)
    return torch.randint(info.min, info.max, shape, generator=g, dtype=view).view(dtype)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(_INT[t.element_size()])


@dataclass
class StateLayout:
    """States as views of ``bases`` (``make(bases)``), so a copy of the bases has the same views."""

    bases: list[torch.Tensor]
    make: Callable[[list[torch.Tensor]], list[torch.Tensor]]
    storage: str

    def states(self, bases: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
        return self.make(self.bases if bases is None else bases)

    def cloned(self) -> list[torch.Tensor]:
        return [b.clone() for b in self.bases]

    def on(self, device: torch.device | str) -> StateLayout:
        return StateLayout([b.to(device) for b in self.bases], self.make, self.storage)

    @property
    def num_slots(self) -> int:
        return int(self.states()[0].shape[0])


def _page_view(base: torch.Tensor, offset: int, dtype: torch.dtype, inner: tuple[int, ...]) -> torch.Tensor:
    """The state at byte ``offset`` of every page of ``base`` ``[num_slots, page_bytes]``: ``[num_slots, *inner]``."""
    size = torch.empty(0, dtype=dtype).element_size()
    count = 1
    for n in inner:
        count *= n
    return base[:, offset:offset + count * size].view(dtype).unflatten(1, inner)


@st.composite
def state_layouts(draw: st.DrawFn, max_slots: int = 10, min_slots: int = 1) -> StateLayout:
    storage = draw(st.sampled_from(STORAGE))
    slots = draw(st.integers(min_slots, max_slots))
    layers = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**16))
    dtype = st.sampled_from(STATE_DTYPES)
    if storage == "pages":
        conv, ssm = draw(dtype), draw(dtype)
        conv_inner = (draw(st.integers(1, 4)), draw(st.integers(1, 5)))
        ssm_inner = (draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 4)))
        size = lambda t, inner: torch.empty(0, dtype=t).element_size() * int(torch.Size(inner).numel())
        pad = draw(st.sampled_from([0, 8, 24]))
        conv_at, ssm_at = 0, (size(conv, conv_inner) + pad + 7) // 8 * 8
        page = (ssm_at + size(ssm, ssm_inner) + 7) // 8 * 8 + draw(st.sampled_from([0, 8, 40]))
        bases = [random_bits((slots, page), torch.uint8, seed + layer) for layer in range(layers)]

        def pages(bases: list[torch.Tensor]) -> list[torch.Tensor]:
            return [v for b in bases for v in (_page_view(b, conv_at, conv, conv_inner),
                                               _page_view(b, ssm_at, ssm, ssm_inner))]
        return StateLayout(bases, pages, storage)
    if storage == "layers":
        conv, ssm = draw(dtype), draw(dtype)
        bases = [random_bits((layers, slots, draw(st.integers(1, 6)), 3), conv, seed),
                 random_bits((layers, slots, 2, draw(st.integers(1, 4)), 4), ssm, seed + 1)]
        return StateLayout(bases, lambda b: [b[k][layer] for layer in range(layers) for k in range(2)], storage)
    if storage == "transposed":
        dt = draw(dtype)
        bases = [random_bits((slots, 3, draw(st.integers(1, 9))), dt, seed + layer) for layer in range(layers)]
        return StateLayout(bases, lambda b: [t.transpose(1, 2) for t in b], storage)
    shapes = draw(st.lists(st.sampled_from([(), (5,), (2, 3), (1, 7), (0,), (3, 1, 2)]), min_size=1, max_size=4))
    bases = [random_bits((slots, *shape), draw(dtype), seed + k) for k, shape in enumerate(shapes)]
    return StateLayout(bases, list, storage)


@dataclass
class SlotPairs:
    """``copy_state_slots``' pairs: ``src[i]`` to ``dst[i]``; -1 entries are padding."""

    src: list[int]
    dst: list[int]
    src_dtype: torch.dtype
    dst_dtype: torch.dtype
    simultaneous: bool

    def tensors(self, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.tensor(self.src, dtype=self.src_dtype, device=device),
                torch.tensor(self.dst, dtype=self.dst_dtype, device=device))


@st.composite
def slot_pairs(draw: st.DrawFn, num_slots: int) -> SlotPairs:
    """Valid pairs among ``num_slots`` slots with padding: destinations distinct; without
    ``simultaneous`` no slot both a source and a destination, with it any overlap (swaps, chains,
    self-copies, fan-out onto sources)."""
    simultaneous = draw(st.booleans())
    order = list(draw(st.permutations(range(num_slots))))
    n = draw(st.integers(0, num_slots if simultaneous else num_slots // 2))
    dst = order[:n]
    pool = range(num_slots) if simultaneous else order[n:]
    src = [draw(st.sampled_from(pool)) for _ in dst] if pool else []
    for _ in range(draw(st.integers(0, 3))):  # padding pairs anywhere: one negative entry suffices
        at = draw(st.integers(0, len(src)))
        s, d = draw(st.sampled_from([(-1, -1), (-1, 0), (0, -1), (-7, -2)]))
        src.insert(at, s)
        dst.insert(at, d)
    index = st.sampled_from(INDEX_DTYPES)
    return SlotPairs(src, dst, draw(index), draw(index), simultaneous)
