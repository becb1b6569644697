"""torch_npu's storage formats on any device: ``npu_format_cast``, ``get_npu_format``, ``empty_with_format``.

On an NPU an ACL storage format (2 = ND, 29 = FRACTAL_NZ) belongs to a tensor's storage, and
torch_npu's cast returns a new tensor in that format, leaving its input as it was. Off the NPU
the bytes stay where they are, so the format is a tag on the tensor the cast returns: an alias
of the input's bytes with no view base of its own (``detach()``), so the views taken from it
(``kv[0]``, ``kv[1]``, ``cache[i]``, dim-0 slices) hang from it and report its tag, while the
cast's input, its siblings (``buf[1]`` beside a cast ``buf[0]``) and the buffer they share keep
their own format. ND and NZ caches can so be views of one buffer, as on the NPU, where each cast
view is its own allocation.

A FRACTAL_NZ tag also records the tiling of the tensor cast, its last three dims
``[T // E, block_size, E]`` (sizes of the last two, strides of all three). :func:`cache_layout`
takes a view that keeps them as NZ and refuses one that does not (an ND-shaped view of NZ bytes,
a flattened one): such a view is neither layout, and writing it as ND would be silent garbage.

Examples
--------
>>> buf = torch.zeros(2, 4, 2, 16, 16, dtype=torch.float16)
>>> kv = npu_format_cast(buf, 29)  # K and V [2, nb, T // E, bs, E]
>>> get_npu_format(kv[0]), get_npu_format(kv[1][1:3]), get_npu_format(buf), cache_layout(kv[0], kv[1])
(29, 29, 2, 'nz')
>>> cache_layout(kv.view(2, 4, 16, 2, 16)[0], kv[1])
Traceback (most recent call last):
ValueError: key_cache (shape (4, 16, 2, 16), strides (512, 32, 16, 1)) is a view of bytes cast to FRACTAL_NZ (29), ...
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import NamedTuple

import torch

from ..api import arguments as common
from ..dispatch import device as runtime

#: ACL storage formats (torch_npu's ``torch_npu.Format`` values) the cast takes.
FORMAT_ND = 2
FORMAT_FRACTAL_NZ = 29

#: The attribute holding a tag, on the tensor cast.
_TAG = "_ascend_kv_npu_format"


class _Tag(NamedTuple):
    """A format tag: the code and, for FRACTAL_NZ, the NZ tiling of the tensor cast (None under 3 dims)."""

    code: int
    tile_sizes: tuple[int, ...] | None  # (block_size, E)
    tile_strides: tuple[int, ...] | None  # strides of [T // E, block_size, E]


#: Every tagged tensor, so that a compiled function finds the tag of the tensor a view it took hangs from.
_TAGGED: list[weakref.ref[torch.Tensor]] = []


def _tag_of(tensor: torch.Tensor) -> tuple[_Tag | None, bool]:
    """``(tag or None, whether it is the tensor's own)``: its own, else that of the tensor it is a view of."""
    own = getattr(tensor, _TAG, None)
    if own is not None:
        return own, True
    base = tensor._base
    if base is None:
        return None, False
    tag = getattr(base, _TAG, None)
    if tag is None and torch.compiler.is_compiling():
        # Dynamo reads no attribute of the base of a view taken while tracing; it does know which
        # tensor that base is, so the tagged tensors are searched for it.
        tag = next((getattr(t, _TAG) for t in (ref() for ref in _TAGGED) if t is base), None)
    return tag, False


def _tagged(tensor: torch.Tensor, code: int) -> torch.Tensor:
    """An alias of ``tensor``'s bytes tagged with ``code``, the root of the views taken from it.

    A tensor that requires grad is aliased by a view (detaching it would cut its gradient), so
    only the alias itself carries the tag: the cache operations never write such tensors.
    """
    alias = tensor.view(tensor.shape) if tensor.requires_grad else tensor.detach()
    nz = code == FORMAT_FRACTAL_NZ and alias.dim() >= 3
    setattr(alias, _TAG, _Tag(code, tuple(alias.shape[-2:]) if nz else None, tuple(alias.stride()[-3:]) if nz else None))
    if not torch.compiler.is_compiling():
        _TAGGED[:] = [ref for ref in _TAGGED if ref() is not None]
        _TAGGED.append(weakref.ref(alias))
    return alias


def _format_code(acl_format: object) -> int:
    """``acl_format`` (an int or a ``torch_npu.Format`` member) as 2 or 29, else ``ValueError``."""
    code = common.int_argument("acl_format", getattr(acl_format, "value", acl_format))
    if code not in (FORMAT_ND, FORMAT_FRACTAL_NZ):
        raise ValueError(f"acl_format must be {FORMAT_ND} (ND) or {FORMAT_FRACTAL_NZ} (FRACTAL_NZ), got {code}")
    return code


def _real_torch_npu(what: str) -> object:
    """The loaded torch_npu, for an NPU tensor's ``what``; ``RuntimeError`` when none is loaded."""
    real = runtime.torch_npu().module
    if real is None:
        raise RuntimeError(f"{what} of an NPU tensor is torch_npu's own, and torch_npu is not loaded here")
    return real


def get_npu_format(tensor: torch.Tensor) -> int:
    """The ACL storage format of ``tensor``: 2 (ND) or 29 (FRACTAL_NZ), as torch_npu's ``get_npu_format``.

    An NPU tensor reports its storage's format. Any other tensor reports the format it was given
    (it is the result of :func:`npu_format_cast` or :func:`empty_with_format`, or a view taken from
    one); else 2.

    Parameters
    ----------
    tensor : torch.Tensor
        Any tensor.

    Returns
    -------
    int
        The format code.
    """
    tensor = common.tensor_argument("tensor", tensor)
    if runtime.is_npu(tensor.device):
        code = runtime.storage_format(tensor)
        return FORMAT_ND if code is None else code
    tag, _ = _tag_of(tensor)
    return FORMAT_ND if tag is None else tag.code


def npu_format_cast(tensor: torch.Tensor, acl_format: int, customize_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``tensor`` in storage format ``acl_format`` (2 = ND, 29 = FRACTAL_NZ), as torch_npu's ``npu_format_cast``.

    On an NPU this is torch_npu's own cast (the bytes are rearranged there). On any other
    device the result is an alias with the same shape and bytes, tagged with the format, from
    which views inherit it; ``tensor`` itself keeps its format (see the module's notes). This is
    the way torch_npu's tests use the cast, on caches already shaped ``[num_blocks, T // E,
    block_size, E]``, whose FRACTAL_NZ bytes are their row-major bytes.

    Parameters
    ----------
    tensor : torch.Tensor
        Any tensor, e.g. a cache ``[num_blocks, T // E, block_size, E]`` or a buffer
        ``[2, num_blocks, T // E, block_size, E]`` holding K and V.
    acl_format : int
        2 or 29 (or a ``torch_npu.Format`` member of either value).
    customize_dtype : None
        torch_npu's cast to a packed weight type; not implemented (``NotImplementedError``).

    Returns
    -------
    torch.Tensor
        The tensor in the new format.
    """
    tensor = common.tensor_argument("tensor", tensor)
    code = _format_code(acl_format)
    if customize_dtype is not None:
        raise NotImplementedError(
            f"npu_format_cast: customize_dtype={customize_dtype} (torch_npu's packed weight cast) is not "
            f"implemented by ascend_kv; pass None"
        )
    if runtime.is_npu(tensor.device):
        cast: torch.Tensor = _real_torch_npu("npu_format_cast").npu_format_cast(tensor, code)  # type: ignore[attr-defined]
        return cast
    return _tagged(tensor, code)


def empty_with_format(
    size: Sequence[int],
    *,
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | str | None = None,
    pin_memory: bool | None = None,
    acl_format: int = FORMAT_ND,
) -> torch.Tensor:
    """An uninitialised tensor in storage format ``acl_format``, as torch_npu's ``empty_with_format``.

    vllm-ascend's 310P model runner allocates its NZ caches with it, shaped
    ``[num_blocks, num_heads * head_size // 16, block_size, 16]``. On an NPU this is torch_npu's
    own; on any other device ``torch.empty`` tagged as :func:`npu_format_cast` tags.

    Parameters
    ----------
    size : sequence of int
        The shape, e.g. ``[num_blocks, T // E, block_size, E]`` for an NZ cache.
    dtype : torch.dtype, optional
        By default ``torch.get_default_dtype()``.
    layout : torch.layout, optional
        None or ``torch.strided``.
    device : torch.device or str, optional
        By default the CPU (torch's default device).
    pin_memory : bool, optional
        As ``torch.empty``'s.
    acl_format : int, optional
        2 (ND, the default) or 29 (FRACTAL_NZ).

    Returns
    -------
    torch.Tensor
        ``size``, uninitialised, in format ``acl_format``.
    """
    if isinstance(size, (str, bytes, torch.Tensor)) or not isinstance(size, Sequence):
        raise TypeError(f"size must be a sequence of ints, got {common.describe(size)}")
    shape = [common.int_argument(f"size[{i}]", n) for i, n in enumerate(size)]
    if any(n < 0 for n in shape):
        raise ValueError(f"size must not hold negative sizes, got {shape}")
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {common.describe(dtype)}")
    if layout not in (None, torch.strided):
        raise ValueError(f"layout must be torch.strided (storage formats are for dense tensors), got {layout}")
    try:
        place = None if device is None else torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"device must name a device, got {common.describe(device)}: {error}") from error
    pinned = False if pin_memory is None else common.bool_argument("pin_memory", pin_memory)
    code = _format_code(acl_format)
    if place is not None and runtime.is_npu(place):
        made: torch.Tensor = _real_torch_npu("empty_with_format").empty_with_format(  # type: ignore[attr-defined]
            shape, dtype=dtype, device=place, pin_memory=pinned, acl_format=code)
        return made
    return _tagged(torch.empty(shape, dtype=dtype, device=place, pin_memory=pinned), code)


def cache_layout(key_cache: object, value_cache: object) -> str:
    """``"nz"`` when both caches are FRACTAL_NZ, ``"nd"`` when neither is (torch_npu's choice by storage format).

    ``ValueError`` when one is and the other is not, or when a cache's bytes were cast to
    FRACTAL_NZ through a tensor whose NZ tiling the cache does not keep (see the module's notes).
    """
    layouts = []
    for name, cache in (("key_cache", key_cache), ("value_cache", value_cache)):
        cache = common.tensor_argument(name, cache)
        if runtime.is_npu(cache.device):
            layouts.append(get_npu_format(cache))
            continue
        tag, own = _tag_of(cache)
        if tag is not None and tag.code == FORMAT_FRACTAL_NZ and not own and not _keeps_tiling(cache, tag):
            raise ValueError(_lost_tiling(name, cache, tag))
        layouts.append(FORMAT_ND if tag is None else tag.code)
    if layouts == [FORMAT_FRACTAL_NZ] * 2:
        return "nz"
    if FORMAT_FRACTAL_NZ in layouts:
        raise ValueError(
            f"key_cache has storage format {layouts[0]} but value_cache has {layouts[1]}: the layout (NZ when "
            f"both are FRACTAL_NZ = 29, else ND) needs one format for both; npu_format_cast both caches"
        )
    return "nd"


def _keeps_tiling(cache: torch.Tensor, tag: _Tag) -> bool:
    return (tag.tile_sizes is not None and cache.dim() >= 3 and tuple(cache.shape[-2:]) == tag.tile_sizes
            and tuple(cache.stride()[-3:]) == tag.tile_strides)


def _lost_tiling(name: str, cache: torch.Tensor, tag: _Tag) -> str:
    if tag.tile_sizes is None:
        tiling = "had fewer than 3 dims, so no NZ tiling [T // E, block_size, E]"
    else:
        tiling = (f"has the NZ tiling [T // E, block_size, E] = [.., {tag.tile_sizes[0]}, {tag.tile_sizes[1]}] "
                  f"with strides {tag.tile_strides}")
    return (
        f"{name} (shape {tuple(cache.shape)}, strides {cache.stride()}) is a view of bytes cast to FRACTAL_NZ (29), "
        f"but the tensor cast {tiling}, and {name} does not keep it: its bytes are neither its ND rows nor NZ, "
        f"so nothing is written; pass a view that keeps the last three dims (cache[i], a dim-0 slice), or "
        f"npu_format_cast({name}, 2) if its bytes are ND"
    )
