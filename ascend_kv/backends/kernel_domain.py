"""Which calls the AscendC kernels take in place (the NPU build and the host build alike).

The kernels address every data tensor through byte strides, but copy whole token rows, so each
tensor's row must be contiguous; every other stride is free:

- ``new_kv`` ``[ntokens, hidden]``: rows contiguous (any row stride);
- ``past`` ``[layers, batch, max_seq_len, hidden]``: ``stride(3) == 1``;
- ND caches ``[num_blocks, block_size, num_heads, head_size]``: the token row (dims 2, 3)
  contiguous; block and slot strides any (column slices of one wider buffer, K and V held block
  by block in one buffer);
- NZ caches ``[num_blocks, T // E, block_size, E]``: ``stride(3) == 1``;
- outputs ``key``/``value`` (ND ``[rows, num_heads, head_size]``, NZ ``[rows, T]``): rows
  contiguous (any row stride);
- ``reshape_and_cache`` inputs ``key``/``value`` ``[num_tokens, num_heads, head_size]``: token
  rows (dims 1, 2) contiguous, any token stride (slices of a fused QKV buffer); its caches as
  above (absent ones in key-only mode have no rule).

A call outside is still valid: the NPU policy runs it on the fallback, the sim backend on
contiguous copies. The op binding (``ascendc/host/torch_binding.cpp``) enforces the same rules.
"""

from __future__ import annotations

import torch

from ..cpu_fallback.strides import block_rows
from ..rules.forms import BlockCopyArgs, KvCacheArgs, PagedLoadArgs, ReshapeAndCacheArgs


def dense_from(tensor: torch.Tensor, first_dim: int) -> bool:
    """Are dims ``first_dim..`` of ``tensor`` row-major contiguous (size-1 dims ignored)? An empty
    tensor always is: the kernels address none of its bytes, whatever its strides."""
    if tensor.numel() == 0:
        return True
    expected = 1
    for dim in range(tensor.dim() - 1, first_dim - 1, -1):
        if tensor.shape[dim] != 1 and tensor.stride(dim) != expected:
            return False
        expected *= tensor.shape[dim]
    return True


def outside_reason(args: KvCacheArgs | PagedLoadArgs | ReshapeAndCacheArgs | BlockCopyArgs) -> str | None:
    """Why the kernels cannot take ``args`` in place, or None when they can."""
    if isinstance(args, BlockCopyArgs):
        return _block_copy_outside_reason(args)
    for name, (tensor, first_dim, what) in args.rows().items():
        if not dense_from(tensor, first_dim):
            return (f"{name} has sizes {tuple(tensor.shape)} and strides {tuple(tensor.stride())}: the kernels "
                    f"need its {what} contiguous")
    return None


def index_operand(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """An index tensor as the kernel library takes it: int32 or int64, on the data's ``device``,
    contiguous (a no-op for the usual int32/int64 tensor already there)."""
    if tensor.dtype not in (torch.int32, torch.int64):
        tensor = tensor.to(torch.int64)
    return tensor.to(device).contiguous()


def _block_copy_outside_reason(args: BlockCopyArgs) -> str | None:
    """Why the block-copy kernel cannot take ``args`` in place, or None: it copies a block as rows,
    so each cache needs a ``[num_blocks, rows, row]`` view with contiguous rows (:func:`block_rows`)."""
    for i, cache in enumerate(args.caches):
        if cache.numel() and block_rows(cache) is None:
            return (f"cache {i} has sizes {tuple(cache.shape)} and strides {tuple(cache.stride())}: the kernel needs "
                    f"each block to be rows of contiguous elements, evenly spaced")
    return None


def block_copy_operands(args: BlockCopyArgs) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``(caches, src, dst, cum_sum)`` as the kernel library's ``block_copy`` takes them: every
    non-empty cache as its ``[num_blocks, rows, row]`` view (in the kernels' domain), index tensors
    as :func:`index_operand` makes them."""
    device = args.caches[0].device
    views = [block_rows(cache) for cache in args.caches if cache.numel()]
    assert all(view is not None for view in views), "outside the kernels' domain"
    cum_sum = None if args.cum_sum is None else index_operand(args.cum_sum, device)
    return views, index_operand(args.src, device), index_operand(args.dst, device), cum_sum  # type: ignore[return-value]
