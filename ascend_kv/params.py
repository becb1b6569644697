"""ATB's parameter types: the cache layout enum and the two operations' parameter structs."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class KvCacheCfg(enum.IntEnum):
    """Layout of a paged K/V cache, with ATB's values.

    ``K_CACHE_V_CACHE_NZ`` (0, ATB's default): ``[num_blocks, T // E, block_size, E]`` where
    ``T = num_heads * head_size`` and ``E = 32 // itemsize``.
    ``K_CACHE_V_CACHE_ND`` (1): ``[num_blocks, block_size, num_heads, head_size]``.
    """

    K_CACHE_V_CACHE_NZ = 0
    K_CACHE_V_CACHE_ND = 1


@dataclass(frozen=True)
class KVCacheParam:
    """Parameters of :class:`~ascend_kv.KVCacheOperation`: none (ATB's struct is reserved bytes)."""


@dataclass(frozen=True)
class PagedCacheLoadParam:
    """Parameters of :class:`~ascend_kv.PagedCacheLoadOperation`, named as in ATB.

    Parameters
    ----------
    kv_cache_cfg : KvCacheCfg, int or str
        Cache layout: ``KvCacheCfg``, its int value, or ``"nz"`` / ``"nd"``.
    is_seq_lens_cumsum_mode : bool
        ``context_lens`` holds ``batch + 1`` cumulative lengths (ND only).
    has_seq_starts : bool
        The operation takes a ``seq_starts`` tensor (ND only).
    """

    kv_cache_cfg: KvCacheCfg | int | str = KvCacheCfg.K_CACHE_V_CACHE_NZ
    is_seq_lens_cumsum_mode: bool = False
    has_seq_starts: bool = False
