"""The public operations: each normalises its arguments and calls its operator, once.

``torch.ops.ascend_kv.*`` (C++, loaded by :mod:`ascend_kv.operators.library`) does the rest:
PyTorch's dispatcher picks the implementation for the tensors' device, which checks the call and
runs a backend. Nothing here runs torch code, so ``torch.compile`` traces a public call as
exactly one operator.
"""

from __future__ import annotations

import torch

from ..operators import library
from . import arguments as common
from .arguments import kv_cache_cfg_argument, reshape_and_cache_layout
from .params import KvCacheCfg, KVCacheParam, PagedCacheLoadParam, ReshapeAndCacheParam

library.load()
# The overloads each public function calls, looked up once.
_KV_CACHE = torch.ops.ascend_kv.kv_cache.default
_KV_CACHE_LAYER_TENSOR = torch.ops.ascend_kv.kv_cache.layer_tensor
_PAGED_CACHE_LOAD = torch.ops.ascend_kv.paged_cache_load.default
_PAGED_CACHE_LOAD_INTO = torch.ops.ascend_kv.paged_cache_load.into
_RESHAPE_AND_CACHE = torch.ops.ascend_kv.reshape_and_cache.default
_PAGED_CACHE_LOAD_DEQUANT = torch.ops.ascend_kv.paged_cache_load.dequant
_PAGED_CACHE_LOAD_DEQUANT_INTO = torch.ops.ascend_kv.paged_cache_load.dequant_into
_RESHAPE_AND_CACHE_QUANT = torch.ops.ascend_kv.reshape_and_cache.quant


def kv_cache(
    new_kv: torch.Tensor,
    layer_id: int | torch.Tensor,
    past: torch.Tensor,
    token_offset: torch.Tensor,
    seq_len: torch.Tensor,
) -> torch.Tensor:
    """Write a batch's new K (or V) tokens into a per-layer cache, in place (ATB KVCacheOperation).

    For each batch entry ``i`` its ``seq_len[i]`` tokens (taken in order from ``new_kv``) go to
    positions ``token_offset[i] - seq_len[i] .. token_offset[i] - 1`` of ``past[layer_id, i]``.

    Parameters
    ----------
    new_kv : torch.Tensor
        ``[ntokens, hidden]``, or ``[batch, seq, num_heads, head_size]`` read as its flat token
        list; any 1-, 2- or 4-byte element type (docs/semantics.md#element-types), the dtype of
        ``past``. Any strides.
    layer_id : int or torch.Tensor
        The layer to write: an int or a one-element integer tensor, ``0 <= layer_id < layers``.
    past : torch.Tensor
        ``[layers, batch, max_seq_len, hidden]``, written in place; ``hidden * itemsize`` a
        multiple of 32 bytes.
    token_offset : torch.Tensor
        ``[batch]`` int32 or int64: the position *after* each entry's last new token,
        ``seq_len[i] <= token_offset[i] <= max_seq_len``.
    seq_len : torch.Tensor
        ``[batch]`` int32 or int64: new tokens per entry, ``>= 0``, summing to ``ntokens``.

    Returns
    -------
    torch.Tensor
        ``past`` itself (ATB's ``present`` aliases ``past``).

    Raises
    ------
    TypeError
        A wrong type or dtype. Nothing is written.
    ValueError
        A wrong shape or value. Nothing is written.

    Examples
    --------
    >>> past = torch.zeros(2, 2, 8, 16, dtype=torch.float16)    # 2 layers, 2 sequences
    >>> new_kv = torch.ones(3, 16, dtype=torch.float16)         # 1 + 2 new tokens
    >>> out = ascend_kv.kv_cache(new_kv, 1, past, torch.tensor([4, 2]), torch.tensor([1, 2]))
    >>> out is past, past[1, 0, 3].sum().item(), past[1, 1, :2].sum().item()
    (True, 16.0, 32.0)
    """
    if not type(new_kv) is type(past) is type(token_offset) is type(seq_len) is torch.Tensor:
        _tensors(new_kv=new_kv, past=past, token_offset=token_offset, seq_len=seq_len)
    if type(layer_id) is int and -(2**63) <= layer_id < 2**63:  # the usual case, without the tests below
        _KV_CACHE(new_kv, layer_id, past, token_offset, seq_len)
    elif isinstance(layer_id, torch.Tensor):
        _KV_CACHE_LAYER_TENSOR(new_kv, common.tensor_argument("layer_id", layer_id), past, token_offset, seq_len)
    else:
        _KV_CACHE(new_kv, common.int64_argument("layer_id", layer_id), past, token_offset, seq_len)
    return past


