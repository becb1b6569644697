"""The domain of every operation (docs/semantics.md), checked in one place for every implementation.

Each operation has one checking function (``kv_cache_args`` with ``kv_cache_call``,
``paged_cache_load``, ``reshape_and_cache``) that takes the operator's arguments and raises
``TypeError`` (wrong type or dtype) or ``ValueError`` (wrong shape or value) naming the argument,
with what was expected and what was given. They write nothing, so a call that raises leaves
every tensor as it was. The rules split in two: those that need no index values (types,
shapes, devices, strides, aliasing), which every call runs, and those on index values, which
run only when the values are on the host (or validation is full): they read each index tensor
once, to a host list of ints, and test whole lists at C speed (``min``, ``sum``, ``map``), with
no loop over tokens.
"""

from __future__ import annotations

import enum
import functools
import itertools
import math
import numbers
import operator
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch

from ..api.params import KvCacheCfg, ReshapeAndCacheParam
from ..dispatch import device as runtime
from .dtypes import (
    BLOCK_BYTES,
    CACHE_DTYPES,
    INDEX_DTYPES,
    NZ_BLOCK_SIZE_MULTIPLE,
    NZ_MAX_HEAD_BYTES,
    NZ_MAX_ROW_BYTES,
    dtype_names,
    nz_elements,
)
from .forms import KvCacheArgs, KvCacheCall, PagedLoadArgs, PagedLoadCall, ReshapeAndCacheArgs

INT32_MAX = 2**31 - 1


# ----------------------------------------------------------------------------- generic rules


def _describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {str(value.dtype).removeprefix('torch.')} tensor of shape {tuple(value.shape)}"
    return f"{type(value).__name__} {value!r}"[:120]


def tensor_argument(name: str, value: object) -> torch.Tensor:
    """``value`` itself, or ``TypeError`` when it is not a dense (strided) tensor.

    Only what ``torch.compile`` can trace without running anything: the public functions call it
    before the operator, so a wrong argument gets this message rather than the dispatcher's.
    """
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {_describe(value)}")
    if value.layout != torch.strided:
        raise TypeError(f"{name} must be a dense (strided) tensor, got layout {value.layout}")
    if value.is_quantized:
        raise TypeError(f"{name} must hold data, got a quantized tensor")
    return value


def require_tensor(name: str, value: object, *, allow_meta: bool = False, allow_negated: bool = False) -> torch.Tensor:
    """``value`` itself, or ``TypeError`` when it is not a dense tensor holding its values in memory
    (meta tensors only with ``allow_meta``: a call on meta tensors computes shapes; lazily negated
    views only with ``allow_negated``, for code that reads through torch ops, which resolve them)."""
    tensor = tensor_argument(name, value)
    if tensor.is_meta and not allow_meta:
        raise TypeError(f"{name} must hold data, got a meta tensor")
    if not allow_negated and tensor.is_neg():
        raise negated_view_error(name)
    return tensor


def negated_view_error(name: str) -> TypeError:
    """The error for a lazily negated view (e.g. ``complex.conj().imag``), whose memory holds the values' negatives."""
    return TypeError(f"{name} is a lazily negated view (is_neg()), whose memory holds other values: "
                     f"pass {name}.resolve_neg()")


def require_dtype(name: str, tensor: torch.Tensor, allowed: tuple[torch.dtype, ...]) -> None:
    """``TypeError`` unless ``tensor.dtype`` is one of ``allowed``."""
    if tensor.dtype not in allowed:
        raise TypeError(
            f"{name} must have dtype {dtype_names(allowed)}, got {str(tensor.dtype).removeprefix('torch.')}"
        )


def require_ndim(name: str, tensor: torch.Tensor, ndims: tuple[int, ...], shape_doc: str) -> None:
    """``ValueError`` unless ``tensor`` has one of the ranks ``ndims``."""
    if tensor.dim() not in ndims:
        raise ValueError(f"{name} must be {shape_doc}, got shape {tuple(tensor.shape)}")


def require_writable(name: str, tensor: torch.Tensor) -> None:
    """``ValueError`` when an output written in place would be an autograd or inference-mode error,
    or has elements sharing memory (an ``expand()`` view: which write would win is undefined)."""
    if tensor.requires_grad:
        raise ValueError(
            f"{name} requires grad, but it is written in place and the operation is not "
            f"differentiable: pass {name}.detach()"
        )
    if tensor.is_inference() and not torch.is_inference_mode_enabled():
        raise ValueError(
            f"{name} was made under torch.inference_mode(), and PyTorch forbids updating such a tensor "
            f"in place outside it: call inside torch.inference_mode()"
        )
    if tensor.is_contiguous() or tensor.numel() == 0:
        return
    span = 0  # the largest offset reachable through the dimensions seen so far
    for stride, size in sorted((s, n) for s, n in zip(tensor.stride(), tensor.shape) if n > 1):
        if stride <= span:
            raise ValueError(
                f"{name} is written in place, so each element needs its own memory, but shape "
                f"{tuple(tensor.shape)} with strides {tensor.stride()} maps several elements to one place "
                f"(an expand() view?): pass a tensor with distinct elements"
            )
        span += stride * (size - 1)


def memory_span(tensor: torch.Tensor) -> tuple[int, int]:
    """``[first, last)`` byte addresses a non-empty tensor may touch (strides are never negative)."""
    if tensor.is_contiguous():  # the usual case, without a pass over the strides
        return tensor.data_ptr(), tensor.data_ptr() + tensor.nbytes
    last_element = sum((n - 1) * s for n, s in zip(tensor.shape, tensor.stride()))
    return tensor.data_ptr(), tensor.data_ptr() + (last_element + 1) * tensor.element_size()


def _window(tensor: torch.Tensor, period: int) -> tuple[int, int] | None:
    """``(first, length)``: every byte of ``tensor`` lies, modulo ``period``, in the ``length`` bytes
    from ``first`` (wrapping); None when that window would not fit in one period.

    Dimensions whose byte strides are multiples of ``period`` move whole periods; the others
    (e.g. the columns of a column slice) make the window.
    """
    size = tensor.element_size()
    length = size
    for n, stride in zip(tensor.shape, tensor.stride()):
        if n > 1 and (stride * size) % period:
            length += (n - 1) * stride * size
    return (tensor.data_ptr() % period, length) if length <= period else None


