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
when both caches carry the FRACTAL_NZ storage format (29, after :func:`npu_format_cast`).

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

import types

import torch

from ..api.ops import paged_cache_load, reshape_and_cache
from ..api.params import KvCacheCfg
from ..dispatch import device as runtime
from ..api import arguments as common

#: Marks this module as a stand-in for the real torch_npu (``ascend_kv.dispatch.device`` then sees no NPU library).
STAND_IN = True

#: ACL storage formats :func:`npu_format_cast` takes (torch_npu's ``torch_npu.Format`` values).
FORMAT_ND = 2
FORMAT_FRACTAL_NZ = 29

#: torch_npu's ``cache_mode`` names of ``npu_scatter_pa_kv_cache`` (None is ``"Norm"``).
_CACHE_MODES = {"PA_NZ": "nz", "Norm": "nd", None: "nd"}

#: The attribute that carries a non-NPU tensor's format (an NPU tensor's storage has its own).
_FORMAT_ATTRIBUTE = "_ascend_kv_npu_format"


# ----------------------------------------------------------------------------- storage formats


def get_npu_format(tensor: torch.Tensor) -> int:
    """The ACL storage format of ``tensor``: 2 (ND) or 29 (FRACTAL_NZ), as torch_npu's ``get_npu_format``.

    An NPU tensor reports its storage's format; any other tensor the format
    :func:`npu_format_cast` tagged it with, else 2.
    """
    tensor = common.tensor_argument("tensor", tensor)
    if runtime.is_npu(tensor.device):
        code = runtime.storage_format(tensor)
        return FORMAT_ND if code is None else code
    return int(getattr(tensor, _FORMAT_ATTRIBUTE, FORMAT_ND))


def npu_format_cast(tensor: torch.Tensor, acl_format: int) -> torch.Tensor:
    """``tensor`` in storage format ``acl_format`` (2 = ND, 29 = FRACTAL_NZ), as torch_npu's ``npu_format_cast``.

    On an NPU this is torch_npu's own cast (the bytes are rearranged there). On any other
    device the result has the same shape and bytes (a view of ``tensor``), tagged with the
    format: the way torch_npu's tests use it, on caches already shaped
    ``[num_blocks, T // E, block_size, E]``, whose FRACTAL_NZ bytes are their row-major bytes.
    The tag belongs to the returned tensor object (views taken from it later are ND), so cast
    the per-layer caches that the cache ops are given.

    Parameters
    ----------
    tensor : torch.Tensor
        Any tensor.
    acl_format : int
        2 or 29 (or a ``torch_npu.Format`` member of either value).

    Returns
    -------
    torch.Tensor
        The tensor in the new format.
    """
    tensor = common.tensor_argument("tensor", tensor)
    code = common.int_argument("acl_format", getattr(acl_format, "value", acl_format))
    if code not in (FORMAT_ND, FORMAT_FRACTAL_NZ):
        raise ValueError(f"acl_format must be {FORMAT_ND} (ND) or {FORMAT_FRACTAL_NZ} (FRACTAL_NZ), got {code}")
    if runtime.is_npu(tensor.device):
        real = runtime.torch_npu().module
        if real is None or not hasattr(real, "npu_format_cast"):
            raise RuntimeError(
                "npu_format_cast of an NPU tensor is torch_npu's own cast, and torch_npu is not loaded here"
            )
        cast: torch.Tensor = real.npu_format_cast(tensor, code)
        return cast
    cast = tensor.view(tensor.shape)
    setattr(cast, _FORMAT_ATTRIBUTE, code)
    return cast


def _storage_layout(key_cache: object, value_cache: object) -> KvCacheCfg:
    """NZ when both caches carry FRACTAL_NZ, ND when neither does (torch_npu's choice); one of each is an error."""
    formats = [get_npu_format(common.tensor_argument(name, cache))
               for name, cache in (("key_cache", key_cache), ("value_cache", value_cache))]
    if formats == [FORMAT_FRACTAL_NZ] * 2:
        return KvCacheCfg.K_CACHE_V_CACHE_NZ
    if FORMAT_FRACTAL_NZ in formats:
        raise ValueError(
            f"key_cache has storage format {formats[0]} but value_cache has {formats[1]}: the layout (NZ when "
            f"both are FRACTAL_NZ = 29, else ND) needs one format for both; npu_format_cast both caches"
        )
    return KvCacheCfg.K_CACHE_V_CACHE_ND


# ----------------------------------------------------------------------------- the paged write


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
    layout = _storage_layout(key_cache, value_cache)
    reshape_and_cache(key, value, key_cache, value_cache, slot_indices,
                      kv_cache_cfg="nz" if layout == KvCacheCfg.K_CACHE_V_CACHE_NZ else "nd")


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
    reshape_and_cache(key, None, key_cache, None, slot_indices, kv_cache_cfg="nd")


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
    if cache_mode not in _CACHE_MODES:
        raise ValueError(f"cache_mode must be 'PA_NZ', 'Norm' or None, got {cache_mode!r}")
    layout = _CACHE_MODES[cache_mode]
    key, value = common.tensor_argument("key", key), common.tensor_argument("value", value)
    if key.dim() == 4:
        raise NotImplementedError(
            "npu_scatter_pa_kv_cache: a 4-D key [batch, seq_len, num_heads, head_size] is torch_npu's "
            "head-compression scenario, not implemented by ascend_kv; pass [num_tokens, num_heads, head_size]"
        )
    if layout == "nz":
        key_cache = _nz_cache("key_cache", common.tensor_argument("key_cache", key_cache), key)
        value_cache = _nz_cache("value_cache", common.tensor_argument("value_cache", value_cache), value)
    reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, kv_cache_cfg=layout)


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
    layout = _storage_layout(key_cache, value_cache)
    key, value = common.tensor_argument("key", key), common.tensor_argument("value", value)
    if layout == KvCacheCfg.K_CACHE_V_CACHE_NZ:
        key, value = _token_rows("key", key), _token_rows("value", value)
    cumsum = common.bool_argument("is_seq_lens_cumsum", is_seq_lens_cumsum)
    torch.ops.ascend_kv.paged_cache_load.into(key_cache, value_cache, block_tables, seq_lens, key, value, int(layout),
                                              cumsum, seq_offset, True)  # zero_fill=True


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

    Returns
    -------
    tuple of torch.Tensor
        ``(key, value)``: the given outputs, or new zero-filled ones with ``num_tokens`` rows.
    """
    return paged_cache_load(key_cache, value_cache, block_table, context_lens,
                            kv_cache_cfg=_storage_layout(key_cache, value_cache), cumsum=cumsum,
                            seq_starts=seq_starts, key=key, value=value)


_atb_paged_cache_load.__name__ = _atb_paged_cache_load.__qualname__ = "npu_paged_cache_load"

#: ``torch_npu.atb``: the ATB operations torch_npu exposes (here: the paged load).
atb = types.ModuleType(f"{__name__}.atb", "torch_npu.atb's npu_paged_cache_load, run by ascend_kv.")
atb.npu_paged_cache_load = _atb_paged_cache_load  # type: ignore[attr-defined]

__all__ = [
    "_npu_reshape_and_cache",
    "_npu_reshape_and_cache_siso",
    "atb",
    "get_npu_format",
    "npu_format_cast",
    "npu_gather_pa_kv_cache",
    "npu_scatter_pa_kv_cache",
]
