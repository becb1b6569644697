"""torch_npu's KV-cache ops under their own names, signatures and semantics, run by ascend_kv.

Serving code on Ascend (vllm-ascend, SGLang, MindIE) calls these through ``torch_npu``; with
this module it runs unchanged on any device: on a CPU with real numbers (its tests), on an NPU
with ascend_kv's kernels. Each function is one call of an ascend_kv operator
(``torch.ops.ascend_kv.*``), so it keeps what the operators have: checks that name the
argument and write nothing on error, strided views, no host reads with device index tensors,
``torch.compile(fullgraph=True)`` and ``make_fx``. docs/porting_from_torch_npu.md has the
argument-by-argument table and the torch_npu sources each rule follows (torch-npu
2.10.0.post4, the version vllm-ascend 0.23 and main pin).

Where torch_npu differs from ascend_kv's Pythonic functions, this module follows torch_npu:
``npu_scatter_pa_kv_cache`` defaults to NZ (``cache_mode="PA_NZ"``) and takes NZ caches as
4-D ``[nb, H * D // E, bs, E]`` or per head as 5-D ``[nb, H, D // E, bs, E]``;
``npu_gather_pa_kv_cache`` gives zero rows for tokens whose block is ``-1``, out of range or
past the table; ``_npu_reshape_and_cache`` and ``atb.npu_paged_cache_load`` take the NZ layout
when both caches carry the FRACTAL_NZ storage format (29, after :func:`npu_format_cast` or
:func:`empty_with_format`; views such as ``kv[0]`` keep it, :mod:`ascend_kv.compat.formats`).
Errors are ``TypeError`` or ``ValueError`` and name torch_npu's arguments (``slot_indices``,
``block_tables``, ``seq_lens``, ``seq_offset``); a cache-shape error says which layout was
taken and why (``cache_mode``, or the storage formats).

Examples
--------
>>> from ascend_kv.compat import torch_npu
>>> key_cache = torch.zeros(4, 16, 2, 8)                       # ND [num_blocks, block_size, heads, head]
>>> value_cache = torch.zeros(4, 16, 2, 8)
>>> key = torch.ones(3, 2, 8)
>>> torch_npu._npu_reshape_and_cache(key=key, value=key, key_cache=key_cache, value_cache=value_cache,
...                                  slot_indices=torch.tensor([17, -1, 5], dtype=torch.int32))
>>> key_cache[1, 1].sum().item()
16.0
"""

from __future__ import annotations

import re
import types

import torch

from .. import KvCacheCfg, paged_cache_load, reshape_and_cache, scatter_nd_update
from ..api import arguments as common
from ..api.swap_batch import swap_blocks_batch as _swap_blocks_batch
from .formats import cache_layout, empty_with_format, get_npu_format, npu_format_cast

#: Marks this module as a stand-in for the real torch_npu (``ascend_kv.dispatch.device`` then sees no NPU library).
STAND_IN = True

#: torch_npu's ``cache_mode`` names of ``npu_scatter_pa_kv_cache`` (None is ``"Norm"``).
_CACHE_MODES = {"PA_NZ": "nz", "Norm": "nd", None: "nd"}

#: The operators' argument names, as torch_npu's functions name them (whole words; ``cumsum=`` as a keyword).
_RESHAPE_NAMES = {r"\bslot_mapping\b": "slot_indices"}
_GATHER_NAMES = {r"\bblock_table\b": "block_tables", r"\bcontext_lens\b": "seq_lens", r"\bseq_starts\b": "seq_offset",
                 r"\bcumsum=": "is_seq_lens_cumsum=", r"kv_cache_cfg = NZ": "NZ caches (both FRACTAL_NZ, 29)"}

#: A message about a cache's shape (the only ones a layout hint helps).
_CACHE_SHAPE_ERROR = re.compile(r"^(key|value)_cache\b.*shape", re.DOTALL)

#: What each layout takes, for the hints.
_ND_SHAPE = "ND caches [num_blocks, block_size, num_heads, head_size]"
_NZ_SHAPE = "NZ caches [num_blocks, num_heads * head_size // E, block_size, E]"


