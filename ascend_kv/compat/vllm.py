"""vLLM's cache ops (``vllm/_custom_ops.py``, the ``_C_cache_ops`` library) under their own names,
argument order, layouts and dtypes, each one ascend_kv operator call (docs/semantics.md §16,
docs/porting_from_vllm.md).

fp8 caches come as vLLM allocates them, uint8 (or as the fp8 type itself): the operators take
them as they are and view them as their codes inside, so ``torch.library.opcheck`` and
``torch.compile`` see the uint8 tensors vLLM passes. ``kv_cache_dtype`` is vLLM's string:
``"auto"`` (no quantization), ``"fp8"``/``"fp8_e4m3"`` (float8_e4m3fn) or ``"fp8_e5m2"``.

- :func:`reshape_and_cache_flash`: flash layout ``[num_blocks, block_size, num_heads, head_size]``.
- :func:`reshape_and_cache`: vLLM's paged-attention layout, key ``[num_blocks, num_heads,
  head_size // x, block_size, x]``, value ``[num_blocks, num_heads, head_size, block_size]``.
- :func:`concat_and_cache_mla` (``"auto"``, fp8 and ``"fp8_ds_mla"``), :func:`concat_mla_q`: MLA.
- :func:`indexer_k_quant_and_cache`, :func:`cp_gather_indexer_k_quant_cache`: DeepSeek-V3.2's indexer cache.
- :func:`convert_fp8`: a cache to or from fp8 codes.
- :func:`gather_and_maybe_dequant_cache`, :func:`cp_gather_cache`: :func:`ascend_kv.gather_cache`
  (one cache, cumulative lengths, ``seq_starts`` a token offset).
- ``batch_memcpy`` is vLLM's ``vllm.v1.worker.mamba_utils.batch_memcpy`` (mamba state copies from
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

from ..api.gather_cache import gather_cache
from ..api.swap_batch import batch_memcpy

_OPS = torch.ops.ascend_kv


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
        ``"auto"``, else uint8 (taken as the fp8 type's codes) or that fp8 type.
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
    _OPS.vllm_reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale,
                                      v_scale)


def reshape_and_cache(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                      slot_mapping: torch.Tensor, kv_cache_dtype: str, k_scale: torch.Tensor,
                      v_scale: torch.Tensor) -> None:
    """Write tokens into vLLM's paged-attention caches (one operator call for both).

    Token ``t`` with slot ``s = slot_mapping[t] >= 0`` (block ``s // block_size``, position
    ``s % block_size``) writes ``key[t, h, d]`` at ``key_cache[blk, h, d // x, pos, d % x]`` and
    ``value[t, h, d]`` at ``value_cache[blk, h, d, pos]``.

    Parameters
    ----------
    key, value : torch.Tensor
        ``[num_tokens, num_heads, head_size]`` each.
    key_cache : torch.Tensor
        ``[num_blocks, num_heads, head_size // x, block_size, x]`` (vLLM's ``x = 16 // itemsize``,
        any ``x`` dividing head_size works), each head's x-groups in one run (a contiguous cache,
        or a per-layer view of one).
    value_cache : torch.Tensor
        ``[num_blocks, num_heads, head_size, block_size]``.
    slot_mapping, kv_cache_dtype, k_scale, v_scale
        As :func:`reshape_and_cache_flash`'s.

    Raises
    ------
    TypeError, ValueError
        As :func:`reshape_and_cache_flash`; both caches' rules are checked before either is written.
    """
    _OPS.vllm_reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale)


def concat_and_cache_mla(kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                         kv_cache_dtype: str, scale: torch.Tensor, skip_scale: bool = False) -> None:
    """Write MLA tokens, latent ``kv_c`` ``[T, kv_lora_rank]`` and rope ``k_pe`` ``[T, pe_dim]``, into one
    cache row each of ``kv_cache`` ``[num_blocks, block_size, entry]`` (one operator call).

    ``kv_cache_dtype``: ``"auto"`` (rows ``[kv_c | k_pe]``, the tokens' dtype), ``"fp8"``/``"fp8_e4m3"``/
    ``"fp8_e5m2"`` (codes ``fp8(clamp(x / scale, -max, max))``, ``scale`` one float32 element, 1.0 with
    ``skip_scale``; the cache uint8 or the fp8 type), or ``"fp8_ds_mla"`` (DeepSeek's 656-byte rows, 528
    without the rope tail: 512 e4m3 codes of ``kv_c`` with one power-of-two float32 scale per 128 elements,
    then ``k_pe``'s 64 16-bit values; ``scale`` unused). Negative slots are padding; host slots are checked.
    """
    _OPS.vllm_concat_and_cache_mla(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale, skip_scale)


def concat_mla_q(ql_nope: torch.Tensor, q_pe: torch.Tensor, q_out: torch.Tensor) -> None:
    """``q_out = cat([ql_nope, q_pe], -1)``: ``[T, H, nope]`` and ``[T, H, rope]`` of one dtype into
    ``[T, H, nope + rope]`` in place (any dims; vLLM's kernel asks nope % 512 == 0 and rope == 64)."""
    _OPS.concat_mla_q(ql_nope, q_pe, q_out)


def indexer_k_quant_and_cache(k: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                              quant_block_size: int, kv_cache_dtype: str) -> None:
    """DeepSeek-V3.2's indexer K cache write: ``k`` ``[T, head_dim]`` (a multiple of 128) into ``kv_cache``
    ``[num_blocks, block_size, head_dim + head_dim // 32]`` uint8, each block its codes (token-major), then
    one float32 scale per 128 elements per token. ``quant_block_size`` must be 128; ``kv_cache_dtype`` is
    vLLM's scale format: ``"ue8m0"`` (power-of-two scales), ``"mxfp8"`` (ue8m0 stored as 4 copies of its
    exponent byte; head_dim 128), anything else plain ``max(amax, 1e-4) / 448``. Codes ``fp8_e4m3(x / s)``."""
    _OPS.vllm_indexer_k_quant_and_cache(k, kv_cache, slot_mapping, quant_block_size, kv_cache_dtype)


def cp_gather_indexer_k_quant_cache(kv_cache: torch.Tensor, dst_k: torch.Tensor, dst_scale: torch.Tensor,
                                    block_table: torch.Tensor, cu_seq_lens: torch.Tensor) -> None:
    """Gather the indexer cache's codes into ``dst_k`` ``[rows, head_dim]`` (float8_e4m3fn or uint8) and its
    scale bytes into ``dst_scale`` ``[rows, head_dim // 32]`` uint8: sequence ``b``'s tokens into rows
    ``cu_seq_lens[b]..cu_seq_lens[b + 1]`` (``cu_seq_lens[-1] <= rows``), one operator call."""
    _OPS.vllm_cp_gather_indexer_k_quant_cache(kv_cache, dst_k, dst_scale, block_table, cu_seq_lens)


def convert_fp8(output: torch.Tensor, input: torch.Tensor, scale: float = 1.0, kv_dtype: str = "fp8") -> None:
    """Convert a cache to fp8 codes (``input`` float16/bfloat16/float32, ``output`` uint8 or the fp8
    type: ``fp8(clamp(x / scale, -max, max))`` in float32) or back (``float(code) * scale``, rounded
    once to ``output``'s dtype). Same shapes; ``kv_dtype`` ``"fp8"``, ``"fp8_e4m3"`` or ``"fp8_e5m2"``;
    ``scale`` positive and finite."""
    _OPS.convert_fp8(output, input, float(scale), kv_dtype)


def gather_and_maybe_dequant_cache(src_cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor,
                                   cu_seq_lens: torch.Tensor, token_to_seq: torch.Tensor, num_tokens: int,
                                   kv_cache_dtype: str, scale: torch.Tensor,
                                   seq_starts: torch.Tensor | None = None) -> None:
    """vLLM's MLA gather, dequantizing fp8 codes: :func:`ascend_kv.gather_cache` into ``dst[:num_tokens]``.

    ``token_to_seq`` is not read (vLLM's kernel ignores it too); ``num_tokens`` must be in
    ``[0, len(dst)]`` and ``cu_seq_lens[-1] <= num_tokens`` (vLLM clips longer sequences; ascend_kv
    raises ValueError).
    """
    if type(num_tokens) is not int or not 0 <= num_tokens <= dst.shape[0]:
        raise ValueError(f"num_tokens must be an int in [0, {dst.shape[0]}] (len(dst)), got {num_tokens!r}")
    gather_cache(src_cache, dst.narrow(0, 0, num_tokens), block_table, cu_seq_lens, seq_starts,
                 kv_cache_dtype=kv_cache_dtype, scale=scale if kv_cache_dtype != "auto" else None)


def cp_gather_cache(src_cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor, cu_seq_lens: torch.Tensor,
                    batch_size: int, seq_starts: torch.Tensor | None = None) -> None:
    """vLLM's context-parallel gather (bytes as they are): :func:`ascend_kv.gather_cache`;
    ``batch_size`` must be ``len(cu_seq_lens) - 1``."""
    if type(batch_size) is not int or batch_size != cu_seq_lens.shape[0] - 1:
        raise ValueError(f"batch_size must be len(cu_seq_lens) - 1 = {cu_seq_lens.shape[0] - 1}, got {batch_size!r}")
    gather_cache(src_cache, dst, block_table, cu_seq_lens, seq_starts)


__all__ = ["batch_memcpy", "concat_and_cache_mla", "concat_mla_q", "convert_fp8", "cp_gather_cache", "cp_gather_indexer_k_quant_cache",
           "gather_and_maybe_dequant_cache", "indexer_k_quant_and_cache", "reshape_and_cache",
           "reshape_and_cache_flash"]
