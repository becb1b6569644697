"""ND <-> NZ conversion of a paged cache, for building NZ caches on the host.

A paged ND cache is ``[num_blocks, block_size, num_heads, head_size]``; its NZ form is
``[num_blocks, T // E, block_size, E]`` with ``T = num_heads * head_size`` and
``E = 32 // itemsize`` (32 for 1-byte, 16 for 2-byte, 8 for 4-byte types): each token row is cut into
32-byte pieces, and piece ``p`` of every slot of a block is stored together.
"""

from __future__ import annotations

import torch

from .arguments import data_argument, int_argument, nz_elements


def nd_to_nz(cache: torch.Tensor) -> torch.Tensor:
    """Convert a paged ND cache to NZ.

    Parameters
    ----------
    cache : torch.Tensor
        ``[num_blocks, block_size, num_heads, head_size]``; ``num_heads * head_size`` a
        multiple of ``E``.

    Returns
    -------
    torch.Tensor
        A new contiguous tensor ``[num_blocks, num_heads * head_size // E, block_size, E]``.

    Examples
    --------
    >>> nd = torch.arange(2 * 16 * 2 * 16, dtype=torch.float16).reshape(2, 16, 2, 16)
    >>> nd_to_nz(nd).shape
    torch.Size([2, 2, 16, 16])
    """
    cache = data_argument("cache", cache)  # torch ops below resolve a negated view
    if cache.dim() != 4:
        raise ValueError(f"cache must be a 4-D ND cache [num_blocks, block_size, num_heads, head_size], got shape {tuple(cache.shape)}")
    num_blocks, block_size, num_heads, head_size = cache.shape
    e = nz_elements(cache.dtype)
    row = num_heads * head_size
    if row % e:
        raise ValueError(f"cache: num_heads * head_size = {row} must be a multiple of E = {e} for {cache.dtype}")
    return cache.reshape(num_blocks, block_size, row // e, e).transpose(1, 2).contiguous()


def nz_to_nd(cache: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Convert a paged NZ cache back to ND; the exact inverse of :func:`nd_to_nz`.

    Parameters
    ----------
    cache : torch.Tensor
        ``[num_blocks, T // E, block_size, E]``.
    num_heads : int
        Heads to split each token row ``T`` into; must divide ``T``.

    Returns
    -------
    torch.Tensor
        A new contiguous tensor ``[num_blocks, block_size, num_heads, T // num_heads]``.
    """
    cache = data_argument("cache", cache)  # torch ops below resolve a negated view
    num_heads = int_argument("num_heads", num_heads)
    if cache.dim() != 4:
        raise ValueError(f"cache must be a 4-D NZ cache [num_blocks, T // E, block_size, E], got shape {tuple(cache.shape)}")
    num_blocks, pieces, block_size, e = cache.shape
    if e != nz_elements(cache.dtype):
        raise ValueError(f"cache.shape[3] must be E = {nz_elements(cache.dtype)} for {cache.dtype}, got {e}")
    row = pieces * e
    if num_heads <= 0 or row % num_heads:
        raise ValueError(f"num_heads = {num_heads} must be positive and divide T = {row}")
    nd = cache.transpose(1, 2).reshape(num_blocks, block_size, num_heads, row // num_heads)
    return nd.contiguous()