def _in_callers_words(error: TypeError | ValueError, names: dict[str, str], hint: str = "") -> None:
    """Rewrite ``error``'s message in place: ascend_kv's argument names replaced by torch_npu's (``names``,
    patterns to names), and ``hint`` appended to a message about a cache's shape. The caller re-raises it."""
    message = str(error)
    for pattern, name in names.items():
        message = re.sub(pattern, name, message)
    if hint and _CACHE_SHAPE_ERROR.match(message):
        message = f"{message}; {hint}"
    error.args = (message,)


def _format_hint(layout: str) -> str:
    """Where ``_npu_reshape_and_cache``'s and the loads' layout came from (the caches' storage formats)."""
    if layout == "nz":
        return f"both caches are FRACTAL_NZ (29), so the layout is NZ: {_NZ_SHAPE}"
    return (f"neither cache is FRACTAL_NZ (29), so the layout is ND: {_ND_SHAPE}; for NZ pass "
            f"npu_format_cast(cache, 29) of both")


# ----------------------------------------------------------------------------- the paged write


def _flat_slots(name: str, slots: torch.Tensor) -> None:
    """torch_npu's writes take flat slots only: refuse the ``[n, 2]`` pairs ascend_kv's own call takes."""
    if isinstance(slots, torch.Tensor) and slots.dim() != 1:
        raise ValueError(f"{name} must be a 1-D tensor of flat slots, as torch_npu takes it, got shape "
                         f"{tuple(slots.shape)} (ascend_kv.reshape_and_cache also takes [n, 2] pairs)")


def _npu_reshape_and_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_indices: torch.Tensor,
) -> None:
    """Write token ``i`` of ``key``/``value`` to slot ``slot_indices[i]`` of each cache, in place
    (torch_npu's ``_npu_reshape_and_cache``, ATB ReshapeAndCacheOperation).

    Parameters
    ----------
    key, value : torch.Tensor
        ``[num_tokens, num_heads, head_size_{k,v}]``; any token stride (K and V split from one
        projection).
    key_cache, value_cache : torch.Tensor
        ND ``[num_blocks, block_size, num_heads, head_size_{k,v}]``; NZ
        ``[num_blocks, num_heads * head_size // E, block_size, E]`` when both carry the
        FRACTAL_NZ format (29).
    slot_indices : torch.Tensor
        ``[n]`` int32 (int64 accepted), ``n <= num_tokens``; negative entries are padding.
        A slot named twice takes the last token naming it.

    Returns
    -------
    None
        As torch_npu: the caches are written in place.
    """
    _flat_slots("slot_indices", slot_indices)
    layout = cache_layout(key_cache, value_cache)
    try:
        reshape_and_cache(key, value, key_cache, value_cache, slot_indices, kv_cache_cfg=layout)
    except (TypeError, ValueError) as error:
        _in_callers_words(error, _RESHAPE_NAMES, _format_hint(layout))
        raise


def _npu_reshape_and_cache_siso(key: torch.Tensor, key_cache: torch.Tensor, slot_indices: torch.Tensor) -> None:
    """The key-only write (torch_npu's ``_npu_reshape_and_cache_siso``, ATB's ``K_CACHE_V_BYPASS``; MLA's latent cache).

    Parameters
    ----------
    key : torch.Tensor
        ``[num_tokens, num_heads, head_size]``.
    key_cache : torch.Tensor
        ND ``[num_blocks, block_size, num_heads, head_size]``, written in place.
    slot_indices : torch.Tensor
        ``[n]`` int32/int64, negative entries padding.

    Returns
    -------
    None
    """
    try:
        _flat_slots("slot_indices", slot_indices)
        reshape_and_cache(key, None, key_cache, None, slot_indices, kv_cache_cfg="nd")
    except (TypeError, ValueError) as error:
        _in_callers_words(error, _RESHAPE_NAMES)
        raise


