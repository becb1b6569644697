"""The geometry of a paged cache, ND or NZ, in one place: the layout arguments, the shape rules of a
key/value cache pair, and what every backend reads off them (block size, row shapes, row dims).

ND caches are ``[num_blocks, block_size, num_heads, head_size]``; NZ caches (FRACTAL_NZ) are
``[num_blocks, T // E, block_size, E]`` with ``T = num_heads * head_size`` and ``E = 32 //
itemsize`` (docs/semantics.md#layouts).
"""

from __future__ import annotations

import enum
import numbers
from dataclasses import dataclass

import torch

from ..api.params import KvCacheCfg, ReshapeAndCacheParam
from .common import describe, require_ndim
from .dtypes import BLOCK_BYTES, NZ_BLOCK_SIZE_MULTIPLE, NZ_MAX_HEAD_BYTES, NZ_MAX_ROW_BYTES, nz_elements

ND, NZ = KvCacheCfg.K_CACHE_V_CACHE_ND, KvCacheCfg.K_CACHE_V_CACHE_NZ

#: The layouts by the names the operators take (``kv_cache_cfg="nd"`` / ``"nz"``).
LAYOUT_NAMES = {"nd": ND, "nz": NZ}

_ND_DOC = "a 4-D ND cache [num_blocks, block_size, num_heads, head_size]"
_NZ_DOC = "a 4-D NZ cache [num_blocks, num_heads * head_size // E, block_size, E]"


@dataclass(frozen=True)
class CacheGeometry:
    """The layout and shape of a checked key/value cache pair.

    Attributes
    ----------
    layout : KvCacheCfg
        ND or NZ.
    num_blocks : int
        Blocks in each cache (``shape[0]``).
    block_size : int
        Token slots per block (``shape[1]`` in ND, ``shape[2]`` in NZ).
    key_row, value_row : tuple of int
        The shape of one token of each cache as a gathered row: ND ``(num_heads, head_size)``,
        NZ ``(T,)``; ``value_row`` is ``()`` without a value cache.
    """

    layout: KvCacheCfg
    num_blocks: int
    block_size: int
    key_row: tuple[int, ...]
    value_row: tuple[int, ...]

    @property
    def nd(self) -> bool:
        """Whether the caches are ND."""
        return self.layout == ND

    @property
    def slot_dim(self) -> int:
        """The cache dim that numbers a block's token slots."""
        return slot_dim(self.layout)

    @property
    def row_dims(self) -> tuple[int, str]:
        """``(first dim, what)``: dims ``first..`` of a cache hold the pieces the kernels copy whole."""
        return (2, "token rows (dims 2, 3)") if self.nd else (3, "32-byte pieces (dim 3)")

    @property
    def capacity(self) -> int:
        """Token slots in each cache."""
        return self.num_blocks * self.block_size


def slot_dim(layout: KvCacheCfg) -> int:
    """The cache dim that numbers a block's token slots: 1 in ND, 2 in NZ."""
    return 1 if layout == ND else 2


def geometry_of(layout: KvCacheCfg, key_cache: torch.Tensor, value_cache: torch.Tensor | None) -> CacheGeometry:
    """The geometry of a cache pair as its layout reads it (the rules below check it first)."""
    if layout == ND:
        value_row = () if value_cache is None else tuple(value_cache.shape[2:])
        return CacheGeometry(ND, key_cache.shape[0], key_cache.shape[1], tuple(key_cache.shape[2:]), value_row)
    value_row = () if value_cache is None else (value_cache.shape[1] * value_cache.shape[3],)
    return CacheGeometry(NZ, key_cache.shape[0], key_cache.shape[2], (key_cache.shape[1] * key_cache.shape[3],), value_row)


# ----------------------------------------------------------------------------- layout arguments


def _member(member: enum.Enum) -> str:
    return f"{type(member).__qualname__}.{member.name}"


