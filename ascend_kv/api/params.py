"""ATB's parameter types: the paged cache layout enum and the operations' parameter structs."""

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


@dataclass(frozen=True)
class ReshapeAndCacheParam:
    """Parameters of :class:`~ascend_kv.ReshapeAndCacheOperation`, with ATB's names and numbering.

    Parameters
    ----------
    compress_type : ReshapeAndCacheParam.CompressType
        Only ``COMPRESS_TYPE_UNDEFINED`` is supported (ATB's head-compression modes serve its
        PagedAttention alone).
    kv_cache_cfg : ReshapeAndCacheParam.KvCacheCfg
        ``K_CACHE_V_CACHE`` (ND), ``K_CACHE_V_BYPASS`` (ND, key only) or ``K_CACHE_V_CACHE_NZ``.
        Numbered as in ATB, unlike :class:`KvCacheCfg` of the paged load.
    """

    class CompressType(enum.IntEnum):
        """ATB's ``ReshapeAndCacheParam::CompressType``."""

        COMPRESS_TYPE_UNDEFINED = 0
        COMPRESS_TYPE_KVHEAD = 1
        COMPRESS_TYPE_KVHEAD_ROPE = 2

    class KvCacheCfg(enum.IntEnum):
        """ATB's ``ReshapeAndCacheParam::KvCacheCfg``."""

        K_CACHE_V_CACHE = 0
        K_CACHE_V_BYPASS = 1
        K_CACHE_V_CACHE_NZ = 2

    compress_type: CompressType = CompressType.COMPRESS_TYPE_UNDEFINED
    kv_cache_cfg: KvCacheCfg = KvCacheCfg.K_CACHE_V_CACHE


@dataclass(frozen=True)
class BlockCopyParam:
    """Parameters of :class:`~ascend_kv.BlockCopyOperation`: none (ATB's struct is reserved bytes)."""