def paged_cache_load(
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    context_lens: torch.Tensor,
    *,
    kv_cache_cfg: KvCacheCfg | int | str = KvCacheCfg.K_CACHE_V_CACHE_NZ,
    cumsum: bool = False,
    seq_starts: torch.Tensor | None = None,
    key: torch.Tensor | None = None,
    value: torch.Tensor | None = None,
    k_scale: torch.Tensor | None = None,
    k_offset: torch.Tensor | None = None,
    k_scale_cache: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    v_offset: torch.Tensor | None = None,
    v_scale_cache: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gather the tokens of a paged K/V cache into contiguous K and V (ATB PagedCacheLoadOperation).

    Batch entry ``b`` reads ``lens[b]`` tokens: token ``j`` is slot ``j % block_size`` of block
    ``block_table[b, col0 + j // block_size]``, with ``col0 = seq_starts[b] // block_size``
    (0 without ``seq_starts``; the remainder of ``seq_starts[b]`` is ignored, as in ATB). Entry
    ``b`` fills output rows ``out_start[b] ..``, where by default ``lens = context_lens`` and
    ``out_start`` is its exclusive prefix sum; with ``cumsum=True``,
    ``lens = diff(context_lens)`` and ``out_start = context_lens[:-1]``.

    Parameters
    ----------
    key_cache, value_cache : torch.Tensor
        Any 1-, 2- or 4-byte element type each (docs/semantics.md#element-types).
        ND: ``[num_blocks, block_size, num_heads, head_size_{k,v}]``, with
        ``num_heads * head_size * itemsize`` a multiple of 32 bytes.
        NZ: ``[num_blocks, num_heads * head_size_{k,v} // E, block_size, E]`` with
        ``E = 32 // itemsize`` (32, 16 or 8), ``block_size % 16 == 0``, rows of at most 147456
        bytes.
        Build NZ caches with :func:`ascend_kv.nd_to_nz`.
    block_table : torch.Tensor
        ``[batch, max_blocks]`` int32 or int64. Every entry a token needs must be in
        ``[0, num_blocks)``; entries no token needs are ignored (``-1`` padding is fine).
    context_lens : torch.Tensor
        ``[batch]`` int32/int64 lengths, or ``[batch + 1]`` non-decreasing cumulative lengths
        when ``cumsum=True``.
    kv_cache_cfg : KvCacheCfg, int or str, optional
        Cache layout: ``KvCacheCfg.K_CACHE_V_CACHE_NZ`` (0, ``"nz"``, the default, as in ATB)
        or ``KvCacheCfg.K_CACHE_V_CACHE_ND`` (1, ``"nd"``).
    cumsum : bool, optional
        Read ``context_lens`` as cumulative lengths (ND only).
    seq_starts : torch.Tensor, optional
        ``[batch]`` int32/int64 token offsets into each block-table row (ND only).
    key, value : torch.Tensor, optional
        Outputs to write in place: ND ``[rows, num_heads, head_size_{k,v}]``, NZ
        ``[rows, num_heads * head_size_{k,v}]``, the caches' dtypes, ``rows >= num_tokens``
        (rows past those written are untouched). Allocated zero-filled when omitted. Each
        must be apart from the caches and from the other: two views of one buffer may be
        given when they split its rows (``buf[:, 0]`` and ``buf[:, 1]``, or two column ranges).
    k_scale, k_offset, k_scale_cache, v_scale, v_offset, v_scale_cache : torch.Tensor, optional
        Dequantize a side whose cache holds int8 or fp8 codes (docs/semantics.md#quantized-caches):
        ``k_scale`` the static dequantization scale (one element, ``[H]``/``[H, 1]``/``[1, H, 1]``
        per head, ``[H*D]``/``[H, D]``/``[1, H, D]`` per channel; float16/bfloat16/float32) with
        an optional int8 zero point ``k_offset`` of the same shapes, or ``k_scale_cache``
        ``[num_blocks, block_size, H]`` (or ``[..., 1]``) the per-token scales of a dynamic write.
        The output is ``(q - offset) * scale`` in float32, rounded once.
    out_dtype : torch.dtype, optional
        float16, bfloat16 or float32: the dequantized outputs' dtype; required when they are
        allocated, else the given outputs' dtype.

    Returns
    -------
    tuple of torch.Tensor
        ``(key, value)``: the given outputs, or new ones with ``num_tokens`` rows, where
        ``num_tokens = sum(context_lens)``, or ``context_lens[-1]`` in cumsum mode.

    Raises
    ------
    TypeError
        A wrong type or dtype. Nothing is written.
    ValueError
        A wrong shape or value, or NZ with ``cumsum``/``seq_starts``. Nothing is written.

    Examples
    --------
    >>> cache = torch.arange(4 * 16 * 1 * 16, dtype=torch.float16).reshape(4, 16, 1, 16)
    >>> key, value = ascend_kv.paged_cache_load(
    ...     cache, cache, torch.tensor([[2, 0], [1, -1]]), torch.tensor([20, 3]), kv_cache_cfg="nd")
    >>> key.shape, bool((key[16] == cache[0, 0]).all())
    (torch.Size([23, 1, 16]), True)
    """
    if not type(key_cache) is type(value_cache) is type(block_table) is type(context_lens) is torch.Tensor:
        _tensors(key_cache=key_cache, value_cache=value_cache, block_table=block_table, context_lens=context_lens)
    if not ((seq_starts is None or type(seq_starts) is torch.Tensor) and (key is None or type(key) is torch.Tensor)
            and (value is None or type(value) is torch.Tensor)):
        _tensors(seq_starts=seq_starts, key=key, value=value, optional=True)
    options = _load_options(kv_cache_cfg, cumsum, seq_starts)
    if not (k_scale is None and k_offset is None and k_scale_cache is None and v_scale is None and v_offset is None
            and v_scale_cache is None and out_dtype is None):
        return _dequantizing_load(key_cache, value_cache, block_table, context_lens, options, key, value,
                                  (k_scale, k_offset, k_scale_cache, v_scale, v_offset, v_scale_cache), out_dtype)
    if key is None and value is None:
        loaded: tuple[torch.Tensor, torch.Tensor] = _PAGED_CACHE_LOAD(key_cache, value_cache, block_table,
                                                                      context_lens, *options)
        return loaded
    if key is None or value is None:
        given, missing = ("key", "value") if value is None else ("value", "key")
        raise ValueError(f"{missing} is None but {given} is given: pass both outputs, or neither to allocate them")
    _PAGED_CACHE_LOAD_INTO(key_cache, value_cache, block_table, context_lens, key, value, *options)
    return key, value


def _dequantizing_load(key_cache: torch.Tensor, value_cache: torch.Tensor, block_table: torch.Tensor,
                       context_lens: torch.Tensor, options: tuple[object, ...], key: torch.Tensor | None,
                       value: torch.Tensor | None, quant: tuple[torch.Tensor | None, ...],
                       out_dtype: object) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`paged_cache_load` with a quantization argument: the ``dequant`` overloads."""
    _tensors(optional=True, **dict(zip(_LOAD_QUANT_NAMES, quant)))
    if out_dtype is not None and not isinstance(out_dtype, torch.dtype):
        raise TypeError(f"out_dtype must be a torch.dtype or None, got {type(out_dtype).__name__}")
    layout, cumsum, seq_starts = options + _LOAD_DEFAULTS[len(options):]
    if key is None and value is None:
        loaded: tuple[torch.Tensor, torch.Tensor] = _PAGED_CACHE_LOAD_DEQUANT(
            key_cache, value_cache, block_table, context_lens, layout, cumsum, seq_starts, False, *quant, out_dtype)
        return loaded
    if key is None or value is None:
        given, missing = ("key", "value") if value is None else ("value", "key")
        raise ValueError(f"{missing} is None but {given} is given: pass both outputs, or neither to allocate them")
    _PAGED_CACHE_LOAD_DEQUANT_INTO(key_cache, value_cache, block_table, context_lens, key, value, layout, cumsum,
                                   seq_starts, False, *quant, out_dtype)
    return key, value


_LOAD_QUANT_NAMES = ("k_scale", "k_offset", "k_scale_cache", "v_scale", "v_offset", "v_scale_cache")
#: The operator's options (kv_cache_cfg, cumsum, seq_starts) when left out of _load_options' tuple.
_LOAD_DEFAULTS: tuple[object, ...] = (int(KvCacheCfg.K_CACHE_V_CACHE_NZ), False, None)
_WRITE_QUANT_NAMES = ("k_scale", "k_inv_scale", "k_offset", "k_scale_cache", "v_scale", "v_inv_scale", "v_offset",
                      "v_scale_cache")


def reshape_and_cache(
    key: torch.Tensor,
    value: torch.Tensor | None,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor | None,
    slot_mapping: torch.Tensor,
    *,
    kv_cache_cfg: str | ReshapeAndCacheParam.KvCacheCfg = "nd",
    k_scale: torch.Tensor | None = None,
    k_inv_scale: torch.Tensor | None = None,
    k_offset: torch.Tensor | None = None,
    k_scale_cache: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    v_inv_scale: torch.Tensor | None = None,
    v_offset: torch.Tensor | None = None,
    v_scale_cache: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Write new tokens into a paged K/V cache at the slots ``slot_mapping`` names, in place
    (ATB ReshapeAndCacheOperation).

    Token ``i < len(slot_mapping)`` goes to slot ``s = slot_mapping[i]`` of each cache: block
    ``s // block_size``, position ``s % block_size``. Negative slots are padding (nothing is
    written); tokens past ``len(slot_mapping)`` are not written.

    Parameters
    ----------
    key : torch.Tensor
        ``[num_tokens, num_heads, head_size_k]``, ``key_cache.dtype``; any strides.
    value : torch.Tensor or None
        ``[num_tokens, num_heads, head_size_v]``, ``value_cache.dtype``; None (with
        ``value_cache=None``) for the key-only mode (ND only; ATB's ``K_CACHE_V_BYPASS``, MLA).
    key_cache, value_cache : torch.Tensor
        Any 1-, 2- or 4-byte element type each, the dtype of ``key``/``value``
        (docs/semantics.md#element-types). ND: ``[num_blocks, block_size, num_heads, head_size]``,
        rows of any size. NZ: ``[num_blocks, num_heads * head_size // E, block_size, E]`` with
        ``E = 32 // itemsize``, ``block_size % 16 == 0``, each head a multiple of 32 bytes below
        98304.
        The caches share ``num_blocks`` and ``block_size``; head sizes may differ (MLA 512 + 64).
        Written in place; strided views (column slices, blocks of one K/V buffer) are fine.
    slot_mapping : torch.Tensor
        ``[n]`` int32 or int64, ``n <= num_tokens``. Every non-negative slot is below
        ``num_blocks * block_size`` and appears once. Or ``[n, 2]`` ``(block, offset)`` pairs
        (DeepSeek's sparse-attention caches on A2/A3): token ``i`` goes to block
        ``slot_mapping[i, 0]``, position ``slot_mapping[i, 1]``; a pair with a negative component
        is padding, any other inside ``(num_blocks, block_size)`` (docs/semantics.md §15.2).
    kv_cache_cfg : str or ReshapeAndCacheParam.KvCacheCfg, optional
        ``"nd"`` (default), ``"nz"``, or a ``ReshapeAndCacheParam.KvCacheCfg`` member. A bare int
        is a ``TypeError``: ATB numbers that enum unlike :class:`KvCacheCfg`.
    k_scale, k_inv_scale, k_offset, k_scale_cache : torch.Tensor, optional
        Quantize the key side into an int8, float8_e4m3fn or float8_e5m2 ``key_cache`` from a
        float16/bfloat16/float32 ``key`` (docs/semantics.md#quantized-caches), at most one of:
        ``k_scale`` (static, the dequantization scale: writes ``Q(key / k_scale + k_offset)``),
        ``k_inv_scale`` (static, the multiplier: ``Q(key * k_inv_scale + k_offset)``), each one
        element, ``[H]``/``[H, 1]``/``[1, H, 1]`` (per head) or ``[H*D]``/``[H, D]``/``[1, H, D]``
        (per channel), float16/bfloat16/float32, computed in the promotion of the dtypes given;
        or ``k_scale_cache`` ``[num_blocks, block_size, H]`` (or ``[..., 1]``, any strides,
        float16/bfloat16/float32): dynamic per (token, head), each row's scale written at the
        token's slot. ``k_offset``: an int8 zero point (int8 caches, static scales only).
    v_scale, v_inv_scale, v_offset, v_scale_cache : torch.Tensor, optional
        The same for the value side (not in the key-only mode).

    Returns
    -------
    tuple
        ``(key_cache, value_cache)``, the given caches (``value_cache`` None in key-only mode).

    Raises
    ------
    TypeError
        A wrong type or dtype. Nothing is written.
    ValueError
        A wrong shape or slot. Nothing is written.

    Examples
    --------
    >>> cache = torch.zeros(4, 16, 2, 8, dtype=torch.float16)        # ND: 4 blocks of 16 slots
    >>> key = torch.ones(3, 2, 8, dtype=torch.float16)
    >>> ascend_kv.reshape_and_cache(key, key, cache, cache.clone(), torch.tensor([17, -1, 5]))[0][1, 1].sum().item()
    16.0
    """
    if not (type(key) is type(key_cache) is type(slot_mapping) is torch.Tensor
            and (value is None or type(value) is torch.Tensor)
            and (value_cache is None or type(value_cache) is torch.Tensor)):
        _tensors(key=key, key_cache=key_cache, slot_mapping=slot_mapping)
        _tensors(value=value, value_cache=value_cache, optional=True)
    layout = reshape_and_cache_layout(kv_cache_cfg, value is not None)
    if (k_scale is None and k_inv_scale is None and k_offset is None and k_scale_cache is None and v_scale is None
            and v_inv_scale is None and v_offset is None and v_scale_cache is None):
        _RESHAPE_AND_CACHE(key, value, key_cache, value_cache, slot_mapping, layout)
        return key_cache, value_cache
    quant = (k_scale, k_inv_scale, k_offset, k_scale_cache, v_scale, v_inv_scale, v_offset, v_scale_cache)
    _tensors(optional=True, **dict(zip(_WRITE_QUANT_NAMES, quant)))
    _RESHAPE_AND_CACHE_QUANT(key, value, key_cache, value_cache, slot_mapping, layout, *quant)
    return key_cache, value_cache


def _load_options(kv_cache_cfg: object, cumsum: object, seq_starts: torch.Tensor | None) -> tuple[object, ...]:
    """The operator's options (``kv_cache_cfg, cumsum, seq_starts``) for the public ones, trailing
    defaults left out (the dispatcher converts each argument given)."""
    hashable = type(kv_cache_cfg) in _LAYOUT_TYPES and (cumsum is False or cumsum is True)
    if hashable and seq_starts is None:  # the usual calls: options kept once worked out
        kept = _OPTIONS.get((type(kv_cache_cfg), kv_cache_cfg, cumsum))
        if kept is not None:
            return kept
    layout = int(kv_cache_cfg_argument(kv_cache_cfg))
    cumsum = common.bool_argument("cumsum", cumsum)
    if seq_starts is not None:
        return layout, cumsum, seq_starts
    options: tuple[object, ...] = (layout, cumsum) if cumsum else (() if layout == int(KvCacheCfg.K_CACHE_V_CACHE_NZ)
                                                                    else (layout,))
    if hashable:
        _OPTIONS[(type(kv_cache_cfg), kv_cache_cfg, cumsum)] = options
    return options


#: The operator's options for each valid (kv_cache_cfg, cumsum) given without seq_starts, keyed with
#: kv_cache_cfg's type (1 and True are equal keys otherwise); a few entries.
_OPTIONS: dict[tuple[type, object, object], tuple[object, ...]] = {}
_LAYOUT_TYPES = (KvCacheCfg, int, str)


def _tensors(*, optional: bool = False, **arguments: object) -> None:
    """``TypeError`` unless each argument is a dense tensor (or None when ``optional``)."""
    for name, value in arguments.items():
        if type(value) is not torch.Tensor and not (value is None and optional):  # the common case, quickly
            common.tensor_argument(name, value)


class KVCacheOperation:
    """ATB-style object for :func:`kv_cache`, for code ported from ATB's C++ API.

    Parameters
    ----------
    param : KVCacheParam, optional
        Has no fields (ATB's struct is reserved bytes only).

    Examples
    --------
    >>> op = ascend_kv.KVCacheOperation(ascend_kv.KVCacheParam())
    >>> present = op(new_kv, layer_id, past, token_offset, seq_len)   # present is past
    """

    def __init__(self, param: KVCacheParam | None = None) -> None:
        if param is None:
            param = KVCacheParam()
        if not isinstance(param, KVCacheParam):
            raise TypeError(f"param must be a KVCacheParam, got {type(param).__name__}")
        self.param = param

    def __call__(
        self,
        new_kv: torch.Tensor,
        layer_id: int | torch.Tensor,
        past: torch.Tensor,
        token_offset: torch.Tensor,
        seq_len: torch.Tensor,
    ) -> torch.Tensor:
        """Run :func:`kv_cache`; returns ``past`` (ATB's ``present``)."""
        return kv_cache(new_kv, layer_id, past, token_offset, seq_len)


class PagedCacheLoadOperation:
    """ATB-style object for :func:`paged_cache_load`, for code ported from ATB's C++ API.

    Parameters
    ----------
    param : PagedCacheLoadParam, optional
        Layout, cumsum mode and whether ``seq_starts`` is passed; checked here.

    Examples
    --------
    >>> param = ascend_kv.PagedCacheLoadParam(kv_cache_cfg=ascend_kv.KvCacheCfg.K_CACHE_V_CACHE_ND)
    >>> key, value = ascend_kv.PagedCacheLoadOperation(param)(
    ...     key_cache, value_cache, block_table, context_lens, key, value)
    """

    def __init__(self, param: PagedCacheLoadParam | None = None) -> None:
        if param is None:
            param = PagedCacheLoadParam()
        if not isinstance(param, PagedCacheLoadParam):
            raise TypeError(f"param must be a PagedCacheLoadParam, got {type(param).__name__}")
        self.kv_cache_cfg = kv_cache_cfg_argument(param.kv_cache_cfg)
        self.cumsum = common.bool_argument("param.is_seq_lens_cumsum_mode", param.is_seq_lens_cumsum_mode)
        self.has_seq_starts = common.bool_argument("param.has_seq_starts", param.has_seq_starts)
        self.param = param

    def __call__(
        self,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        block_table: torch.Tensor,
        context_lens: torch.Tensor,
        key: torch.Tensor | None,
        value: torch.Tensor | None,
        seq_starts: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Run :func:`paged_cache_load` with this operation's parameters; returns ``(key, value)``."""
        if self.has_seq_starts != (seq_starts is not None):
            expected = "a seq_starts tensor" if self.has_seq_starts else "seq_starts=None"
            raise ValueError(
                f"seq_starts: param.has_seq_starts is {self.has_seq_starts}, so expected {expected}, "
                f"got {'None' if seq_starts is None else 'a tensor'}"
            )
        return paged_cache_load(
            key_cache, value_cache, block_table, context_lens, kv_cache_cfg=self.kv_cache_cfg,
            cumsum=self.cumsum, seq_starts=seq_starts, key=key, value=value,
        )


class ReshapeAndCacheOperation:
    """ATB-style object for :func:`reshape_and_cache`, for code ported from ATB's C++ API.

    Parameters
    ----------
    param : ReshapeAndCacheParam, optional
        ``kv_cache_cfg`` (ND, key-only ND, or NZ); ``compress_type`` must be
        ``COMPRESS_TYPE_UNDEFINED`` (ATB's head-compression modes are not supported).

    Examples
    --------
    >>> op = ascend_kv.ReshapeAndCacheOperation(ascend_kv.ReshapeAndCacheParam())
    >>> key_cache, value_cache = op(key, value, key_cache, value_cache, slot_mapping)
    >>> bypass = ascend_kv.ReshapeAndCacheParam(kv_cache_cfg=ascend_kv.ReshapeAndCacheParam.KvCacheCfg.K_CACHE_V_BYPASS)
    >>> key_cache = ascend_kv.ReshapeAndCacheOperation(bypass)(key, key_cache, slot_mapping)
    """

    def __init__(self, param: ReshapeAndCacheParam | None = None) -> None:
        if param is None:
            param = ReshapeAndCacheParam()
        if not isinstance(param, ReshapeAndCacheParam):
            raise TypeError(f"param must be a ReshapeAndCacheParam, got {type(param).__name__}")
        compress = ReshapeAndCacheParam.CompressType
        if param.compress_type != compress.COMPRESS_TYPE_UNDEFINED:
            raise ValueError(
                f"param.compress_type {param.compress_type!r} is not supported: ATB's head-compression modes serve "
                f"its PagedAttention only; use COMPRESS_TYPE_UNDEFINED"
            )
        if not isinstance(param.kv_cache_cfg, ReshapeAndCacheParam.KvCacheCfg):
            raise TypeError(f"param.kv_cache_cfg must be a ReshapeAndCacheParam.KvCacheCfg, got "
                            f"{type(param.kv_cache_cfg).__name__} {param.kv_cache_cfg!r}")
        self.key_only = param.kv_cache_cfg == ReshapeAndCacheParam.KvCacheCfg.K_CACHE_V_BYPASS
        self.param = param

    def __call__(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None] | torch.Tensor:
        """``(key, value, key_cache, value_cache, slot_mapping) -> (key_cache, value_cache)``, or in
        key-only mode ``(key, key_cache, slot_mapping) -> key_cache``."""
        expected = 3 if self.key_only else 5
        if len(tensors) != expected:
            names = "key, key_cache, slot_mapping" if self.key_only else "key, value, key_cache, value_cache, slot_mapping"
            raise TypeError(f"{type(self).__name__} with {self.param.kv_cache_cfg.name} takes ({names}), "
                            f"got {len(tensors)} arguments")
        if self.key_only:
            key, key_cache, slot_mapping = tensors
            return reshape_and_cache(key, None, key_cache, None, slot_mapping, kv_cache_cfg=self.param.kv_cache_cfg)[0]
        key, value, key_cache, value_cache, slot_mapping = tensors
        return reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, kv_cache_cfg=self.param.kv_cache_cfg)