def npu_scatter_pa_kv_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    *,
    compress_lens: torch.Tensor | None = None,
    compress_seq_offsets: torch.Tensor | None = None,
    seq_lens: torch.Tensor | None = None,
    cache_mode: str | None = "PA_NZ",
) -> None:
    """Write token ``i`` to slot ``slot_mapping[i]`` of each cache, in place (torch_npu's
    ``npu_scatter_pa_kv_cache``, its scenario one; default layout NZ).

    Parameters
    ----------
    key, value : torch.Tensor
        ``[num_tokens, num_heads, head_size_{k,v}]``; K and V may differ in dtype (int8 K and V
        under C8) and head size.
    key_cache, value_cache : torch.Tensor
        ``cache_mode="PA_NZ"`` (the default): NZ ``[num_blocks, num_heads * head_size // E,
        block_size, E]`` or per head ``[num_blocks, num_heads, head_size // E, block_size, E]``
        (``E = 32 // itemsize``), any storage format. ``"Norm"`` or None: ND
        ``[num_blocks, block_size, num_heads, head_size]``.
    slot_mapping : torch.Tensor
        ``[n]`` int32/int64, ``n <= num_tokens``; negative entries are padding.
    compress_lens, compress_seq_offsets, seq_lens : None
        torch_npu's head-compression scenario; not implemented here (``NotImplementedError``).
    cache_mode : str or None, optional
        ``"PA_NZ"`` (default), ``"Norm"`` or None.

    Returns
    -------
    None
        As torch_npu: the caches are written in place.
    """
    given = [name for name, arg in (("compress_lens", compress_lens), ("compress_seq_offsets", compress_seq_offsets),
                                    ("seq_lens", seq_lens)) if arg is not None]
    if given:
        raise NotImplementedError(
            f"npu_scatter_pa_kv_cache: {', '.join(given)} (torch_npu's head-compression scenario, 4-D key/value) "
            f"is not implemented by ascend_kv; pass none of them"
        )
    if cache_mode is not None and not isinstance(cache_mode, str):
        raise TypeError(f"cache_mode must be a str or None, got {common.describe(cache_mode)}")
    if cache_mode not in _CACHE_MODES:
        raise ValueError(f"cache_mode must be 'PA_NZ', 'Norm' or None, got {cache_mode!r}")
    layout = _CACHE_MODES[cache_mode]
    key, value = common.tensor_argument("key", key), common.tensor_argument("value", value)
    if key.dim() == 4:
        raise NotImplementedError(
            "npu_scatter_pa_kv_cache: a 4-D key [batch, seq_len, num_heads, head_size] is torch_npu's "
            "head-compression scenario, not implemented by ascend_kv; pass [num_tokens, num_heads, head_size]"
        )
    _flat_slots("slot_mapping", slot_mapping)
    try:
        if layout == "nz":
            key_cache = _nz_cache("key_cache", common.tensor_argument("key_cache", key_cache), key)
            value_cache = _nz_cache("value_cache", common.tensor_argument("value_cache", value_cache), value)
        reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, kv_cache_cfg=layout)
    except (TypeError, ValueError) as error:
        _in_callers_words(error, {}, _mode_hint(cache_mode))
        raise


def _mode_hint(cache_mode: str | None) -> str:
    """What ``cache_mode`` takes, for a cache-shape error (a forgotten ``cache_mode="Norm"`` is the usual one)."""
    if cache_mode == "PA_NZ":
        return (f"cache_mode='PA_NZ' (torch_npu's default) takes {_NZ_SHAPE} or per head [num_blocks, num_heads, "
                f"head_size // E, block_size, E]; {_ND_SHAPE} need cache_mode='Norm'")
    return f"cache_mode={cache_mode!r} takes {_ND_SHAPE}; NZ caches need cache_mode='PA_NZ'"