def _same_layout(member: enum.Enum) -> str:
    """The name, in the other layout enum, of the layout an enum member names (by its name)."""
    nz = "NZ" in member.name
    if isinstance(member, KvCacheCfg):
        return "K_CACHE_V_CACHE_NZ" if nz else "K_CACHE_V_CACHE"
    return "K_CACHE_V_CACHE_NZ" if nz else "K_CACHE_V_CACHE_ND"


_BY_NUMBER = {int(member): member for member in KvCacheCfg}


def kv_cache_cfg_argument(value: object) -> KvCacheCfg:
    """``KvCacheCfg`` from the enum, its int value (0, 1) or the string ``"nz"`` / ``"nd"``."""
    if type(value) is KvCacheCfg:  # the common cases, without the ABC test below
        return value
    if type(value) is int and value in _BY_NUMBER:
        return _BY_NUMBER[value]
    if type(value) is str and value in LAYOUT_NAMES:
        return LAYOUT_NAMES[value]
    if isinstance(value, enum.Enum):
        raise TypeError(
            f"kv_cache_cfg must be a KvCacheCfg, 0, 1, 'nz' or 'nd', got {_member(value)}, a member of another enum "
            f"(ReshapeAndCacheParam.KvCacheCfg numbers ND 0, key-only 1, NZ 2): pass KvCacheCfg.{_same_layout(value)}"
        )
    if isinstance(value, str):
        if value.lower() in LAYOUT_NAMES:
            return LAYOUT_NAMES[value.lower()]
        raise ValueError(f"kv_cache_cfg must be 'nz' or 'nd', got {value!r}")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"kv_cache_cfg must be a KvCacheCfg, 0, 1, 'nz' or 'nd', got {describe(value)}")
    if int(value) not in (0, 1):
        raise ValueError(f"kv_cache_cfg must be 0 (K_CACHE_V_CACHE_NZ) or 1 (K_CACHE_V_CACHE_ND), got {value}")
    return KvCacheCfg(int(value))


def reshape_and_cache_cfg_argument(value: object) -> tuple[KvCacheCfg, bool]:
    """``(cache layout, key only)`` from ``"nd"``, ``"nz"`` or a ``ReshapeAndCacheParam.KvCacheCfg`` member.

    A bare int is refused: ATB numbers this enum differently from the paged load's ``KvCacheCfg``.
    """
    if type(value) is str and value in LAYOUT_NAMES:  # the common case, without the tests below
        return LAYOUT_NAMES[value], False
    cfg = ReshapeAndCacheParam.KvCacheCfg
    if type(value) is cfg:
        return (NZ, False) if value == cfg.K_CACHE_V_CACHE_NZ else (ND, value == cfg.K_CACHE_V_BYPASS)
    if isinstance(value, enum.Enum):
        raise TypeError(
            f"kv_cache_cfg must be 'nd', 'nz' or a ReshapeAndCacheParam.KvCacheCfg member, got {_member(value)}, a member "
            f"of another enum (KvCacheCfg numbers NZ 0, ND 1): pass ReshapeAndCacheParam.KvCacheCfg."
            f"{_same_layout(value)}"
        )
    if isinstance(value, str):
        if value.lower() in LAYOUT_NAMES:
            return LAYOUT_NAMES[value.lower()], False
        raise ValueError(f"kv_cache_cfg must be 'nd' or 'nz', got {value!r}")
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        raise TypeError(
            f"kv_cache_cfg must be 'nd', 'nz' or a ReshapeAndCacheParam.KvCacheCfg member, got the int {value}: "
            f"ATB numbers ReshapeAndCacheParam.KvCacheCfg (ND 0, key-only 1, NZ 2) differently from "
            f"PagedCacheLoadParam's (NZ 0, ND 1), so an int is ambiguous"
        )
    raise TypeError(
        f"kv_cache_cfg must be 'nd', 'nz' or a ReshapeAndCacheParam.KvCacheCfg member, got {describe(value)}"
    )


