"""The rules every operation shares: types, dtypes, ranks, devices, index tensors, argument types,
and reading index values to the host.

Each raises ``TypeError`` (wrong type or dtype) or ``ValueError`` (wrong shape or value) naming
the argument, with what was expected and what was given, and writes nothing.
"""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Sequence
from typing import Optional, TypeVar, cast

import numpy as np
import torch

from .dtypes import INDEX_DTYPES, dtype_names

INT32_MAX = 2**31 - 1

_MaybeTensor = TypeVar("_MaybeTensor", bound=Optional[torch.Tensor])


def describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {str(value.dtype).removeprefix('torch.')} tensor of shape {tuple(value.shape)}"
    return f"{type(value).__name__} {value!r}"[:120]


def tensor_argument(name: str, value: object) -> torch.Tensor:
    """``value`` itself, or ``TypeError`` when it is not a dense (strided) tensor.

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
        raise TypeError(f"{name} must be an int or an integer tensor, got {describe(value)}")
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


def host_values(tensors: Sequence[torch.Tensor]) -> list[list[int]]:
    """Each tensor's values as a flat list of ints, read as :func:`host_tensors` reads them."""
    return [(t if t.dim() == 1 else t.reshape(-1)).tolist() for t in host_tensors(tensors)]


def host_tensors(tensors: Sequence[_MaybeTensor]) -> list[_MaybeTensor]:
    """Each index tensor in host memory (None stays None): host tensors as they are, the
    device-resident ones gathered on their device as int64 and read back in one transfer (the one
    synchronisation of full validation)."""
    on_device = [t for t in tensors if t is not None and not t.is_cpu]
    if not on_device:  # the usual case
        return list(tensors)
    flat = torch.cat([t.reshape(-1).to(torch.int64) for t in on_device]).cpu()
    ends = itertools.accumulate(t.numel() for t in on_device)
    fetched = iter([flat[end - t.numel() : end].view(t.shape) for t, end in zip(on_device, ends)])
    return [t if t is None or t.is_cpu else cast(_MaybeTensor, next(fetched)) for t in tensors]


def int_argument(name: str, value: object) -> int:
    """A Python int, a numpy integer or a one-element integer tensor, as an int."""
    if type(value) is int:  # the common case, without the ABC check below
        return value
    if isinstance(value, torch.Tensor):
        return int(scalar_index_tensor(name, value).item())  # a meta tensor has no value to read
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int or a one-element integer tensor, got {describe(value)}")
    return int(value)


def bool_argument(name: str, value: object) -> bool:
    """``value`` as a bool, or ``TypeError`` for anything but ``bool`` / ``numpy.bool_``."""
    if value is True or value is False:  # the common case, without the type test below
        return value
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {describe(value)}")
    return bool(value)

