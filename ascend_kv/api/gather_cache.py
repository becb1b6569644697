"""The paged load of one cache with vLLM's meaning (docs/semantics.md §16.2): ``gather_cache`` copies
each sequence's tokens from a paged cache into consecutive rows, sequences starting at any token
(``seq_starts``, a token offset), cumulative lengths, one cache (MLA's latent cache: no value
cache is read), optionally dequantizing fp8 codes. One operator call (``torch.ops.ascend_kv.gather_cache``).
"""

from __future__ import annotations

import torch

from .block_ops import _tensors


def gather_cache(
    src_cache: torch.Tensor,
    dst: torch.Tensor,
    block_table: torch.Tensor,
    cu_seq_lens: torch.Tensor,
    seq_starts: torch.Tensor | None = None,
    *,
    kv_cache_dtype: str = "auto",
    scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Gather sequences' tokens from one paged cache into ``dst`` rows, in place.

    Row ``cu_seq_lens[b] + j`` of ``dst`` (``j < cu_seq_lens[b + 1] - cu_seq_lens[b]``) takes token
    ``p = seq_starts[b] + j`` of sequence ``b``: slot ``p % block_size`` of block
    ``block_table[b, p // block_size]``. Rows outside ``[cu_seq_lens[0], cu_seq_lens[-1])`` keep their bytes.

    Parameters
    ----------
    src_cache : torch.Tensor
        ``[num_blocks, block_size, *entries]`` (e.g. MLA's ``[nb, bs, kv_lora_rank + rope_dim]``), any
        strides; with an fp8 ``kv_cache_dtype`` uint8 (vLLM's allocation) or that fp8 type.
    dst : torch.Tensor
        ``[rows, *entries]``, written: ``src_cache``'s dtype with ``"auto"``, else float16/bfloat16/float32.
    block_table : torch.Tensor
        ``[batch, max_blocks]`` int32/int64.
    cu_seq_lens : torch.Tensor
        ``[batch + 1]`` int32/int64 cumulative lengths: non-decreasing, from ``>= 0`` to ``<= rows``.
    seq_starts : torch.Tensor, optional
        ``[batch]`` int32/int64 token offsets (vLLM's meaning, not ATB's block offset: §4.2).
    kv_cache_dtype : str, optional
        ``"auto"`` (a copy of bytes), ``"fp8"``/``"fp8_e4m3"`` or ``"fp8_e5m2"``: ``dst = float(code) * scale``
        in float32, rounded once to ``dst.dtype``.
    scale : torch.Tensor, optional
        One float32 element, the dequantization scale (required with fp8).

    Returns
    -------
    torch.Tensor
        ``dst``.

    Raises
    ------
    TypeError, ValueError
        A wrong type, dtype, shape or (host index tensors) index value, naming it. Nothing is written.
        On the caches' device index values are not read back: a row whose table entry or block is out
        of range keeps its bytes.

    Examples
    --------
    >>> cache = torch.arange(2 * 4 * 3, dtype=torch.float16).reshape(2, 4, 3)
    >>> dst = torch.zeros(3, 3, dtype=torch.float16)
    >>> ascend_kv.gather_cache(cache, dst, torch.tensor([[1, 0]]), torch.tensor([0, 3]), torch.tensor([3]))[:, 0].tolist()
    [21.0, 0.0, 3.0]
    """
    _tensors(src_cache=src_cache, dst=dst, block_table=block_table, cu_seq_lens=cu_seq_lens)
    if seq_starts is not None:
        _tensors(seq_starts=seq_starts)
    if scale is not None:
        _tensors(scale=scale)
    if not isinstance(kv_cache_dtype, str):
        raise TypeError(f"kv_cache_dtype must be a str, got {type(kv_cache_dtype).__name__}")
    torch.ops.ascend_kv.gather_cache(src_cache, dst, block_table, cu_seq_lens, seq_starts, kv_cache_dtype, scale)
    return dst