def _interleaved_apart(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` provably share no byte because, for some period (a byte stride of
    either), each one's bytes fall in a window of every period that the other's window misses:
    ``buf[..., :k]`` and ``buf[..., k:]`` of one ``[n, bs, h, k + v]`` buffer (MLA), or
    ``buf[:, 0]`` and ``buf[:, 1]`` of one ``[n, 2, ...]`` buffer (K and V block by block)."""
    size_a, size_b = a.element_size(), b.element_size()
    periods = {s * size_a for n, s in zip(a.shape, a.stride()) if n > 1 and s > 0}
    periods |= {s * size_b for n, s in zip(b.shape, b.stride()) if n > 1 and s > 0}
    for period in sorted(periods):
        a_window, b_window = _window(a, period), _window(b, period)
        if a_window is not None and b_window is not None:
            (a_at, a_len), (b_at, b_len) = a_window, b_window
            if (b_at - a_at) % period >= a_len and (a_at - b_at) % period >= b_len:
                return True
    return False


def _may_share_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two non-empty tensors on one device may share a byte: their address ranges meet, and
    they are not interleaved apart. Rarer views that share no byte may still answer True."""
    a_first, a_end = memory_span(a)
    b_first, b_end = memory_span(b)
    return a_first < b_end and b_first < a_end and not _interleaved_apart(a, b)


def require_apart(name: str, out: torch.Tensor, inputs: dict[str, torch.Tensor]) -> None:
    """``ValueError`` when output ``out`` may share memory with a tensor the call reads while writing.

    The test is on address ranges and interleaved windows (:func:`_may_share_memory`), so it may
    also reject rarer views that share no element; what would run instead is a read of
    half-written data.
    """
    if out.numel() == 0:
        return
    for input_name, tensor in inputs.items():
        if tensor.numel() == 0 or tensor.device != out.device:  # addresses of two devices never meet
            continue
        if _may_share_memory(out, tensor):
            raise ValueError(
                f"{name} shares memory with {input_name}, which the operation reads while it writes {name}: "
                f"pass tensors in separate memory (e.g. {input_name}.clone())"
            )


def require_separate_outputs(first_name: str, first: torch.Tensor, name: str, out: torch.Tensor) -> None:
    """``ValueError`` when two outputs may share memory: which of the two writes lands would be undefined."""
    if first.numel() and out.numel() and first.device == out.device and _may_share_memory(first, out):
        raise ValueError(
            f"{name} shares memory with {first_name}, and the operation writes both (the NPU kernels in "
            f"parallel), so which write lands would be undefined: pass separate tensors"
        )


def require_base_formats(tensors: dict[str, torch.Tensor | None], nz_caches: tuple[str, ...] = ()) -> None:
    """``ValueError`` for an NPU tensor stored in a private format (e.g. FRACTAL_NZ by ``npu_format_cast``),
    whose bytes are not in its logical layout: the operations address tensors by their strides.

    The tensors named in ``nz_caches`` (the caches of an NZ call) may be FRACTAL_NZ when that
    storage holds their logical bytes (:func:`require_nz_storage_in_place`).
    """
    for name, tensor in tensors.items():
        code = None if tensor is None else runtime.storage_format(tensor)
        if code == runtime.FRACTAL_NZ and name in nz_caches:
            require_nz_storage_in_place(name, tensor)  # type: ignore[arg-type]
            continue
        if code is not None and code not in runtime.BASE_FORMATS:
            what = runtime.PRIVATE_FORMATS.get(code, f"format {code}")
            raise ValueError(
                f"{name} is stored in the NPU's private format {what}, whose bytes are not in the tensor's "
                f"logical layout: pass torch_npu.npu_format_cast({name}, 2) (ND) or a tensor made without a format cast"
            )


def require_nz_storage_in_place(name: str, cache: torch.Tensor) -> None:
    """``ValueError`` unless a FRACTAL_NZ cache's storage holds the bytes of its logical NZ shape.

    FRACTAL_NZ tiles a tensor's last two dims ``[M, N]`` into ``16 x C0`` fractals, stored
    ``[N / C0, M / 16, 16, C0]``, with ``C0`` 32 bytes of a 1- or 2-byte type. A cache shaped
    ``[num_blocks, T // E, block_size, E]`` (``E = C0``, ``block_size % 16 == 0``, contiguous,
    as torch_npu's tests cast it) is then stored exactly in that row-major order: one fractal
    column, whole fractals. Any other shape holds its bytes elsewhere than its strides say.
    """
    e = nz_elements(cache.dtype)
    shape = tuple(cache.shape)
    why = None
    if cache.element_size() not in (1, 2):
        why = (f"its dtype {str(cache.dtype).removeprefix('torch.')} has 4-byte elements, whose FRACTAL_NZ "
               f"fractal width ascend_kv does not know to be E = {e}")
    elif cache.dim() != 4 or shape[3] != e:
        why = (f"its logical shape {shape} is not [num_blocks, T // E, block_size, E = {e}] (a FRACTAL_NZ cache of "
               f"logical shape [num_blocks, block_size, T] holds the bytes of [num_blocks, T // E, block_size, E], "
               f"but addressed through its own strides: cast the cache in the NZ shape instead)")
    elif shape[2] % NZ_BLOCK_SIZE_MULTIPLE:
        why = f"block_size (shape[2]) = {shape[2]} is not a multiple of 16, so its fractals are padded"
    elif not cache.is_contiguous():
        why = "it is a strided view, whose storage fractals are not its rows"
    if why is not None:
        raise ValueError(
            f"{name} is stored in the NPU's private format FRACTAL_NZ, and its bytes are not where its shape "
            f"and strides say: {why}; pass torch_npu.npu_format_cast({name}, 2) (ND) or a cache made without a cast"
        )


def require_same_device(tensors: dict[str, torch.Tensor]) -> torch.device:
    """The one device all ``tensors`` are on, or ``ValueError`` naming the odd one out."""
    (first_name, first), *rest = tensors.items()
    for name, tensor in rest:
        if tensor.device != first.device:
            raise ValueError(
                f"{name} is on {tensor.device} but {first_name} is on {first.device}: "
                f"all tensor arguments must be on one device"
            )
    return first.device


def index_tensor(name: str, value: object, ndim: int = 1, *, allow_meta: bool = False) -> torch.Tensor:
    """``value`` itself when it is an int32/int64 tensor of rank ``ndim``, else the error saying so."""
    tensor = require_tensor(name, value, allow_meta=allow_meta)
    require_dtype(name, tensor, INDEX_DTYPES)
    if tensor.dim() != ndim:
        doc = "a 1-D tensor [batch]" if ndim == 1 else "a 2-D tensor [batch, max_blocks]"
        raise ValueError(f"{name} must be {doc}, got shape {tuple(tensor.shape)}")
    return tensor


def require_entries(name: str, tensor: torch.Tensor, expected: int, why: str) -> None:
    """``ValueError`` unless the 1-D index tensor ``tensor`` has ``expected`` entries."""
    if tensor.shape[0] != expected:
        raise ValueError(f"{name} must have {expected} entries ({why}), got {tensor.shape[0]}")


def scalar_index_tensor(name: str, value: torch.Tensor, *, allow_meta: bool = False) -> torch.Tensor:
    """``value`` itself when it is a one-element integer tensor (its value is read later, or by the kernels)."""
    require_tensor(name, value, allow_meta=allow_meta)
    if value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool:
        raise TypeError(f"{name} must be an int or an integer tensor, got {_describe(value)}")
    if value.numel() != 1:
        raise ValueError(f"{name} must have exactly one element, got shape {tuple(value.shape)}")
    return value


def require_index_devices(data_device: torch.device, tensors: dict[str, object]) -> None:
    """``ValueError`` unless every index tensor is on the host or on the data's device."""
    for name, tensor in tensors.items():
        if isinstance(tensor, torch.Tensor) and tensor.device != data_device and tensor.device.type != "cpu":
            raise ValueError(
                f"{name} is on {tensor.device}, but index tensors must be on the host (cpu) or on the "
                f"data's device {data_device}"
            )


def on_host(*tensors: torch.Tensor | None) -> bool:
    """Whether every given index tensor lives in host memory (so its values are free to read)."""
    return all(t is None or t.is_cpu for t in tensors)


def host_values(tensors: Sequence[torch.Tensor]) -> list[list[int]]:
    """Each tensor's values as a flat list of ints.

    Host tensors are read directly; the device-resident ones are gathered on their device and
    read back in one transfer (the one synchronisation of full validation).
    """
    on_device = [t for t in tensors if not t.is_cpu]
    fetched: Iterator[list[int]] = iter(())
    if on_device:
        flat: list[int] = torch.cat([t.reshape(-1).to(torch.int64) for t in on_device]).tolist()
        sizes = itertools.accumulate(t.numel() for t in on_device)
        fetched = iter([flat[end - t.numel() : end] for t, end in zip(on_device, sizes)])
    return [_flat_list(t) if t.is_cpu else next(fetched) for t in tensors]


def _flat_list(t: torch.Tensor) -> list[int]:
    values: list[int] = (t if t.dim() == 1 else t.reshape(-1)).tolist()
    return values


def require_all(name: str, ok: list[bool], values: list[int], rule: str) -> None:
    """``ValueError`` naming the first entry of ``values`` where ``ok`` is False."""
    if not all(ok):
        i = ok.index(False)
        raise ValueError(f"{name}[{i}] = {values[i]} {rule}")


def exclusive_prefix_sum(values: Sequence[int]) -> list[int]:
    """``[0, v0, v0+v1, ...]`` without the total: where each entry's run starts."""
    return [0, *itertools.accumulate(values)][:-1]


def int_argument(name: str, value: object) -> int:
    """A Python int, a numpy integer or a one-element integer tensor, as an int."""
    if type(value) is int:  # the common case, without the ABC check below
        return value
    if isinstance(value, torch.Tensor):
        return int(scalar_index_tensor(name, value).item())  # a meta tensor has no value to read
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int or a one-element integer tensor, got {_describe(value)}")
    return int(value)


def bool_argument(name: str, value: object) -> bool:
    """``value`` as a bool, or ``TypeError`` for anything but ``bool`` / ``numpy.bool_``."""
    if value is True or value is False:  # the common case, without the type test below
        return value
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {_describe(value)}")
    return bool(value)


def _member(member: enum.Enum) -> str:
    return f"{type(member).__qualname__}.{member.name}"


def _same_layout(member: enum.Enum) -> str:
    """The name, in the other layout enum, of the layout an enum member names (by its name)."""
    nz = "NZ" in member.name
    if isinstance(member, KvCacheCfg):
        return "K_CACHE_V_CACHE_NZ" if nz else "K_CACHE_V_CACHE"
    return "K_CACHE_V_CACHE_NZ" if nz else "K_CACHE_V_CACHE_ND"


def kv_cache_cfg_argument(value: object) -> KvCacheCfg:
    """``KvCacheCfg`` from the enum, its int value (0, 1) or the string ``"nz"`` / ``"nd"``."""
    if type(value) is KvCacheCfg:  # the common case, without the ABC test below
        return value
    if isinstance(value, enum.Enum):
        raise TypeError(
            f"kv_cache_cfg must be a KvCacheCfg, 0, 1, 'nz' or 'nd', got {_member(value)}, a member of another enum "
            f"(ReshapeAndCacheParam.KvCacheCfg numbers ND 0, key-only 1, NZ 2): pass KvCacheCfg.{_same_layout(value)}"
        )
    if isinstance(value, str):
        by_name = {"nz": KvCacheCfg.K_CACHE_V_CACHE_NZ, "nd": KvCacheCfg.K_CACHE_V_CACHE_ND}
        if value.lower() in by_name:
            return by_name[value.lower()]
        raise ValueError(f"kv_cache_cfg must be 'nz' or 'nd', got {value!r}")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"kv_cache_cfg must be a KvCacheCfg, 0, 1, 'nz' or 'nd', got {_describe(value)}")
    if int(value) not in (0, 1):
        raise ValueError(f"kv_cache_cfg must be 0 (K_CACHE_V_CACHE_NZ) or 1 (K_CACHE_V_CACHE_ND), got {value}")
    return KvCacheCfg(int(value))


def _require_row_alignment(name: str, elements: int, dtype: torch.dtype, what: str) -> None:
    """``ValueError`` unless a row of ``elements`` is a positive multiple of 32 bytes."""
    row_bytes = elements * dtype.itemsize
    if row_bytes == 0 or row_bytes % BLOCK_BYTES:
        per_block = BLOCK_BYTES // dtype.itemsize
        raise ValueError(
            f"{name}: {what} = {elements} must be a positive multiple of {per_block} elements "
            f"({BLOCK_BYTES} bytes of {str(dtype).removeprefix('torch.')}), got {row_bytes} bytes"
        )


# ----------------------------------------------------------------------------- kv_cache


def kv_cache_args(
    new_kv: object, layer_id: object, past: object, token_offset: object, seq_len: object, *, shapes_only: bool = False
) -> KvCacheArgs:
    """The rules of a ``kv_cache`` call that need no index values; see :func:`ascend_kv.kv_cache`.

    ``shapes_only``: the call only computes shapes (fake or meta tensors): the memory-sharing rule
    is skipped, and meta tensors are allowed when ``past`` is one.
    """
    meta = shapes_only and isinstance(past, torch.Tensor) and past.is_meta
    new_kv = require_tensor("new_kv", new_kv, allow_meta=meta)
    past = require_tensor("past", past, allow_meta=meta)
    require_dtype("past", past, CACHE_DTYPES)
    require_dtype("new_kv", new_kv, CACHE_DTYPES)
    if new_kv.dtype != past.dtype:
        raise TypeError(f"new_kv.dtype must equal past.dtype = {past.dtype}, got {new_kv.dtype}")
    require_ndim("past", past, (4,), "a 4-D tensor [layers, batch, max_seq_len, hidden]")
    require_ndim(
        "new_kv", new_kv, (2, 4), "a 2-D tensor [ntokens, hidden] or a 4-D tensor [batch, seq, heads, head_size]"
    )
    require_writable("past", past)
    layers, batch, _, hidden = past.shape
    _require_row_alignment("past", hidden, past.dtype, "hidden (past.shape[3])")
    new_hidden = new_kv.shape[1] if new_kv.dim() == 2 else new_kv.shape[2] * new_kv.shape[3]
    if new_hidden != hidden:
        what = "new_kv.shape[1]" if new_kv.dim() == 2 else "new_kv.shape[2] * new_kv.shape[3]"
        raise ValueError(f"{what} = {new_hidden} must equal hidden = {hidden} (past.shape[3])")
    tokens = new_kv if new_kv.dim() == 2 else new_kv.reshape(-1, hidden)
    if not shapes_only:
        require_apart("past", past, {"new_kv": new_kv})
    layer: int | torch.Tensor
    if isinstance(layer_id, torch.Tensor):
        layer = scalar_index_tensor("layer_id", layer_id, allow_meta=meta)
    else:
        layer = int_argument("layer_id", layer_id)
        require_layer_in_range(layer, layers)
    token_offset = index_tensor("token_offset", token_offset, allow_meta=meta)
    seq_len = index_tensor("seq_len", seq_len, allow_meta=meta)
    require_same_device({"past": past, "new_kv": new_kv})
    require_index_devices(past.device, {"token_offset": token_offset, "seq_len": seq_len, "layer_id": layer})
    require_entries("token_offset", token_offset, batch, "batch = past.shape[1]")
    require_entries("seq_len", seq_len, batch, "batch = past.shape[1]")
    return KvCacheArgs(tokens, past, layer, token_offset, seq_len)


def require_layer_in_range(layer: int, layers: int) -> None:
    """``ValueError`` unless ``0 <= layer < layers``."""
    if not 0 <= layer < layers:
        raise ValueError(f"layer_id = {layer} must be in [0, {layers}) (past.shape[0])")


def kv_cache_call(args: KvCacheArgs) -> KvCacheCall:
    """The rules of a ``kv_cache`` call on its index values, read to the host (one transfer at most)."""
    layer_tensor = [args.layer_id] if isinstance(args.layer_id, torch.Tensor) else []
    offsets, lengths, *layer_values = host_values([args.token_offset, args.seq_len, *layer_tensor])
    layer = layer_values[0][0] if layer_values else args.layer_id
    require_layer_in_range(int(layer), args.past.shape[0])
    max_seq_len = args.past.shape[2]
    if min(lengths, default=0) < 0:  # each rule screens at C speed, then finds the first offender
        require_all("seq_len", [n >= 0 for n in lengths], lengths, "is negative")
    total = sum(lengths)
    if total != args.new_kv.shape[0]:
        raise ValueError(f"sum(seq_len) = {total} must equal ntokens = {args.new_kv.shape[0]} (rows of new_kv)")
    if not all(map(operator.ge, offsets, lengths)):
        require_all("token_offset", list(map(operator.ge, offsets, lengths)), offsets,
                    "is smaller than seq_len at that index")
    if max(offsets, default=0) > max_seq_len:
        require_all(
            "token_offset", [o <= max_seq_len for o in offsets], offsets,
            f"exceeds max_seq_len = {max_seq_len} (past.shape[2])",
        )
    return KvCacheCall(
        new_kv=args.new_kv,
        past=args.past,
        layer_id=int(layer),
        seq_len=lengths,
        read_start=exclusive_prefix_sum(lengths),
        write_start=list(map(operator.sub, offsets, lengths)),
    )


def check_kv_cache(
    new_kv: object, layer_id: object, past: object, token_offset: object, seq_len: object
) -> KvCacheCall:
    """Every rule of a ``kv_cache`` call, values included; see :func:`ascend_kv.kv_cache`."""
    return kv_cache_call(kv_cache_args(new_kv, layer_id, past, token_offset, seq_len))


# ----------------------------------------------------------------------------- paged_cache_load


def _load_cache_shapes(
    layout: KvCacheCfg, key_cache: torch.Tensor, value_cache: torch.Tensor
) -> tuple[int, int, tuple[int, ...], tuple[int, ...]]:
    """:func:`check_cache_shapes` for ``paged_cache_load``, whose default layout is NZ (ATB's): an NZ
    shape error on caches that are valid ND says to pass ``kv_cache_cfg="nd"``."""
    try:
        return check_cache_shapes(layout, key_cache, value_cache)
    except ValueError as error:
        if layout == KvCacheCfg.K_CACHE_V_CACHE_ND:
            raise
        try:
            check_cache_shapes(KvCacheCfg.K_CACHE_V_CACHE_ND, key_cache, value_cache)
        except (TypeError, ValueError):
            raise error from None
        raise ValueError(
            f"{error}. The caches are valid ND caches [num_blocks, block_size, num_heads, head_size]: pass "
            f"kv_cache_cfg='nd' (paged_cache_load reads NZ by default, as ATB does)"
        ) from None


def check_cache_shapes(
    layout: KvCacheCfg, key_cache: torch.Tensor, value_cache: torch.Tensor
) -> tuple[int, int, tuple[int, ...], tuple[int, ...]]:
    """``(num_blocks, block_size, key row shape, value row shape)`` of a valid cache pair."""
    if layout == KvCacheCfg.K_CACHE_V_CACHE_ND:
        doc = "a 4-D ND cache [num_blocks, block_size, num_heads, head_size]"
        require_ndim("key_cache", key_cache, (4,), doc)
        require_ndim("value_cache", value_cache, (4,), doc)
        for i, what in ((0, "num_blocks"), (1, "block_size"), (2, "num_heads")):
            if value_cache.shape[i] != key_cache.shape[i]:
                raise ValueError(
                    f"value_cache.shape[{i}] ({what}) = {value_cache.shape[i]} must equal "
                    f"key_cache.shape[{i}] = {key_cache.shape[i]}"
                )
        for name, cache in (("key_cache", key_cache), ("value_cache", value_cache)):
            _require_row_alignment(name, cache.shape[2] * cache.shape[3], cache.dtype, "num_heads * head_size")
        return key_cache.shape[0], key_cache.shape[1], tuple(key_cache.shape[2:]), tuple(value_cache.shape[2:])

    doc = "a 4-D NZ cache [num_blocks, num_heads * head_size // E, block_size, E]"
    require_ndim("key_cache", key_cache, (4,), doc)
    require_ndim("value_cache", value_cache, (4,), doc)
    for name, cache in (("key_cache", key_cache), ("value_cache", value_cache)):
        e = nz_elements(cache.dtype)
        if cache.shape[3] != e:
            raise ValueError(
                f"{name}.shape[3] must be E = {e} for {str(cache.dtype).removeprefix('torch.')} in NZ, "
                f"got {cache.shape[3]}"
            )
        row_bytes = cache.shape[1] * e * cache.dtype.itemsize
        if cache.shape[1] == 0 or row_bytes > NZ_MAX_ROW_BYTES:
            raise ValueError(
                f"{name}: num_heads * head_size * itemsize must be in (0, {NZ_MAX_ROW_BYTES}] bytes in NZ, "
                f"got {row_bytes} ({name}.shape[1] = {cache.shape[1]} fractals of {BLOCK_BYTES} bytes)"
            )
    for i, what in ((0, "num_blocks"), (2, "block_size")):
        if value_cache.shape[i] != key_cache.shape[i]:
            raise ValueError(
                f"value_cache.shape[{i}] ({what}) = {value_cache.shape[i]} must equal "
                f"key_cache.shape[{i}] = {key_cache.shape[i]}"
            )
    block_size = key_cache.shape[2]
    if block_size % NZ_BLOCK_SIZE_MULTIPLE:
        raise ValueError(
            f"key_cache.shape[2] (block_size) = {block_size} must be a multiple of {NZ_BLOCK_SIZE_MULTIPLE} in NZ"
        )
    key_row = (key_cache.shape[1] * key_cache.shape[3],)
    value_row = (value_cache.shape[1] * value_cache.shape[3],)
    return key_cache.shape[0], block_size, key_row, value_row


def _lengths_and_starts(context_lens: list[int], batch: int, cumsum: bool) -> tuple[list[int], list[int]]:
    """``(lens, out_start)`` per batch entry from ``context_lens`` in either mode (entry counts checked)."""
    if cumsum:
        require_all("context_lens", [n >= 0 for n in context_lens], context_lens, "is negative")
        lens = list(map(operator.sub, context_lens[1:], context_lens[:-1]))
        if min(lens, default=0) < 0:
            i = [n < 0 for n in lens].index(True) + 1
            raise ValueError(
                f"context_lens[{i}] = {context_lens[i]} is smaller than context_lens[{i - 1}] = "
                f"{context_lens[i - 1]}: cumulative lengths must be non-decreasing"
            )
        return lens, context_lens[:-1]
    require_all("context_lens", [n >= 0 for n in context_lens], context_lens, "is negative")
    return context_lens, exclusive_prefix_sum(context_lens)


def _needed_block_table(
    read_columns: Callable[[int], list[list[int]]], max_blocks: int, lens: list[int], first_column: list[int],
    block_size: int, num_blocks: int,
) -> tuple[list[list[int]], list[int]]:
    """The block table's columns up to the furthest one a token needs ``[batch][columns]`` (read with
    ``read_columns(columns)``), and the entries tokens need, in output order ``[blocks read]``.

    ``ValueError`` unless every entry a token needs exists and is a valid block id; entries no
    token needs are ignored (``-1`` padding is fine).
    """
    last_column = [first + -(-n // block_size) for first, n in zip(first_column, lens)]  # one past the last needed
    fits = [last <= max_blocks for last in last_column]
    if not all(fits):
        b = fits.index(False)
        raise ValueError(
            f"block_table has {max_blocks} columns, but batch entry {b} needs columns "
            f"{first_column[b]}..{last_column[b] - 1} ({lens[b]} tokens from column "
            f"{first_column[b]}, block_size {block_size})"
        )
    rows = read_columns(max(last_column, default=0))
    needed = list(itertools.chain.from_iterable(map(operator.getitem, rows, map(slice, first_column, last_column))))
    if needed and (min(needed) < 0 or max(needed) >= num_blocks):  # the screen runs at C speed; then find the first
        b, c = next((b, c) for b, (first, last) in enumerate(zip(first_column, last_column))
                    for c in range(first, last) if not 0 <= rows[b][c] < num_blocks)
        raise ValueError(
            f"block_table[{b}, {c}] = {rows[b][c]} is outside [0, {num_blocks}) (num_blocks = key_cache.shape[0])"
        )
    return rows, needed


def _table_reader(table: torch.Tensor, flat: list[int] | None) -> Callable[[int], list[list[int]]]:
    """Reads the leading columns of ``table`` ``[batch, max_blocks]``: from ``flat`` (its values, already
    read) or, for a host table, only the columns asked for."""
    batch, max_blocks = table.shape

    def read(columns: int) -> list[list[int]]:
        if flat is not None:
            return [flat[b * max_blocks : b * max_blocks + columns] for b in range(batch)]
        rows: list[list[int]] = (table if columns == max_blocks else table.narrow(1, 0, columns)).tolist()
        return rows

    return read


def _output(
    name: str, given: object, cache: torch.Tensor, row_shape: tuple[int, ...], rows: int | None,
    count_rows: Callable[[], int], allow_meta: bool,
) -> torch.Tensor:
    """The given output after its checks (``rows``: the least row count, None when unknown), or a
    zero-filled ``[rows, *row_shape]`` tensor (``count_rows()`` when ``rows`` is unknown)."""
    if given is None:
        shape = (count_rows() if rows is None else rows, *row_shape)
        try:
            return torch.zeros(shape, dtype=cache.dtype, device=cache.device)
        except (RuntimeError, MemoryError) as error:  # the allocator's refusal, on any device
            raise ValueError(
                f"{name}: the output {list(shape)} that context_lens asks for "
                f"({math.prod(shape) * cache.dtype.itemsize} bytes) cannot be allocated: {error}"
            ) from error
    out = require_tensor(name, given, allow_meta=allow_meta)
    if out.dtype != cache.dtype:
        raise TypeError(f"{name}.dtype must equal {name}_cache.dtype = {cache.dtype}, got {out.dtype}")
    expected = f"[rows{'' if rows is None else f' >= {rows}'}, {', '.join(map(str, row_shape))}]"
    if tuple(out.shape[1:]) != row_shape or out.dim() != 1 + len(row_shape) or out.shape[0] < (rows or 0):
        raise ValueError(f"{name} must have shape {expected}, got {tuple(out.shape)}")
    require_writable(name, out)
    return out


def paged_cache_load(
    key_cache: object,
    value_cache: object,
    block_table: object,
    context_lens: object,
    *,
    kv_cache_cfg: object = KvCacheCfg.K_CACHE_V_CACHE_NZ,
    cumsum: object = False,
    seq_starts: object = None,
    key: object = None,
    value: object = None,
    zero_fill: object = False,
    read_values: bool = True,
    shapes_only: bool = False,
    count_rows: Callable[[PagedLoadArgs], int] | None = None,
) -> tuple[PagedLoadArgs, PagedLoadCall | None]:
    """Validate a ``paged_cache_load`` call; see :func:`ascend_kv.paged_cache_load`.

    With ``read_values`` every rule runs and the second result is the validated call (index
    values read to the host, one transfer at most for device tensors). Without it only the rules
    that need no values run; missing outputs are then allocated with ``count_rows(args)`` rows
    (``args`` holding placeholder outputs). Missing outputs are allocated zero-filled on the
    caches' device after every check has passed. ``shapes_only``: the call only computes shapes
    (fake or meta tensors): the memory-sharing rules are skipped, and meta tensors are allowed
    when ``key_cache`` is one. ``zero_fill`` (torch_npu's gather): block-table entries are not
    checked, as tokens with a missing column or an invalid block id load zeros; the second
    result is then None (the backends take the first).
    """
    layout = kv_cache_cfg_argument(kv_cache_cfg)
    cumsum = bool_argument("cumsum", cumsum)
    zero_fill = bool_argument("zero_fill", zero_fill)
    meta = shapes_only and isinstance(key_cache, torch.Tensor) and key_cache.is_meta
    key_cache = require_tensor("key_cache", key_cache, allow_meta=meta)
    value_cache = require_tensor("value_cache", value_cache, allow_meta=meta)
    require_dtype("key_cache", key_cache, CACHE_DTYPES)
    require_dtype("value_cache", value_cache, CACHE_DTYPES)
    if layout == KvCacheCfg.K_CACHE_V_CACHE_NZ and cumsum:
        raise ValueError("cumsum=True is not supported with kv_cache_cfg = NZ (ATB rejects it): use ND")
    if layout == KvCacheCfg.K_CACHE_V_CACHE_NZ and seq_starts is not None:
        raise ValueError("seq_starts is not supported with kv_cache_cfg = NZ (ATB rejects it): use ND")
    num_blocks, block_size, key_row, value_row = _load_cache_shapes(layout, key_cache, value_cache)

    table = index_tensor("block_table", block_table, ndim=2, allow_meta=meta)
    lens_tensor = index_tensor("context_lens", context_lens, allow_meta=meta)
    batch = table.shape[0]
    if cumsum:
        require_entries("context_lens", lens_tensor, batch + 1, "batch + 1 in cumsum mode, batch = block_table.shape[0]")
    else:
        require_entries("context_lens", lens_tensor, batch, "batch = block_table.shape[0]")
    starts_tensor = None
    if seq_starts is not None:
        starts_tensor = index_tensor("seq_starts", seq_starts, allow_meta=meta)
        require_entries("seq_starts", starts_tensor, batch, "batch = block_table.shape[0]")
    data = {"key_cache": key_cache, "value_cache": value_cache}
    data.update({name: out for name, out in (("key", key), ("value", value)) if isinstance(out, torch.Tensor)})
    device = require_same_device(data)
    require_index_devices(device, {"block_table": table, "context_lens": lens_tensor, "seq_starts": starts_tensor})

    def args_with(key_out: torch.Tensor, value_out: torch.Tensor) -> PagedLoadArgs:
        return PagedLoadArgs(layout, key_cache, value_cache, table, lens_tensor, starts_tensor, cumsum, key_out, value_out,
                             zero_fill)

    call = None
    end_row = None
    if read_values:
        table_on_host = table.is_cpu or zero_fill  # zero_fill reads no table value
        optional = {"starts": starts_tensor, "table": None if table_on_host else table}
        lens_given, *read = host_values([lens_tensor, *(t for t in optional.values() if t is not None)])
        values = dict(zip((name for name, t in optional.items() if t is not None), read))
        starts, table_values = values.get("starts"), values.get("table")
        lens, out_start = _lengths_and_starts(lens_given, batch, cumsum)
        if starts is None:
            first_column = [0] * batch
        else:
            require_all("seq_starts", [s >= 0 for s in starts], starts, "is negative")
            first_column = [s // block_size for s in starts]
        num_tokens = sum(lens)
        end_row = lens_given[-1] if cumsum else num_tokens  # cumsum: context_lens[-1] rows, even with batch 0
        if end_row > INT32_MAX:
            raise ValueError(
                f"the output would have {end_row} rows (from context_lens), more than the kernels' int32 limit "
                f"{INT32_MAX}"
            )
        if not zero_fill:
            rows_needed, blocks = _needed_block_table(
                _table_reader(table, table_values), table.shape[1], lens, first_column, block_size, num_blocks
            )

    @functools.cache
    def rows_to_allocate() -> int:  # asked once for both outputs
        assert count_rows is not None, "outputs to allocate without index values need count_rows"
        placeholder = key_cache.new_empty((0, *key_row)), value_cache.new_empty((0, *value_row))
        return count_rows(args_with(*placeholder))

    key_out = _output("key", key, key_cache, key_row, end_row, rows_to_allocate, meta)
    value_out = _output("value", value, value_cache, value_row, end_row, rows_to_allocate, meta)
    if not shapes_only:
        caches = {"key_cache": key_cache, "value_cache": value_cache}
        for name, given, out in (("key", key, key_out), ("value", value, value_out)):
            if given is not None:
                require_apart(name, out, caches)
        if key is not None and value is not None:
            require_separate_outputs("key", key_out, "value", value_out)
    if read_values and not zero_fill:
        call = PagedLoadCall(
            layout=layout,
            key_cache=key_cache,
            value_cache=value_cache,
            key=key_out,
            value=value_out,
            block_table=rows_needed,
            blocks=blocks,
            lens=lens,
            out_start=out_start,
            first_column=first_column,
            block_size=block_size,
        )
    return args_with(key_out, value_out), call


def check_paged_cache_load(*arguments: object, **options: object) -> PagedLoadCall:
    """Every rule of a ``paged_cache_load`` call, values included: :func:`paged_cache_load`'s call.

    Missing outputs are allocated here (zero-filled, on the caches' device), after every
    check has passed, so the returned call is complete.
    """
    _, call = paged_cache_load(*arguments, **options)  # type: ignore[arg-type]
    assert call is not None
    return call


# ----------------------------------------------------------------------------- reshape_and_cache


def reshape_and_cache_layout(value: object, value_given: bool) -> str:
    """The operator's ``kv_cache_cfg`` (``"nd"`` or ``"nz"``) from the public argument, with the
    key-only rule of ``ReshapeAndCacheParam.KvCacheCfg.K_CACHE_V_BYPASS``."""
    layout, key_only = reshape_and_cache_cfg_argument(value)
    if key_only and value_given:
        raise ValueError("kv_cache_cfg K_CACHE_V_BYPASS writes the key cache only: pass value=None, value_cache=None")
    return "nd" if layout == KvCacheCfg.K_CACHE_V_CACHE_ND else "nz"


def reshape_and_cache_cfg_argument(value: object) -> tuple[KvCacheCfg, bool]:
    """``(cache layout, key only)`` from ``"nd"``, ``"nz"`` or a ``ReshapeAndCacheParam.KvCacheCfg`` member.

    A bare int is refused: ATB numbers this enum differently from the paged load's ``KvCacheCfg``.
    """
    cfg = ReshapeAndCacheParam.KvCacheCfg
    if type(value) is cfg:
        return (KvCacheCfg.K_CACHE_V_CACHE_NZ, False) if value == cfg.K_CACHE_V_CACHE_NZ else (
            KvCacheCfg.K_CACHE_V_CACHE_ND, value == cfg.K_CACHE_V_BYPASS)
    if isinstance(value, enum.Enum):
        raise TypeError(
            f"kv_cache_cfg must be 'nd', 'nz' or a ReshapeAndCacheParam.KvCacheCfg member, got {_member(value)}, a member "
            f"of another enum (KvCacheCfg numbers NZ 0, ND 1): pass ReshapeAndCacheParam.KvCacheCfg."
            f"{_same_layout(value)}"
        )
    if isinstance(value, str):
        by_name = {"nd": KvCacheCfg.K_CACHE_V_CACHE_ND, "nz": KvCacheCfg.K_CACHE_V_CACHE_NZ}
        if value.lower() in by_name:
            return by_name[value.lower()], False
        raise ValueError(f"kv_cache_cfg must be 'nd' or 'nz', got {value!r}")
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        raise TypeError(
            f"kv_cache_cfg must be 'nd', 'nz' or a ReshapeAndCacheParam.KvCacheCfg member, got the int {value}: "
            f"ATB numbers ReshapeAndCacheParam.KvCacheCfg (ND 0, key-only 1, NZ 2) differently from "
            f"PagedCacheLoadParam's (NZ 0, ND 1), so an int is ambiguous"
        )
    raise TypeError(
        f"kv_cache_cfg must be 'nd', 'nz' or a ReshapeAndCacheParam.KvCacheCfg member, got {_describe(value)}"
    )


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
    if layout == KvCacheCfg.K_CACHE_V_CACHE_ND:
        if tuple(cache.shape[2:]) != tuple(tokens.shape[1:]):
            raise ValueError(
                f"{name}.shape[2:] (num_heads, head_size) = {tuple(cache.shape[2:])} must equal "
                f"{name.removesuffix('_cache')}.shape[1:] = {tuple(tokens.shape[1:])}"
            )
        return
    e = nz_elements(cache.dtype)
    if cache.shape[3] != e:
        raise ValueError(
            f"{name}.shape[3] must be E = {e} for {str(cache.dtype).removeprefix('torch.')} in NZ, got {cache.shape[3]}"
        )
    row = tokens.shape[1] * tokens.shape[2]
    if cache.shape[1] * e != row:
        raise ValueError(
            f"{name}.shape[1] * E = {cache.shape[1] * e} must equal num_heads * head_size = {row} "
            f"({name.removesuffix('_cache')}.shape[1] * shape[2])"
        )


def reshape_and_cache(
    key: object,
    value: object,
    key_cache: object,
    value_cache: object,
    slot_mapping: object,
    *,
    kv_cache_cfg: object = "nd",
    read_values: bool = True,
    shapes_only: bool = False,
) -> tuple[ReshapeAndCacheArgs, list[int] | None]:
    """Validate a ``reshape_and_cache`` call; see :func:`ascend_kv.reshape_and_cache`.

    Returns the checked call and, with ``read_values``, ``slot_mapping``'s values after their
    rules (read to the host, one transfer for a device tensor). ``shapes_only`` as in
    :func:`kv_cache_args`.
    """
    layout, _ = reshape_and_cache_cfg_argument(kv_cache_cfg)
    nd = layout == KvCacheCfg.K_CACHE_V_CACHE_ND
    meta = shapes_only and isinstance(key_cache, torch.Tensor) and key_cache.is_meta
    key = require_tensor("key", key, allow_meta=meta)
    key_cache = require_tensor("key_cache", key_cache, allow_meta=meta)
    if (value is None) != (value_cache is None):
        given, missing = ("value", "value_cache") if value_cache is None else ("value_cache", "value")
        raise ValueError(f"{missing} is None but {given} is given: pass both, or neither for the key-only mode")
    if value is None and not nd:
        raise ValueError("the key-only mode (value and value_cache None) is ND only, got kv_cache_cfg = NZ")
    pairs = [("key", key, key_cache)]
    if value is not None:
        pairs.append(("value", require_tensor("value", value, allow_meta=meta),
                      require_tensor("value_cache", value_cache, allow_meta=meta)))
    for name, tokens, cache in pairs:
        require_dtype(f"{name}_cache", cache, CACHE_DTYPES)
        if tokens.dtype != cache.dtype:
            raise TypeError(f"{name}.dtype must equal {name}_cache.dtype = {cache.dtype}, got {tokens.dtype}")
        require_ndim(name, tokens, (3,), f"a 3-D tensor [num_tokens, num_heads, head_size_{name[0]}]")
        doc = ("a 4-D ND cache [num_blocks, block_size, num_heads, head_size]" if nd
               else "a 4-D NZ cache [num_blocks, num_heads * head_size // E, block_size, E]")
        require_ndim(f"{name}_cache", cache, (4,), doc)
    if len(pairs) == 2:
        value_tokens, value_cache_t = pairs[1][1], pairs[1][2]
        for i, what in ((0, "num_tokens"), (1, "num_heads")):
            if value_tokens.shape[i] != key.shape[i]:
                raise ValueError(f"value.shape[{i}] ({what}) = {value_tokens.shape[i]} must equal "
                                 f"key.shape[{i}] = {key.shape[i]}")
        for i, what in ((0, "num_blocks"), (1 if nd else 2, "block_size")):
            if value_cache_t.shape[i] != key_cache.shape[i]:
                raise ValueError(f"value_cache.shape[{i}] ({what}) = {value_cache_t.shape[i]} must equal "
                                 f"key_cache.shape[{i}] = {key_cache.shape[i]}")
    for name, tokens, cache in pairs:
        _require_cache_matches(f"{name}_cache", cache, tokens, layout)
        if not nd:
            _require_nz_head_bytes(name, tokens.shape[2], tokens.dtype)
    num_blocks, block_size = key_cache.shape[0], key_cache.shape[1 if nd else 2]
    if not nd and block_size % NZ_BLOCK_SIZE_MULTIPLE:
        raise ValueError(
            f"key_cache.shape[2] (block_size) = {block_size} must be a multiple of {NZ_BLOCK_SIZE_MULTIPLE} in NZ"
        )
    slots = index_tensor("slot_mapping", slot_mapping, allow_meta=meta)
    if slots.shape[0] > key.shape[0]:
        raise ValueError(f"slot_mapping has {slots.shape[0]} entries, more than num_tokens = {key.shape[0]} "
                         f"(key.shape[0]): at most one slot per token")
    data = {name: t for pair in pairs for name, t in ((pair[0], pair[1]), (f"{pair[0]}_cache", pair[2]))}
    device = require_same_device(data)
    require_index_devices(device, {"slot_mapping": slots})
    caches = {f"{name}_cache": cache for name, _, cache in pairs}
    for name, cache in caches.items():
        require_writable(name, cache)
    if not shapes_only:
        inputs = {name: tokens for name, tokens, _ in pairs}
        for name, cache in caches.items():
            require_apart(name, cache, inputs)
        if len(pairs) == 2:
            require_separate_outputs("key_cache", key_cache, "value_cache", pairs[1][2])
    args = ReshapeAndCacheArgs(layout, key, pairs[1][1] if len(pairs) == 2 else None, key_cache,
                               pairs[1][2] if len(pairs) == 2 else None, slots)
    if not read_values:
        return args, None
    (values,) = host_values([slots])
    assert values is not None
    capacity = num_blocks * block_size
    if max(values, default=-1) >= capacity:
        i = next(i for i, s in enumerate(values) if s >= capacity)
        raise ValueError(
            f"slot_mapping[{i}] = {values[i]} is out of range: the caches hold {capacity} slots "
            f"(num_blocks {num_blocks} x block_size {block_size})"
        )
    return args, values
