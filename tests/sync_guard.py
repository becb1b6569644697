"""Prove on host tensors that code would not read device values back to the host.

On CPU tensors every value is already on the host, so nothing syncs; :func:`no_host_reads`
makes every operation that *would* read values back (and so synchronise) on a device raise
instead: scalar reads (``item()``, ``int()``, ``bool()``), ops whose output shape depends on
values (``nonzero``, boolean-mask indexing, ``masked_select``, ``unique``, ``bincount``,
``repeat_interleave`` without ``output_size``), ops that return Python values
(``torch.equal``), copies between devices, and the two methods that read a host tensor's
memory without going through the dispatcher (``tolist()``, ``numpy()``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten


class HostReadError(RuntimeError):
    """An operation that would read device values back to the host ran under :func:`no_host_reads`."""


#: Ops that read values back whatever their arguments (overload packets: every overload).
_ALWAYS: tuple[Any, ...] = (
    aten._local_scalar_dense, aten.nonzero, aten.masked_select, aten._unique, aten._unique2,
    aten.unique_dim, aten.unique_consecutive, aten.unique_dim_consecutive, aten.bincount, aten.equal,
    aten.is_nonzero,
)

#: Ops with index-tensor arguments, where a boolean (or byte) index is a mask, expanded with ``nonzero``.
_INDEXING: tuple[Any, ...] = (aten.index, aten.index_put, aten.index_put_, aten._index_put_impl_)


def _masks(indices: Any) -> bool:
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices or ())


def _devices(args: tuple[Any, ...]) -> set[torch.device]:
    return {a.device for a in args if isinstance(a, torch.Tensor)}


def _reason(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """Why ``func(*args, **kwargs)`` would read device values back, or None."""
    packet = func.overloadpacket
    if packet in _ALWAYS:
        return "reads tensor values"
    if packet in _INDEXING and _masks(args[1]):
        return "indexes with a boolean mask (a nonzero)"
    if func is aten.repeat_interleave.Tensor and kwargs.get("output_size") is None:
        return "repeat_interleave without output_size sizes its output from values"
    if packet is aten._to_copy and kwargs.get("device") is not None and torch.device(kwargs["device"]) != args[0].device:
        return f"copies from {args[0].device} to {kwargs['device']}"
    if packet in (aten.copy_, aten._copy_from, aten._copy_from_and_resize) and len(_devices(args[:2])) > 1:
        return f"copies between devices {sorted(map(str, _devices(args[:2])))}"
    return None


class _NoHostReads(TorchDispatchMode):
    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        reason = _reason(func, args, kwargs)
        if reason is not None:
            raise HostReadError(f"{func} {reason}, which on a device is a read back to the host")
        return func(*args, **kwargs)


def _refuse(name: str) -> Callable[..., Any]:
    def refuse(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        raise HostReadError(f"Tensor.{name}() reads values back to the host")
    return refuse


@contextmanager
def no_host_reads() -> Iterator[None]:
    """Raise :class:`HostReadError` on any operation that would read device values back to the host."""
    saved = {name: getattr(torch.Tensor, name) for name in ("tolist", "numpy")}
    for name in saved:
        setattr(torch.Tensor, name, _refuse(name))
    try:
        with _NoHostReads():
            yield
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)
