"""How every operator of ``torch.ops.ascend_kv`` is registered: one path for all of them.

Each schema gets ``(CPU, device, fake)`` implementations: the ``Autograd`` key falls through (the
operators are not differentiable, and run without recording gradients), lazily negated views are
refused, every device but the CPU takes the device implementation, and a mutating operator gets
its exact functionalization (:mod:`.functionalization`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from ..rules.common import negated_view_error
from . import functionalization

NAMESPACE = "ascend_kv"

_Result = TypeVar("_Result")
Implementation = Callable[..., Any]
#: Per schema name, its ``(CPU, device, fake)`` implementations.
Implementations = dict[str, tuple[Implementation, Implementation, Implementation]]


def _without_grad(impl: Callable[..., _Result]) -> Callable[..., _Result]:
    """``impl`` run without recording gradients; free when gradients are off already, as in inference."""

    @functools.wraps(impl)
    def run(*args: object, **kwargs: object) -> _Result:
        if not torch.is_grad_enabled():
            return impl(*args, **kwargs)
        torch._C._set_grad_enabled(False)  # what torch.no_grad() does, without its context-manager cost
        try:
            return impl(*args, **kwargs)
        finally:
            torch._C._set_grad_enabled(True)

    return run


def _reject_negated_views(schema: str) -> Callable[..., None]:
    """The kernel for the ``Negative`` key (a lazily negated view among the tensors, lists of tensors
    included): a ``TypeError`` naming it, where PyTorch would otherwise materialise inputs and fail
    on written ones."""
    names = [a.name for a in torch._C.parse_schema(f"{NAMESPACE}::{schema}").arguments]

    def reject(*args: object, **kwargs: object) -> None:
        for name, value in (*zip(names, args), *kwargs.items()):
            tensors = value if isinstance(value, (list, tuple)) else [value]
            for i, tensor in enumerate(tensors):
                if isinstance(tensor, torch.Tensor) and tensor.is_neg():
                    raise negated_view_error(f"{name}[{i}]" if tensors is value else name)

    return reject


def register(lib: torch.library.Library, schemas: dict[str, str], implementations: Implementations) -> None:
    """Define each schema in ``lib`` with its ``(CPU, device, fake)`` implementations."""
    for name, schema in schemas.items():
        cpu_impl, device_impl, fake_impl = implementations[name]
        lib.define(schema)
        lib.impl(name, torch.library.fallthrough_kernel, "Autograd")
        lib.impl(name, _reject_negated_views(schema), "Negative")
        lib.impl(name, _without_grad(cpu_impl), "CPU")
        lib.impl(name, _without_grad(device_impl), "PrivateUse1")
        lib.impl(name, _without_grad(device_impl), "CompositeExplicitAutograd")  # every other device
        torch.library.register_fake(f"{NAMESPACE}::{name}", fake_impl, lib=lib)
        packet, _, overload = name.partition(".")
        functionalization.register(getattr(getattr(torch.ops, NAMESPACE), packet).__getattr__(overload or "default"), lib)