def reshape_and_cache_layout(value: object, value_given: bool) -> str:
    """The operator's ``kv_cache_cfg`` (``"nd"`` or ``"nz"``) from the public argument, with the
    key-only rule of ``ReshapeAndCacheParam.KvCacheCfg.K_CACHE_V_BYPASS``."""
    layout, key_only = reshape_and_cache_cfg_argument(value)
    if key_only and value_given:
        raise ValueError("kv_cache_cfg K_CACHE_V_BYPASS writes the key cache only: pass value=None, value_cache=None")
    return "nd" if layout == ND else "nz"


# ----------------------------------------------------------------------------- shape rules


def require_row_alignment(name: str, elements: int, dtype: torch.dtype, what: str) -> None:
    """``ValueError`` unless a row of ``elements`` is a positive multiple of 32 bytes."""
    row_bytes = elements * dtype.itemsize
    if row_bytes == 0 or row_bytes % BLOCK_BYTES:
        per_block = BLOCK_BYTES // dtype.itemsize
        raise ValueError(
            f"{name}: {what} = {elements} must be a positive multiple of {per_block} elements "
            f"({BLOCK_BYTES} bytes of {str(dtype).removeprefix('torch.')}), got {row_bytes} bytes"
        )


def require_cache_ndim(name: str, cache: torch.Tensor, layout: KvCacheCfg) -> None:
    """``ValueError`` unless ``cache`` is 4-D."""
    require_ndim(name, cache, (4,), _ND_DOC if layout == ND else _NZ_DOC)


def _require_nz_pieces(name: str, cache: torch.Tensor) -> None:
    """``ValueError`` unless an NZ cache's last dim holds one 32-byte piece, ``E`` elements."""
    e = nz_elements(cache.dtype)
    if cache.shape[3] != e:
        raise ValueError(
            f"{name}.shape[3] must be E = {e} for {str(cache.dtype).removeprefix('torch.')} in NZ, got {cache.shape[3]}"
        )


def _require_same_dims(key_cache: torch.Tensor, value_cache: torch.Tensor, dims: tuple[tuple[int, str], ...]) -> None:
    for i, what in dims:
        if value_cache.shape[i] != key_cache.shape[i]:
            raise ValueError(
                f"value_cache.shape[{i}] ({what}) = {value_cache.shape[i]} must equal "
                f"key_cache.shape[{i}] = {key_cache.shape[i]}"
            )


def _require_nz_block_size(block_size: int) -> None:
    if block_size % NZ_BLOCK_SIZE_MULTIPLE:
        raise ValueError(
            f"key_cache.shape[2] (block_size) = {block_size} must be a multiple of {NZ_BLOCK_SIZE_MULTIPLE} in NZ"
        )


def read_geometry(layout: KvCacheCfg, key_cache: torch.Tensor, value_cache: torch.Tensor) -> CacheGeometry:
    """The geometry of a cache pair ``paged_cache_load`` reads, after its shape rules.

    ``paged_cache_load`` reads NZ by default (ATB's default): an NZ shape error on caches that
    are valid ND says to pass ``kv_cache_cfg="nd"``.
    """
    try:
        return _read_geometry(layout, key_cache, value_cache)
    except ValueError as error:
        if layout == ND:
            raise
        try:
            _read_geometry(ND, key_cache, value_cache)
        except (TypeError, ValueError):
            raise error from None
        raise ValueError(
            f"{error}. The caches are valid ND caches [num_blocks, block_size, num_heads, head_size]: pass "
            f"kv_cache_cfg='nd' (paged_cache_load reads NZ by default, as ATB does)"
        ) from None


