"""The public functions' arguments before they reach an operator: what Python alone can tell.

An operator's schema takes tensors, ints, bools and strings; its rules (in C++, ``csrc/rules``)
check everything about them. What a schema cannot express is checked and normalised here, once,
in the words of the public API: a non-tensor where a tensor goes, a layout given as an enum, a
string or an int, a Python int that no 64-bit int holds. Each raises ``TypeError`` or
``ValueError`` naming the argument, with what was expected and what was given.
"""

from __future__ import annotations

import enum
import numbers

import numpy as np
import torch

from .params import KvCacheCfg, ReshapeAndCacheParam

ND, NZ = KvCacheCfg.K_CACHE_V_CACHE_ND, KvCacheCfg.K_CACHE_V_CACHE_NZ

#: The layouts by the names the operators take (``kv_cache_cfg="nd"`` / ``"nz"``).
LAYOUT_NAMES = {"nd": ND, "nz": NZ}


def describe(value: object) -> str:
    """How a message shows a value given where another was expected: a tensor by dtype and shape, a list
    or tuple by its length and first items, anything else by its repr, cut at 80 characters."""
    if isinstance(value, torch.Tensor):
        return f"a {str(value.dtype).removeprefix('torch.')} tensor of shape {tuple(value.shape)}"
    if isinstance(value, (list, tuple)):
        first = ", ".join(repr(item)[:20] for item in value[:3])
        return f"a {type(value).__name__} of {len(value)} items [{first}{', ...' if len(value) > 3 else ''}]"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 80 else text[:77] + '...'}"


def tensor_argument(name: str, value: object) -> torch.Tensor:
    """``value`` itself, or ``TypeError`` when it is not a dense (strided) tensor holding data.

    Only what ``torch.compile`` can trace without running anything: the public functions call it
    before the operator, so a wrong argument gets this message rather than the dispatcher's.
    """
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {describe(value)}")
    if value.layout != torch.strided:
        raise TypeError(f"{name} must be a dense (strided) tensor, got layout {value.layout}")
    if value.is_quantized:
        raise TypeError(f"{name} must hold data, got a quantized tensor")
    return value


def data_argument(name: str, value: object) -> torch.Tensor:
    """:func:`tensor_argument` for a function that reads the values (a layout helper): a meta
    tensor, which holds none, is a ``TypeError``."""
    tensor = tensor_argument(name, value)
    if tensor.is_meta:
        raise TypeError(f"{name} must hold data, got a meta tensor")
    return tensor


def int_argument(name: str, value: object) -> int:
    """A Python int, a numpy integer or a one-element integer tensor, as an int."""
    if type(value) is int:  # the common case, without the ABC check below
        return value
    if isinstance(value, torch.Tensor):
        tensor = tensor_argument(name, value)
        if tensor.dtype.is_floating_point or tensor.dtype.is_complex or tensor.dtype == torch.bool:
            raise TypeError(f"{name} must be an int or an integer tensor, got {describe(tensor)}")
        if tensor.numel() != 1:
            raise ValueError(f"{name} must have exactly one element, got shape {tuple(tensor.shape)}")
        return int(tensor.item())
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int or a one-element integer tensor, got {describe(value)}")
    return int(value)


def int64_argument(name: str, value: object) -> int:
    """:func:`int_argument`, held by the operator's 64-bit ``int``: beyond that range an int is
    clamped to it, which no valid value is near (the operator's rule then names the clamped value)."""
    number = int_argument(name, value)
    return min(max(number, -(2**63)), 2**63 - 1)


def bool_argument(name: str, value: object) -> bool:
    """``value`` as a bool, or ``TypeError`` for anything but ``bool`` / ``numpy.bool_``."""
    if value is True or value is False:  # the common case, without the type test below
        return value
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {describe(value)}")
    return bool(value)


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


def nz_elements(dtype: torch.dtype) -> int:
    """Elements in one 32-byte NZ piece: ``E = 32 // itemsize``."""
    return 32 // dtype.itemsize
