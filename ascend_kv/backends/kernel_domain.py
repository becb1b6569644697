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
  contiguous (any row stride).

A call outside is still valid: the NPU policy runs it on the fallback, the sim backend on
contiguous copies. The op binding (``ascendc/host/torch_binding.cpp``) enforces the same rules.
"""

from __future__ import annotations

import torch

from ..calls import KvCacheArgs, PagedLoadArgs
from ..params import KvCacheCfg


def dense_from(tensor: torch.Tensor, first_dim: int) -> bool:
    """Are dims ``first_dim..`` of ``tensor`` row-major contiguous (size-1 dims ignored)?"""
    expected = 1
    for dim in range(tensor.dim() - 1, first_dim - 1, -1):
        if tensor.shape[dim] != 1 and tensor.stride(dim) != expected:
            return False
        expected *= tensor.shape[dim]
    return True


def row_rules(args: KvCacheArgs | PagedLoadArgs) -> dict[str, tuple[torch.Tensor, int, str]]:
    """``{name: (tensor, first dim that must be dense, what those dims are)}`` for each data tensor."""
    if isinstance(args, KvCacheArgs):
        return {"new_kv": (args.new_kv, 1, "rows"), "past": (args.past, 3, "rows (dim 3)")}
    nd = args.layout == KvCacheCfg.K_CACHE_V_CACHE_ND
    cache_dim, cache_what = (2, "token rows (dims 2, 3)") if nd else (3, "32-byte pieces (dim 3)")
    return {
        "key_cache": (args.key_cache, cache_dim, cache_what),
        "value_cache": (args.value_cache, cache_dim, cache_what),
        "key": (args.key, 1, "rows"),
        "value": (args.value, 1, "rows"),
    }


def outside_reason(args: KvCacheArgs | PagedLoadArgs) -> str | None:
    """Why the kernels cannot take ``args`` in place, or None when they can."""
    for name, (tensor, first_dim, what) in row_rules(args).items():
        if not dense_from(tensor, first_dim):
            return (f"{name} has sizes {tuple(tensor.shape)} and strides {tuple(tensor.stride())}: the kernels "
                    f"need its {what} contiguous")
    return None