def _nz_cache(name: str, cache: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """A 4-D NZ cache from ``cache``: itself, or the view ``[nb, H * (D // E), bs, E]`` of a 5-D
    per-head cache ``[nb, H, D // E, bs, E]`` (the same bytes, heads one after another)."""
    if cache.dim() != 5:
        return cache
    heads = tokens.shape[1] if tokens.dim() == 3 else None
    if heads is not None and cache.shape[1] != heads:
        raise ValueError(
            f"{name}.shape[1] (num_heads) = {cache.shape[1]} of the 5-D NZ cache [num_blocks, num_heads, "
            f"head_size // E, block_size, E] must equal {name.removesuffix('_cache')}.shape[1] = {heads}"
        )
    try:
        return cache.view(cache.shape[0], cache.shape[1] * cache.shape[2], cache.shape[3], cache.shape[4])
    except RuntimeError as error:
        raise ValueError(
            f"{name}: the 5-D NZ cache of shape {tuple(cache.shape)} and strides {cache.stride()} is not viewable as "
            f"[num_blocks, num_heads * head_size // E, block_size, E] (its head and head_size // E dims must be "
            f"adjacent in memory)"
        ) from error


# ----------------------------------------------------------------------------- the paged load


def npu_gather_pa_kv_cache(
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    seq_offset: torch.Tensor | None = None,
    is_seq_lens_cumsum: bool = False,
) -> None:
    """Gather each sequence's tokens into ``key`` and ``value`` in place (torch_npu's ``npu_gather_pa_kv_cache``).

    Batch entry ``b`` has ``seq_lens[b]`` tokens (``seq_lens[b + 1] - seq_lens[b]`` when
    ``is_seq_lens_cumsum``, with ``seq_lens[0] == 0`` as torch_npu documents); token ``j`` is
    slot ``j % block_size`` of block ``block_tables[b, seq_offset[b] // block_size + j //
    block_size]`` and goes to the next output row. A token whose column is past the table or
    whose block id is outside ``[0, num_blocks)`` (``-1`` padding) gives a zero row, as
    torch_npu's golden does.

    Parameters
    ----------
    key_cache, value_cache : torch.Tensor
        ND ``[num_blocks, block_size, num_heads, head_size_{k,v}]``; NZ
        ``[num_blocks, T // E, block_size, E]`` when both carry FRACTAL_NZ (29).
    block_tables : torch.Tensor
        ``[batch, max_blocks]`` int32/int64.
    seq_lens : torch.Tensor
        ``[batch]`` lengths, or ``[batch + 1]`` cumulative lengths.
    key, value : torch.Tensor
        Outputs written in place: ND ``[rows, num_heads, head_size_{k,v}]``, NZ ``[rows, T]``
        (or ``[rows, num_heads, head_size]``), ``rows`` at least the token count.
    seq_offset : torch.Tensor, optional
        ``[batch]`` token offsets; only the whole blocks count (ND only).
    is_seq_lens_cumsum : bool, optional
        ``seq_lens`` holds cumulative lengths (ND only).

    Returns
    -------
    None
        As torch_npu: ``key`` and ``value`` are written in place.
    """
    for name, arg in (("key_cache", key_cache), ("value_cache", value_cache), ("block_tables", block_tables),
                      ("seq_lens", seq_lens), ("key", key), ("value", value), ("seq_offset", seq_offset)):
        if arg is not None or name != "seq_offset":  # the operator's schema would raise RuntimeError instead
            common.tensor_argument(name, arg)
    cumsum = common.bool_argument("is_seq_lens_cumsum", is_seq_lens_cumsum)
    layout = cache_layout(key_cache, value_cache)
    try:
        if layout == "nz":
            key, value = _token_rows("key", key), _token_rows("value", value)
        torch.ops.ascend_kv.paged_cache_load.into(
            key_cache, value_cache, block_tables, seq_lens, key, value,
            int(KvCacheCfg.K_CACHE_V_CACHE_NZ if layout == "nz" else KvCacheCfg.K_CACHE_V_CACHE_ND),
            cumsum, seq_offset, True)  # zero_fill=True: torch_npu's golden zero-fills rows of -1 / absent blocks
    except (TypeError, ValueError) as error:
        _in_callers_words(error, _GATHER_NAMES, _format_hint(layout))
        raise


def _token_rows(name: str, out: torch.Tensor) -> torch.Tensor:
    """An NZ output as ``[rows, T]``: itself, or the view of a ``[rows, num_heads, head_size]`` one."""
    if out.dim() != 3:
        return out
    try:
        return out.view(out.shape[0], out.shape[1] * out.shape[2])
    except RuntimeError as error:
        raise ValueError(f"{name}: a 3-D NZ output must be viewable as [rows, num_heads * head_size], got shape "
                         f"{tuple(out.shape)} and strides {out.stride()}") from error


def _atb_paged_cache_load(
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    context_lens: torch.Tensor,
    *,
    seq_starts: torch.Tensor | None = None,
    cumsum: bool = False,
    key: torch.Tensor | None = None,
    value: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """torch_npu's ``atb.npu_paged_cache_load`` (ATB PagedCacheLoadOperation): :func:`ascend_kv.paged_cache_load`
    with the layout taken from the caches' storage format (NZ when both are FRACTAL_NZ, else ND).

    Parameters
    ----------
    key_cache, value_cache : torch.Tensor
        ND ``[num_blocks, block_size, num_heads, head_size_{k,v}]``; NZ
        ``[num_blocks, T // E, block_size, E]`` when both carry FRACTAL_NZ (29).
    block_table : torch.Tensor
        ``[batch, max_blocks]`` int32/int64.
    context_lens : torch.Tensor
        ``[batch]`` lengths, or ``[batch + 1]`` cumulative ones with ``cumsum``.
    seq_starts : torch.Tensor, optional
        ``[batch]`` token offsets; whole blocks (ND only).
    cumsum : bool, optional
        ``context_lens`` holds cumulative lengths (ND only).
    key, value : torch.Tensor, optional
        Outputs written in place: ND ``[rows, num_heads, head_size_{k,v}]``, NZ ``[rows, T]``.

    Returns
    -------
    tuple of torch.Tensor
        ``(key, value)``: the given outputs, or new zero-filled ones with ``num_tokens`` rows.
    """
    layout = cache_layout(key_cache, value_cache)
    try:
        return paged_cache_load(key_cache, value_cache, block_table, context_lens, kv_cache_cfg=layout, cumsum=cumsum,
                                seq_starts=seq_starts, key=key, value=value)
    except (TypeError, ValueError) as error:
        _in_callers_words(error, {}, _format_hint(layout))
        raise


_atb_paged_cache_load.__name__ = _atb_paged_cache_load.__qualname__ = "npu_paged_cache_load"


# ----------------------------------------------------------------------------- vllm-ascend's transfer op


def swap_blocks_batch(src_ptrs: torch.Tensor, dst_ptrs: torch.Tensor, sizes: torch.Tensor, direction: int) -> None:
    """vllm-ascend's ``torch.ops._C_ascend.swap_blocks_batch(src_ptrs, dst_ptrs, sizes, direction)``.

    Copy ``sizes[i]`` bytes from ``src_ptrs[i]`` to ``dst_ptrs[i]`` (int64 host tables), queued
    on the current NPU stream; ``direction`` 0 host to device, 1 device to host, 2 device to
    device. The rules and the run are :func:`ascend_kv.swap_blocks_batch`'s.
    """
    _swap_blocks_batch(src_ptrs, dst_ptrs, sizes, direction=direction)


def npu_dynamic_quant(x: torch.Tensor, *, smooth_scales: torch.Tensor | None = None,
                      group_index: torch.Tensor | None = None,
                      dst_type: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """torch_npu's per-token dynamic quantization, the quantizer vllm-ascend's KV path calls before a scatter.

    Each row of the last dimension is quantized with its own scale, with the arithmetic of
    :func:`ascend_kv.reshape_and_cache`'s dynamic scheme (docs/semantics.md#quantized-caches): int8 as
    the A2/A3 kernel (``x * fl32(127 / amax)``, round half to even), fp8 as the Ascend 950 kernel
    (``x / (amax * fl32(1 / max))``, NaN to 0). So this followed by a byte scatter writes what one
    ``reshape_and_cache(..., k_scale_cache=)`` call writes.

    Parameters
    ----------
    x : torch.Tensor
        ``[..., D]`` float16, bfloat16 or float32.
    smooth_scales, group_index : torch.Tensor, optional
        Not supported (``NotImplementedError``).
    dst_type : torch.dtype, optional
        ``torch.int8`` (default), ``torch.float8_e4m3fn`` or ``torch.float8_e5m2``;
        ``torch.quint4x2`` is not supported (``NotImplementedError``).

    Returns
    -------
    tuple of torch.Tensor
        ``(y, scale)``: codes ``[..., D]`` of ``dst_type`` and float32 scales ``[...]``
        (``x ≈ y * scale[..., None]``).
    """
    from ..tools.reference import quantize_dynamic

    if smooth_scales is not None or group_index is not None:
        raise NotImplementedError("npu_dynamic_quant: smooth_scales and group_index are not supported by ascend_kv")
    dtype = torch.int8 if dst_type is None else dst_type
    if dtype == torch.quint4x2:
        raise NotImplementedError("npu_dynamic_quant: dst_type=torch.quint4x2 (int4) is not supported by ascend_kv")
    if dtype not in (torch.int8, torch.float8_e4m3fn, torch.float8_e5m2):
        raise TypeError(f"dst_type must be torch.int8, torch.float8_e4m3fn or torch.float8_e5m2, got {dtype}")
    common.tensor_argument("x", x)
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise TypeError(f"x must have dtype float16, bfloat16 or float32, got {x.dtype}")
    rows = x.reshape(-1, 1, x.shape[-1])
    y, scale = quantize_dynamic(rows, dtype)
    return y.reshape(x.shape), scale.reshape(x.shape[:-1])


# ----------------------------------------------------------------------------- ScatterNdUpdate


def _nd_rows(input: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """torch_npu's batched index tuples ``[..., k]`` and updates ``[..., *input.shape[k:]]`` as
    :func:`ascend_kv.scatter_nd_update`'s ``[n, k]`` and ``[n, *input.shape[k:]]``."""
    common.tensor_argument("input", input)
    common.tensor_argument("indices", indices)
    common.tensor_argument("updates", updates)
    if indices.dim() < 2:
        raise ValueError(f"indices must have at least 2 dims [..., k], got shape {tuple(indices.shape)}")
    k = indices.shape[-1]
    expected = (*indices.shape[:-1], *input.shape[k:])
    if tuple(updates.shape) != expected:
        raise ValueError(f"updates must have shape indices.shape[:-1] + input.shape[{k}:] = {expected}, "
                         f"got {tuple(updates.shape)}")
    return indices.reshape(-1, k), updates.reshape(-1, *input.shape[k:])


def npu_scatter_nd_update_(input: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor) -> torch.Tensor:
    """torch_npu's in-place ScatterNdUpdate: ``input[tuple(indices[j])] = updates[j]`` for every ``j``
    of ``indices.shape[:-1]``, and ``input`` returned.

    ``indices`` is ``[..., k]`` with k = 1 or 2 (int32/int64); an index with a negative component
    is padding (vllm-ascend's "unique valid destinations or -1"). The rules and the run are
    :func:`ascend_kv.scatter_nd_update`'s (docs/semantics.md §15.1).

    Examples
    --------
    >>> cache = torch.zeros(4, 2, 3)
    >>> _ = npu_scatter_nd_update_(cache.view(-1, 3), torch.tensor([[5], [-1]]), torch.ones(2, 3))
    >>> cache[2, 1].tolist()
    [1.0, 1.0, 1.0]
    """
    flat_indices, rows = _nd_rows(input, indices, updates)
    return scatter_nd_update(input, flat_indices, rows)


def npu_scatter_nd_update(input: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor) -> torch.Tensor:
    """torch_npu's out-of-place ScatterNdUpdate: :func:`npu_scatter_nd_update_` on a copy of ``input``,
    which is returned (``input`` unchanged)."""
    flat_indices, rows = _nd_rows(input, indices, updates)
    return scatter_nd_update(input.clone(), flat_indices, rows)


#: ``torch_npu.atb``: the ATB operations torch_npu exposes (here: the paged load).
atb = types.ModuleType(f"{__name__}.atb", "torch_npu.atb's npu_paged_cache_load, run by ascend_kv.")
atb.npu_paged_cache_load = _atb_paged_cache_load  # type: ignore[attr-defined]

__all__ = [
    "_npu_reshape_and_cache",
    "_npu_reshape_and_cache_siso",
    "atb",
    "empty_with_format",
    "get_npu_format",
    "npu_dynamic_quant",
    "npu_format_cast",
    "npu_gather_pa_kv_cache",
    "npu_scatter_nd_update",
    "npu_scatter_nd_update_",
    "npu_scatter_pa_kv_cache",
    "swap_blocks_batch",
]
