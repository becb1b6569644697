"""A call of an operation as its arguments, its index values unchecked: the form the tests build
calls in to drive the backends that read index values themselves (the kernels, the device
fallback) with any values, and the oracle of tests/safe_reference.py reads them in."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ascend_kv.api.params import KvCacheCfg


@dataclass(eq=False)
class KvCacheArgs:
    """``kv_cache(new_kv, layer_id, past, token_offset, seq_len)``: new_kv ``[ntokens, hidden]``."""

    new_kv: torch.Tensor
    past: torch.Tensor
    layer_id: int | torch.Tensor
    token_offset: torch.Tensor
    seq_len: torch.Tensor


@dataclass(eq=False)
class PagedLoadArgs:
    """``paged_cache_load`` into given outputs ``key``, ``value``."""

    layout: KvCacheCfg
    key_cache: torch.Tensor
    value_cache: torch.Tensor
    block_table: torch.Tensor
    context_lens: torch.Tensor
    seq_starts: torch.Tensor | None
    cumsum: bool
    key: torch.Tensor
    value: torch.Tensor
    zero_fill: bool = False


@dataclass(eq=False)
class ReshapeAndCacheArgs:
    """``reshape_and_cache``; value and value_cache None in key-only mode."""

    layout: KvCacheCfg
    key: torch.Tensor
    value: torch.Tensor | None
    key_cache: torch.Tensor
    value_cache: torch.Tensor | None
    slot_mapping: torch.Tensor


@dataclass(eq=False)
class BlockCopyArgs:
    """``block_copy`` (cum_sum given) or ``copy_blocks`` (cum_sum None: src[j] to dst[j]) over ``caches``."""

    caches: tuple[torch.Tensor, ...]
    src: torch.Tensor
    dst: torch.Tensor
    cum_sum: torch.Tensor | None