def _read_geometry(layout: KvCacheCfg, key_cache: torch.Tensor, value_cache: torch.Tensor) -> CacheGeometry:
    require_cache_ndim("key_cache", key_cache, layout)
    require_cache_ndim("value_cache", value_cache, layout)
    if layout == ND:
        _require_same_dims(key_cache, value_cache, ((0, "num_blocks"), (1, "block_size"), (2, "num_heads")))
        for name, cache in (("key_cache", key_cache), ("value_cache", value_cache)):
            require_row_alignment(name, cache.shape[2] * cache.shape[3], cache.dtype, "num_heads * head_size")
        return geometry_of(ND, key_cache, value_cache)
    for name, cache in (("key_cache", key_cache), ("value_cache", value_cache)):
        _require_nz_pieces(name, cache)
        row_bytes = cache.shape[1] * cache.shape[3] * cache.dtype.itemsize
        if cache.shape[1] == 0 or row_bytes > NZ_MAX_ROW_BYTES:
            raise ValueError(
                f"{name}: num_heads * head_size * itemsize must be in (0, {NZ_MAX_ROW_BYTES}] bytes in NZ, "
                f"got {row_bytes} ({name}.shape[1] = {cache.shape[1]} fractals of {BLOCK_BYTES} bytes)"
            )
    _require_same_dims(key_cache, value_cache, ((0, "num_blocks"), (2, "block_size")))
    _require_nz_block_size(key_cache.shape[2])
    return geometry_of(NZ, key_cache, value_cache)


def _require_nz_head_bytes(name: str, head_size: int, dtype: torch.dtype) -> None:
    """``ValueError`` unless an NZ head is a positive multiple of 32 bytes below the kernels' limit."""
    head_bytes = head_size * dtype.itemsize
    if head_bytes == 0 or head_bytes % BLOCK_BYTES or head_bytes >= NZ_MAX_HEAD_BYTES:
        raise ValueError(
            f"{name}: head_size * itemsize must be a positive multiple of {BLOCK_BYTES} bytes below "
            f"{NZ_MAX_HEAD_BYTES} in NZ, got {head_bytes} ({name}.shape[2] = {head_size} of "
            f"{str(dtype).removeprefix('torch.')})"
        )


def _require_cache_matches(name: str, cache: torch.Tensor, tokens: torch.Tensor, layout: KvCacheCfg) -> None:
    """``ValueError`` unless ``cache``'s per-token part matches ``tokens`` ``[num_tokens, num_heads, head_size]``."""
    if layout == ND:
        if tuple(cache.shape[2:]) != tuple(tokens.shape[1:]):
            raise ValueError(
                f"{name}.shape[2:] (num_heads, head_size) = {tuple(cache.shape[2:])} must equal "
                f"{name.removesuffix('_cache')}.shape[1:] = {tuple(tokens.shape[1:])}"
            )
        return
    _require_nz_pieces(name, cache)
    row = tokens.shape[1] * tokens.shape[2]
    if cache.shape[1] * cache.shape[3] != row:
        raise ValueError(
            f"{name}.shape[1] * E = {cache.shape[1] * cache.shape[3]} must equal num_heads * head_size = {row} "
            f"({name.removesuffix('_cache')}.shape[1] * shape[2])"
        )


def write_geometry(layout: KvCacheCfg, written: list[tuple[str, torch.Tensor, torch.Tensor]]) -> CacheGeometry:
    """The geometry of the caches ``reshape_and_cache`` writes, after their shape rules.

    ``written``: ``(name, tokens, cache)`` for the key and, unless key-only, the value; tokens
    ``[num_tokens, num_heads, head_size]`` already checked 3-D, caches 4-D.
    """
    (_, _, key_cache), *value_pair = written
    if value_pair:
        _require_same_dims(key_cache, value_pair[0][2], ((0, "num_blocks"), (slot_dim(layout), "block_size")))
    for name, tokens, cache in written:
        _require_cache_matches(f"{name}_cache", cache, tokens, layout)
        if layout == NZ:
            _require_nz_head_bytes(name, tokens.shape[2], tokens.dtype)
    if layout == NZ:
        _require_nz_block_size(key_cache.shape[2])
    return geometry_of(layout, key_cache, value_pair[0][2] if value_pair else None)
