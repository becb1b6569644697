"""Valid calls of both operations, as hypothesis strategies and as fixed named workloads.

A case is the keyword arguments of the public function. Tensors hold random *bits* (NaN and
Inf patterns included), so comparisons are bit for bit (:func:`bits_equal`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from calls import KvCacheArgs, PagedLoadArgs
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

import ascend_kv
from ascend_kv import KvCacheCfg
from ascend_kv.api.arguments import kv_cache_cfg_argument, nz_elements
from ascend_kv.operators.library import cache_dtypes
from ascend_kv.tools import reference

CACHE_DTYPES = cache_dtypes()
ND, NZ = KvCacheCfg.K_CACHE_V_CACHE_ND, KvCacheCfg.K_CACHE_V_CACHE_NZ
#: The integer type whose random values give every bit pattern of each element type.
INT_VIEW = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.int8: torch.int8, torch.uint8: torch.uint8,
            torch.int16: torch.int16, torch.int32: torch.int32, torch.float32: torch.int32,
            torch.float8_e4m3fn: torch.uint8, torch.float8_e5m2: torch.uint8, torch.uint16: torch.int16,
            torch.uint32: torch.int32, torch.float8_e4m3fnuz: torch.uint8, torch.float8_e5m2fnuz: torch.uint8,
            torch.float8_e8m0fnu: torch.uint8}

#: Every (key, value) dtype pair: the operations move bytes, and K and V may differ in ND and NZ.
ANY_DTYPE_PAIRS = [(k, v) for k in CACHE_DTYPES for v in CACHE_DTYPES]

#: The pairs a parametrized test runs: each dtype with itself, and the mixed pairs serving code
#: stores (int8 keys with 16-bit values, C8's int8 values, fp8 keys, fp32 with a narrow type).
DTYPE_PAIRS = [(d, d) for d in CACHE_DTYPES] + [
    (torch.int8, torch.bfloat16), (torch.int8, torch.float16), (torch.bfloat16, torch.int8),
    (torch.float8_e4m3fn, torch.bfloat16), (torch.float32, torch.float16), (torch.uint8, torch.float32),
]


def random_bits(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """A tensor of ``dtype`` whose bytes are random (any bit pattern, NaNs included)."""
    g = torch.Generator().manual_seed(seed)
    view = INT_VIEW[dtype]
    info = torch.iinfo(view)
    return torch.randint(info.min, info.max + 1, shape, generator=g, dtype=view).view(dtype)


_SAME_WIDTH_INT = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values (lazy negation or conjugation applied) viewed as integers of their width, so NaN
    payloads compare exactly; complex128 as pairs of 64-bit integers."""
    t = t.detach().resolve_conj().resolve_neg()
    if t.dtype == torch.bool:
        return t
    if t.dtype.itemsize == 16:
        t = torch.view_as_real(t)
    return t.view(_SAME_WIDTH_INT[t.dtype.itemsize])


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape, dtype and bits, for any dtype and strides (meta tensors hold no bits: both meta,
    same shape and dtype suffice)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.is_meta or b.is_meta:
        return a.is_meta and b.is_meta
    return torch.equal(bits(a), bits(b))


def raises_writing_nothing(call: Callable[[], object], written: torch.Tensor, message: str | None, error: type = ValueError) -> None:
    """``call()`` succeeds (message None) or raises ``error`` matching ``message`` having written nothing."""
    before = written.clone()
    if message is None:
        call()
        return
    with pytest.raises(error, match=message):
        call()
    assert bits_equal(written, before)


