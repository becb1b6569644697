"""vLLM's cache write under its own name and signature, run by ascend_kv.

``reshape_and_cache_flash`` is vLLM's ``torch.ops._C_cache_ops.reshape_and_cache_flash``: ND
caches ``[num_blocks, block_size, num_heads, head_size]``, ``kv_cache_dtype`` naming the caches'
element type, ``k_scale``/``v_scale`` the fp8 dequantization scales (float32, one element or
``[num_heads]``). One ascend_kv call (:func:`ascend_kv.reshape_and_cache` with ``k_scale=``,
``v_scale=``), with its checks, strided views, device-index safety and ``torch.compile`` support.

``batch_memcpy`` is vLLM's ``vllm.v1.worker.mamba_utils.batch_memcpy`` (mamba state copies from
pointer tables on the device): :func:`ascend_kv.batch_memcpy` itself (docs/semantics.md §14.3).

Examples
--------
>>> from ascend_kv.compat import vllm
>>> key_cache = torch.zeros(4, 16, 2, 8, dtype=torch.uint8)      # vLLM allocates fp8 caches as uint8
>>> value_cache = torch.zeros_like(key_cache)
>>> key = torch.ones(3, 2, 8, dtype=torch.bfloat16)
>>> vllm.reshape_and_cache_flash(key, key, key_cache, value_cache, torch.tensor([17, -1, 5]), "fp8",
...                              torch.tensor(0.5), torch.tensor(0.5))
>>> key_cache.view(torch.float8_e4m3fn)[1, 1].float().sum().item()
32.0
"""

from __future__ import annotations

import torch

from .. import reshape_and_cache
from ..api.swap_batch import batch_memcpy

#: vLLM's kv_cache_dtype strings of fp8 caches and the element type each names.
_FP8 = {"fp8": torch.float8_e4m3fn, "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


def _codes(name: str, cache: torch.Tensor, dtype: torch.dtype, kv_cache_dtype: str) -> torch.Tensor:
    """``cache`` as ``dtype`` codes: a uint8 cache viewed as them (vLLM's allocation), an fp8 one as it is."""
    if cache.dtype == torch.uint8:
        return cache.view(dtype)
    if cache.dtype != dtype:
        raise TypeError(f"{name} must have dtype torch.uint8 or {dtype} for kv_cache_dtype = {kv_cache_dtype!r}, "
                        f"got {cache.dtype}")
    return cache


def reshape_and_cache_flash(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                            value_cache: torch.Tensor, slot_mapping: torch.Tensor, kv_cache_dtype: str,
                            k_scale: torch.Tensor, v_scale: torch.Tensor) -> None:
    """Write tokens into vLLM's flash-layout caches, quantized to fp8 when ``kv_cache_dtype`` says so.

    Parameters
    ----------
    key, value : torch.Tensor
        ``[num_tokens, num_heads, head_size]``, float16/bfloat16/float32 (the caches' dtype with "auto").
    key_cache, value_cache : torch.Tensor
        ``[num_blocks, block_size, num_heads, head_size]``, written in place: the tokens' dtype with
        ``"auto"``, else uint8 (viewed as the fp8 type) or that fp8 type.
    slot_mapping : torch.Tensor
        ``[n]`` int32/int64 slots; negative ones are padding.
    kv_cache_dtype : str
        ``"auto"`` (a copy), ``"fp8"`` or ``"fp8_e4m3"`` (float8_e4m3fn), ``"fp8_e5m2"``.
    k_scale, v_scale : torch.Tensor
        The dequantization scales, float32, one element or ``[num_heads]``: codes are
        ``fp8(clamp(x / scale, -max, max))`` computed in float32 (ignored with ``"auto"``).

    Raises
    ------
    ValueError
        ``kv_cache_dtype`` is none of these (``"int8"`` included), or any rule of
        :func:`ascend_kv.reshape_and_cache`. Nothing is written.
    TypeError
        A wrong type or dtype. Nothing is written.
    """
    if kv_cache_dtype == "auto":
        reshape_and_cache(key, value, key_cache, value_cache, slot_mapping)
        return
    dtype = _FP8.get(kv_cache_dtype) if isinstance(kv_cache_dtype, str) else None
    if dtype is None:
        raise ValueError(f"kv_cache_dtype must be 'auto', 'fp8', 'fp8_e4m3' or 'fp8_e5m2', got {kv_cache_dtype!r}")
    reshape_and_cache(key, value, _codes("key_cache", key_cache, dtype, kv_cache_dtype),
                      _codes("value_cache", value_cache, dtype, kv_cache_dtype), slot_mapping,
                      k_scale=k_scale, v_scale=v_scale)


__all__ = ["batch_memcpy", "reshape_and_cache_flash"]