def random_cache(layout: KvCacheCfg | str, num_blocks: int, block_size: int, num_heads: int, head_size: int,
                 dtype: torch.dtype, seed: int) -> torch.Tensor:
    """A paged cache of random bits: ND ``[num_blocks, block_size, num_heads, head_size]`` or NZ
    ``[num_blocks, num_heads * head_size // E, block_size, E]``."""
    if layout in (ND, "nd"):
        return random_bits((num_blocks, block_size, num_heads, head_size), dtype, seed)
    e = nz_elements(dtype)
    return random_bits((num_blocks, num_heads * head_size // e, block_size, e), dtype, seed)


@dataclass
class Case:
    """Arguments of one call: ``args`` positional, ``kwargs`` keyword."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)

    def cloned(self) -> Case:
        """A deep copy: every tensor cloned (so one call cannot see another's writes)."""
        def c(x: Any) -> Any:
            return x.clone() if isinstance(x, torch.Tensor) else x
        return Case(tuple(c(a) for a in self.args), {k: c(v) for k, v in self.kwargs.items()})

    def tensors(self) -> list[torch.Tensor]:
        return [x for x in (*self.args, *self.kwargs.values()) if isinstance(x, torch.Tensor)]


# ----------------------------------------------------------------------------- kv_cache


def kv_cache_case(
    dtype: torch.dtype, seq_len: list[int], token_offset: list[int], *, layers: int = 2, layer_id: int = 1,
    max_seq_len: int = 16, hidden: int = 64, index_dtype: torch.dtype = torch.int32, new_kv_4d: bool = False,
    seed: int = 0,
) -> Case:
    """A ``kv_cache`` call; ``new_kv_4d`` gives ``new_kv`` as ``[1, ntokens, heads, head_size]``."""
    batch = len(seq_len)
    ntokens = sum(seq_len)
    past = random_bits((layers, batch, max_seq_len, hidden), dtype, seed)
    new_kv = random_bits((ntokens, hidden), dtype, seed + 1)
    if new_kv_4d:
        heads = math.gcd(hidden, 4)
        new_kv = new_kv.reshape(1, ntokens, heads, hidden // heads)
    return Case((new_kv, layer_id, past, torch.tensor(token_offset, dtype=index_dtype),
                 torch.tensor(seq_len, dtype=index_dtype)))


@st.composite
def kv_cache_cases(draw: st.DrawFn) -> Case:
    """Any valid ``kv_cache`` call on small shapes."""
    dtype = draw(st.sampled_from(CACHE_DTYPES))
    e = nz_elements(dtype)
    max_seq_len = draw(st.integers(1, 12))
    seq_len = draw(st.lists(st.integers(0, max_seq_len), max_size=5))
    token_offset = [draw(st.integers(s, max_seq_len)) for s in seq_len]
    layers = draw(st.integers(1, 3))
    case = kv_cache_case(
        dtype, seq_len, token_offset, layers=layers, layer_id=draw(st.integers(0, layers - 1)),
        max_seq_len=max_seq_len, hidden=e * draw(st.integers(1, 4)),
        index_dtype=draw(st.sampled_from([torch.int32, torch.int64])),
        new_kv_4d=draw(st.booleans()), seed=draw(st.integers(0, 2**31)),
    )
    if draw(st.booleans()):  # layer_id as a one-element tensor
        new_kv, layer_id, *rest = case.args
        case = Case((new_kv, torch.tensor([layer_id], dtype=torch.int32), *rest))
    return case


# ----------------------------------------------------------------------------- paged_cache_load


def paged_case(
    layout: KvCacheCfg, lens: list[int], *, key_dtype: torch.dtype = torch.float16,
    value_dtype: torch.dtype | None = None, num_heads: int = 2, head_size_k: int = 16, head_size_v: int = 16,
    block_size: int = 16, num_blocks: int = 8, cumsum_base: int | None = None, seq_starts: list[int] | None = None,
    give_outputs: bool = False, extra_rows: int = 0, extra_columns: int = 1, index_dtype: torch.dtype = torch.int32,
    seed: int = 0,
) -> Case:
    """A ``paged_cache_load`` call: ``lens`` tokens per batch entry, random block ids.

    ``cumsum_base`` switches to cumsum mode with ``context_lens[0] = cumsum_base``. Block-table
    columns no token needs are filled with ``-1`` and out-of-range ids (they must be ignored).
    """
    value_dtype = value_dtype or key_dtype
    g = torch.Generator().manual_seed(seed)
    batch = len(lens)
    starts = seq_starts or [0] * batch
    first_column = [s // block_size for s in starts]
    last_column = [c + -(-n // block_size) for c, n in zip(first_column, lens)]
    max_blocks = max(last_column, default=0) + extra_columns
    table = torch.where(torch.rand((batch, max_blocks), generator=g) < 0.5, -1, num_blocks + 7)
    for b in range(batch):
        needed = last_column[b] - first_column[b]
        table[b, first_column[b]:last_column[b]] = torch.randint(0, num_blocks, (needed,), generator=g)
    key_cache = random_cache(layout, num_blocks, block_size, num_heads, head_size_k, key_dtype, seed + 1)
    value_cache = random_cache(layout, num_blocks, block_size, num_heads, head_size_v, value_dtype, seed + 2)
    key_row, value_row = row_shape(layout, key_cache), row_shape(layout, value_cache)
    kwargs: dict[str, Any] = {"kv_cache_cfg": layout}
    if cumsum_base is None:
        context_lens = torch.tensor(lens, dtype=index_dtype)
        rows = sum(lens)
    else:
        cumulative = [cumsum_base]
        for n in lens:
            cumulative.append(cumulative[-1] + n)
        context_lens = torch.tensor(cumulative, dtype=index_dtype)
        kwargs["cumsum"] = True
        rows = cumulative[-1]
    if seq_starts is not None:
        kwargs["seq_starts"] = torch.tensor(seq_starts, dtype=index_dtype)
    if give_outputs:
        kwargs["key"] = random_bits((rows + extra_rows, *key_row), key_dtype, seed + 3)
        kwargs["value"] = random_bits((rows + extra_rows, *value_row), value_dtype, seed + 4)
    return Case((key_cache, value_cache, table.to(index_dtype), context_lens), kwargs)


@st.composite
def paged_cases(draw: st.DrawFn) -> Case:
    """Any valid ``paged_cache_load`` call on small shapes, in every mode."""
    layout = draw(st.sampled_from([ND, NZ]))
    key_dtype, value_dtype = draw(st.sampled_from(ANY_DTYPE_PAIRS))
    block_size = draw(st.sampled_from([1, 3, 8, 16] if layout == ND else [16, 32]))
    num_heads = draw(st.sampled_from([1, 2, 4]))
    unit = max(nz_elements(key_dtype), nz_elements(value_dtype)) // math.gcd(
        max(nz_elements(key_dtype), nz_elements(value_dtype)), num_heads)
    lens = draw(st.lists(st.integers(0, 3 * block_size), max_size=4))
    use_cumsum = layout == ND and draw(st.booleans())
    use_starts = layout == ND and draw(st.booleans())
    return paged_case(
        layout, lens, key_dtype=key_dtype, value_dtype=value_dtype, num_heads=num_heads,
        head_size_k=unit * draw(st.integers(1, 3)), head_size_v=unit * draw(st.integers(1, 2)),
        block_size=block_size, num_blocks=draw(st.integers(1, 6)),
        cumsum_base=draw(st.integers(0, 3)) if use_cumsum else None,
        seq_starts=[draw(st.integers(0, 3 * block_size)) for _ in lens] if use_starts else None,
        give_outputs=draw(st.booleans()), extra_rows=draw(st.integers(0, 3)),
        extra_columns=draw(st.integers(0, 2)), index_dtype=draw(st.sampled_from([torch.int32, torch.int64])),
        seed=draw(st.integers(0, 2**31)),
    )


# ----------------------------------------------------------------------------- reshape_and_cache


def in_wider_buffer(t: torch.Tensor, dim: int, seed: int) -> torch.Tensor:
    """``t``'s values in a view of a random-bits buffer one element wider before and two after along ``dim``."""
    shape = list(t.shape)
    shape[dim] += 3
    view = random_bits(tuple(shape), t.dtype, seed).narrow(dim, 1, t.shape[dim])
    view.copy_(t)
    return view


def reshape_and_cache_case(
    kv_cache_cfg: str, slots: list[int], *, num_tokens: int | None = None, key_dtype: torch.dtype = torch.float16,
    value_dtype: torch.dtype | None = None, key_only: bool = False, num_heads: int = 2, head_size_k: int = 16,
    head_size_v: int = 16, block_size: int = 16, num_blocks: int = 4, index_dtype: torch.dtype = torch.int32,
    strided: bool = False, seed: int = 0,
) -> Case:
    """A ``reshape_and_cache`` call writing token ``i`` to slot ``slots[i]`` (negative: padding).

    ``num_tokens`` defaults to ``len(slots)``; ``key_only`` passes ``value`` and ``value_cache``
    as None. ``strided`` gives key and value as column slices of one fused QKV projection
    ``[num_tokens, 3 + T_k + T_v]`` (each of its own wider buffer when their dtypes differ), so
    token rows stay contiguous but lie apart, and the caches as views of wider buffers with
    random bits around them: block by block in one ``[num_blocks, 2, ...]`` buffer when they
    have one shape and dtype, else each a slice of its own (ND: of the columns, NZ: of the
    fractal groups).
    """
    value_dtype = value_dtype or key_dtype
    num_tokens = len(slots) if num_tokens is None else num_tokens
    key = random_bits((num_tokens, num_heads, head_size_k), key_dtype, seed)
    value = random_bits((num_tokens, num_heads, head_size_v), value_dtype, seed + 1)
    key_cache = random_cache(kv_cache_cfg, num_blocks, block_size, num_heads, head_size_k, key_dtype, seed + 2)
    value_cache = random_cache(kv_cache_cfg, num_blocks, block_size, num_heads, head_size_v, value_dtype, seed + 3)
    if strided:
        tk, tv = num_heads * head_size_k, num_heads * head_size_v
        if key_dtype == value_dtype:                                             # [tokens, q + T_k + T_v]
            qkv = random_bits((num_tokens, 3 + tk + tv), key_dtype, seed + 4)
            key = qkv[:, 3:3 + tk].view(key.shape).copy_(key)
            value = qkv[:, 3 + tk:].view(value.shape).copy_(value)
        else:
            key = in_wider_buffer(key.flatten(1), -1, seed + 4).view(key.shape)
            value = in_wider_buffer(value.flatten(1), -1, seed + 5).view(value.shape)
        if key_cache.shape == value_cache.shape and key_dtype == value_dtype:
            both = torch.stack([key_cache, value_cache], 1)                      # [num_blocks, 2, ...]
            key_cache, value_cache = both[:, 0], both[:, 1]
        else:
            dim = -1 if kv_cache_cfg == "nd" else 1
            key_cache, value_cache = in_wider_buffer(key_cache, dim, seed + 6), in_wider_buffer(value_cache, dim, seed + 7)
    mapping = torch.tensor(slots, dtype=index_dtype)
    if key_only:
        return Case((key, None, key_cache, None, mapping), {"kv_cache_cfg": kv_cache_cfg})
    return Case((key, value, key_cache, value_cache, mapping), {"kv_cache_cfg": kv_cache_cfg})


@st.composite
def reshape_and_cache_cases(draw: st.DrawFn) -> Case:
    """Any valid ``reshape_and_cache`` call on small shapes: ND rows of any size, NZ, every dtype pair,
    key only, padding slots, slots named twice, fewer slots than tokens, strided inputs and caches."""
    kv_cache_cfg = draw(st.sampled_from(["nd", "nz"]))
    key_dtype, value_dtype = draw(st.sampled_from(ANY_DTYPE_PAIRS))
    if kv_cache_cfg == "nd":
        block_size = draw(st.sampled_from([1, 3, 16]))
        head_size_k, head_size_v = (draw(st.sampled_from([1, 7, 16, 33])) for _ in range(2))
        key_only = draw(st.booleans())
    else:
        block_size = draw(st.sampled_from([16, 32, 128]))
        head_size_k = nz_elements(key_dtype) * draw(st.integers(1, 2))
        head_size_v = nz_elements(value_dtype) * draw(st.integers(1, 2))
        key_only = False
    num_blocks = draw(st.integers(1, 4))
    index_dtype = draw(st.sampled_from([torch.int32, torch.int64]))
    written = draw(st.lists(st.integers(0, num_blocks * block_size - 1), unique=True, max_size=12))
    written += draw(st.lists(st.sampled_from(written), max_size=3)) if written else []    # duplicates: the last wins
    padding = draw(st.lists(st.sampled_from([-1, -2, -(2**31)]), max_size=3))
    slots = draw(st.permutations(written + padding))
    return reshape_and_cache_case(
        kv_cache_cfg, slots, num_tokens=len(slots) + draw(st.integers(0, 3)), key_dtype=key_dtype,
        value_dtype=value_dtype, key_only=key_only, num_heads=draw(st.integers(1, 3)), head_size_k=head_size_k,
        head_size_v=head_size_v, block_size=block_size, num_blocks=num_blocks, index_dtype=index_dtype,
        strided=draw(st.booleans()), seed=draw(st.integers(0, 2**31)),
    )


# ----------------------------------------------------------------------------- index values nobody checked


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: Index values nobody checked: small ones (in range or just outside), padding, and the int32/int64 limits.
EXTREMES = [-1, -2, INT64_MIN, INT64_MIN + 1, INT64_MAX, INT64_MAX - 1, 2**62, -(2**62), 2**31 - 1, -(2**31), 2**32]


def garbage(index_dtype: torch.dtype) -> st.SearchStrategy[int]:
    """Any index value ``index_dtype`` holds, weighted to small values and to the limits."""
    info = torch.iinfo(index_dtype)
    return st.one_of(st.integers(-3, 40), st.sampled_from([v for v in EXTREMES if info.min <= v <= info.max]),
                     st.integers(info.min, info.max))


def mostly(plausible: st.SearchStrategy[int], index_dtype: torch.dtype) -> st.SearchStrategy[int]:
    """``plausible`` values three times in four, garbage otherwise, so that many calls write something."""
    return st.integers(0, 3).flatmap(lambda pick: garbage(index_dtype) if pick == 3 else plausible)


def scattered(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values in a non-contiguous view (every element two apart)."""
    return torch.stack([t, torch.full_like(t, 7)], -1)[..., 0]


def row_shape(layout: KvCacheCfg, cache: torch.Tensor) -> tuple[int, ...]:
    return tuple(cache.shape[2:]) if layout == ND else (cache.shape[1] * cache.shape[3],)


def index(values: list[int], dtype: torch.dtype) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


@st.composite
def garbage_kv_args(draw: st.DrawFn) -> KvCacheArgs:
    """A structurally valid ``kv_cache`` call whose index values are anything their dtype holds."""
    dtype = draw(st.sampled_from(CACHE_DTYPES))
    index_dtype = draw(st.sampled_from([torch.int32, torch.int64]))
    layers, batch, max_seq_len = draw(st.integers(1, 3)), draw(st.integers(0, 4)), draw(st.integers(1, 10))
    hidden = nz_elements(dtype) * draw(st.integers(1, 2))
    ntokens = draw(st.integers(0, 12))
    seed = draw(st.integers(0, 2**31))
    past = random_bits((layers, batch, max_seq_len, hidden), dtype, seed)
    new_kv = random_bits((ntokens, hidden), dtype, seed + 1)
    # Lengths mostly plausible so that many tokens land, offsets anything.
    seq_len = draw(st.lists(mostly(st.integers(-1, 6), index_dtype), min_size=batch, max_size=batch))
    token_offset = draw(st.lists(mostly(st.integers(-1, max_seq_len + 3), index_dtype), min_size=batch, max_size=batch))
    layer_value = draw(mostly(st.integers(0, layers), index_dtype))
    layer_id: int | torch.Tensor = layer_value
    if draw(st.booleans()):
        layer_id = torch.tensor([layer_value], dtype=index_dtype)
    return KvCacheArgs(new_kv, past, layer_id, index(token_offset, index_dtype), index(seq_len, index_dtype))


def unchecked_layer(args: KvCacheArgs) -> KvCacheArgs:
    """``args`` with an int ``layer_id`` out of range as a one-element index tensor: an int is a host
    value, which the operators always check; a tensor on a device is not checked, like every index tensor."""
    layer = args.layer_id
    if isinstance(layer, torch.Tensor) or 0 <= layer < args.past.shape[0]:
        return args
    return KvCacheArgs(args.new_kv, args.past, torch.tensor([layer], dtype=args.seq_len.dtype), args.token_offset,
                       args.seq_len)


def cloned(args: Any) -> Any:
    return type(args)(**{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in vars(args).items()})


@st.composite
def garbage_paged_args(draw: st.DrawFn) -> PagedLoadArgs:
    """A structurally valid ``paged_cache_load`` call with given outputs and index values of any kind."""
    layout = draw(st.sampled_from([ND, NZ]))
    key_dtype, value_dtype = draw(st.sampled_from(
        ANY_DTYPE_PAIRS))
    index_dtype = draw(st.sampled_from([torch.int32, torch.int64]))
    block_size = draw(st.sampled_from([1, 2, 5, 16] if layout == ND else [16, 32]))
    num_blocks, batch, columns = draw(st.integers(1, 5)), draw(st.integers(1, 4)), draw(st.integers(1, 4))
    num_heads = draw(st.sampled_from([1, 2]))
    unit = max(nz_elements(key_dtype), nz_elements(value_dtype)) // math.gcd(
        max(nz_elements(key_dtype), nz_elements(value_dtype)), num_heads)
    head_k, head_v = unit * draw(st.integers(1, 2)), unit * draw(st.integers(1, 2))
    seed = draw(st.integers(0, 2**31))
    key_cache = random_cache(layout, num_blocks, block_size, num_heads, head_k, key_dtype, seed)
    value_cache = random_cache(layout, num_blocks, block_size, num_heads, head_v, value_dtype, seed + 1)
    key_rows, value_rows = draw(st.integers(0, 40)), draw(st.integers(0, 40))
    key = random_bits((key_rows, *row_shape(layout, key_cache)), key_dtype, seed + 2)
    value = random_bits((value_rows, *row_shape(layout, value_cache)), value_dtype, seed + 3)
    blocks = mostly(st.integers(-1, num_blocks), index_dtype)
    table = draw(st.lists(blocks, min_size=batch * columns, max_size=batch * columns))
    cumsum = layout == ND and draw(st.booleans())  # NZ takes neither cumsum nor seq_starts (ATB; the operators refuse them)
    lens = mostly(st.integers(-3, 3 * block_size), index_dtype)
    context_lens = draw(st.lists(lens, min_size=batch + cumsum, max_size=batch + cumsum))
    if cumsum and draw(st.booleans()):                                           # mostly non-decreasing: unique writers
        context_lens = sorted(context_lens)
    starts = None if layout == NZ else draw(st.none() | st.lists(
        mostly(st.integers(-2 * block_size, 3 * block_size), index_dtype), min_size=batch, max_size=batch))
    return PagedLoadArgs(layout, key_cache, value_cache, index(table, index_dtype).reshape(batch, columns),
                         index(context_lens, index_dtype), None if starts is None else index(starts, index_dtype),
                         cumsum, key, value)


class IndexPutRecorder(TorchDispatchMode):
    """Records the (indices, values, accumulate) of every ``index_put_`` call."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[list[torch.Tensor], torch.Tensor, bool]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        if func.overloadpacket in (torch.ops.aten.index_put_, torch.ops.aten.index_put):
            accumulate = bool(args[3]) if len(args) > 3 else bool((kwargs or {}).get("accumulate", False))
            self.calls.append(([i.clone() for i in args[1]], args[2].clone(), accumulate))
        return func(*args, **(kwargs or {}))

    def require_one_change_per_place(self) -> None:
        """Every write adds (integer bits) and no place gets two non-zero additions, so the result
        is defined on a parallel device and a place the call does not name changes no byte."""
        for indices, values, accumulate in self.calls:
            assert accumulate, "index_put_ without accumulate: a skipped token would rewrite bytes it read"
            changed: set[tuple[int, ...]] = set()
            for t, place in enumerate(zip(*(i.tolist() for i in indices))):
                if values[t].any():
                    assert place not in changed, f"{place} changed twice"
                    changed.add(place)

    def require_no_change(self) -> None:
        """Every recorded write adds zero: the call changes no byte, even beside a concurrent writer."""
        for _, values, accumulate in self.calls:
            assert accumulate and not values.any()


# ----------------------------------------------------------------------------- judges: the reference's result, or a named error and no write

KV_ARGS = ("new_kv", "layer_id", "past", "token_offset", "seq_len")
LOAD_ARGS = ("key_cache", "value_cache", "block_table", "context_lens", "kv_cache_cfg", "cumsum", "seq_starts",
             "key", "value")


def _clone(value: Any) -> Any:
    return value.detach().clone() if isinstance(value, torch.Tensor) else value


def _tensors(values: Any) -> list[torch.Tensor]:
    return [v for v in values if isinstance(v, torch.Tensor)]


def require_named_error(error: BaseException, names: tuple[str, ...]) -> None:
    """The message names one of ``names`` as a whole word (``key`` is not named by ``key_cache``)."""
    named = any(re.search(rf"(?<!\w){re.escape(name)}(?!\w)", str(error)) for name in names)
    assert named, f"the message names no argument: {error}"


def judge_kv_cache(*args: Any) -> BaseException | None:
    """Call ``ascend_kv.kv_cache(*args)``: the reference's result, or a named error and no write."""
    before = [_clone(a) for a in args]
    try:
        result = ascend_kv.kv_cache(*args)
    except (TypeError, ValueError) as error:
        require_named_error(error, KV_ARGS)
        assert all(bits_equal(a, b) for a, b in zip(_tensors(args), _tensors(before))), f"written, then: {error}"
        return error
    expected = reference.kv_cache(*before)
    assert result is args[2]
    assert bits_equal(result, expected)
    assert all(bits_equal(a, b) for i, (a, b) in enumerate(zip(args, before)) if i != 2 and isinstance(a, torch.Tensor))
    return None


def judge_paged_cache_load(*args: Any, **kwargs: Any) -> BaseException | None:
    """Call ``ascend_kv.paged_cache_load``: the reference's result, or a named error and no write."""
    before_args, before_kwargs = [_clone(a) for a in args], {k: _clone(v) for k, v in kwargs.items()}
    inputs = list(args) + [v for k, v in kwargs.items() if k not in ("key", "value")]
    try:
        key, value = ascend_kv.paged_cache_load(*args, **kwargs)
    except (TypeError, ValueError) as error:
        require_named_error(error, LOAD_ARGS)
        every = _tensors([*args, *kwargs.values()])
        every_before = _tensors([*before_args, *before_kwargs.values()])
        assert all(bits_equal(a, b) for a, b in zip(every, every_before)), f"written, then: {error}"
        return error
    # accepted, so the arguments are valid: the reference reads them in their canonical form
    before_kwargs["kv_cache_cfg"] = kv_cache_cfg_argument(kwargs.get("kv_cache_cfg", NZ))
    before_kwargs["cumsum"] = bool(kwargs.get("cumsum", False))
    expected = reference.paged_cache_load(*before_args, **before_kwargs)
    for name, got in (("key", key), ("value", value)):
        if kwargs.get(name) is not None:
            assert got is kwargs[name]
    assert bits_equal(key, expected[0]) and bits_equal(value, expected[1])
    assert all(bits_equal(a, b) for a, b in zip(_tensors(inputs), _tensors(
        list(before_args) + [v for k, v in before_kwargs.items() if k not in ("key", "value")])))
    return None


def judge(op: str, case: Case) -> BaseException | None:
    if op == "kv_cache":
        return judge_kv_cache(*case.args, **case.kwargs)
    return judge_paged_cache_load(*case.args, **case.kwargs)


def with_argument(op: str, case: Case, name: str, value: Any) -> Case:
    """``case`` with argument ``name`` replaced by ``value``."""
    names = KV_ARGS if op == "kv_cache" else LOAD_ARGS[:4]
    if name in names:
        args = list(case.args)
        args[names.index(name)] = value
        return Case(tuple(args), dict(case.kwargs))
    return Case(case.args, {**case.kwargs, name: value})


def argument(op: str, case: Case, name: str) -> Any:
    """Argument ``name`` of ``case``, a call of ``op``."""
    names = KV_ARGS if op == "kv_cache" else LOAD_ARGS[:4]
    return case.args[names.index(name)] if name in names else case.kwargs[name]


# ----------------------------------------------------------------------------- empty calls with any strides


def empty_calls() -> dict[str, tuple[str, Case]]:
    """``{name: (operation, call)}``: calls with nothing to move whose empty tensors have strides
    outside the kernels' domain (rows not contiguous: column slices, steps); each is a no-op."""
    h = torch.float16
    no_index = torch.zeros(0, dtype=torch.int32)
    two_zeros = torch.zeros(2, dtype=torch.int32)
    sliced_cache = torch.zeros(0, 16, 2, 16, dtype=h)[..., :8]   # 0 blocks, column-sliced
    sliced_rows = torch.zeros(0, 2, 11, dtype=h)
    return {
        "kv_cache strided new_kv": ("kv_cache", Case(
            (torch.zeros(0, 64, dtype=h)[:, ::2], 0, random_bits((1, 2, 8, 32), h, 1), two_zeros, two_zeros.clone()))),
        "kv_cache empty strided past": ("kv_cache", Case(
            (torch.zeros(0, 32, dtype=h), 0, torch.zeros(1, 0, 8, 64, dtype=h)[..., ::2], no_index, no_index))),
        "paged_cache_load 0-block sliced caches": ("paged_cache_load", Case(
            (sliced_cache, sliced_cache.clone(), torch.zeros(1, 0, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)),
            {"kv_cache_cfg": ND, "key": sliced_rows[..., :8], "value": sliced_rows.clone()[..., 3:]})),
        "reshape_and_cache sliced key, key only": ("reshape_and_cache", Case(
            (sliced_rows[..., :8], None, random_bits((2, 16, 2, 8), h, 2), None, no_index))),
        "reshape_and_cache sliced key and value": ("reshape_and_cache", Case(
            (sliced_rows[..., :8], sliced_rows[..., 3:], random_bits((2, 16, 2, 8), h, 3),
             random_bits((2, 16, 2, 8), h, 4), no_index))),
        "reshape_and_cache 0-block sliced caches": ("reshape_and_cache", Case(
            (torch.zeros(0, 2, 8, dtype=h), torch.zeros(0, 2, 8, dtype=h), sliced_cache, sliced_cache.clone(),
             no_index))),
    }


def results(value: Any) -> list[torch.Tensor]:
    """A step's returned tensors, as a list (a tuple's items, or the one tensor)."""
    return list(value) if isinstance(value, tuple) else [value]


def require_compiled_as_eager(step: Callable[..., Any], inputs: Callable[[], list[torch.Tensor]]) -> None:
    """``torch.compile(step, fullgraph=True)`` returns and writes what ``step`` does eagerly, bit for
    bit, and writes its arguments in place (their data pointers unchanged)."""
    eager_args = inputs()
    compiled_args = [t.clone() for t in eager_args]
    pointers = [t.data_ptr() for t in compiled_args]
    eager = step(*eager_args)
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True)(*compiled_args)
    assert all(bits_equal(c, e) for c, e in zip(results(compiled), results(eager)))
    assert all(bits_equal(c, e) for c, e in zip(compiled_args, eager_args))  # the written tensors too
    assert [t.data_ptr() for t in compiled_args] == pointers
