"""The operators ``torch.ops.ascend_kv.*``: their schemas, and one implementation per device.

PyTorch's dispatcher picks the implementation from the tensors' device (docs/architecture.md):

``CPU``
    Every check, index values included (they are on the host), then the fast host fallback,
    or the kernels' host build when ``sim`` is chosen.
``PrivateUse1`` (the NPU) and every other device
    The checks that need no index values; the value checks too when every index tensor is on
    the host, or with full validation (:mod:`ascend_kv.dispatch.validation`). Host index tensors then go
    to the device in one copy, and the AscendC kernels (NPU only, where :mod:`ascend_kv.dispatch.policy`
    allows) or the device fallback run; neither reads an index value back to the host.
Meta / fake
    Shapes only (``torch.compile``, ``make_fx``, ``torch.export``, ``FakeTensorMode``).

The operators are not differentiable: the ``Autograd`` key falls through to the implementation,
which runs without recording gradients.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any, TypeVar, Union

import torch

from .. import cpu_fallback
from ..backends import kernel_domain, npu
from ..cpu_fallback import on_device
from ..dispatch import policy, validation
from ..rules import checks
from ..rules.forms import KvCacheArgs, PagedLoadArgs, ReshapeAndCacheArgs
from . import functionalization, upload

NAMESPACE = "ascend_kv"
KV_CACHE, PAGED_LOAD, RESHAPE = "KVCacheOperation", "PagedCacheLoadOperation", "ReshapeAndCacheOperation"

_KV_ARGS = "Tensor(a!) past, Tensor token_offset, Tensor seq_len"
_LOAD_ARGS = (
    "Tensor key_cache, Tensor value_cache, Tensor block_table, Tensor context_lens, *, "
    "int kv_cache_cfg=0, bool cumsum=False, Tensor? seq_starts=None, bool zero_fill=False"
)
SCHEMAS = {
    "kv_cache": f"kv_cache(Tensor new_kv, int layer_id, {_KV_ARGS}) -> ()",
    "kv_cache.layer_tensor": f"kv_cache.layer_tensor(Tensor new_kv, Tensor layer_id, {_KV_ARGS}) -> ()",
    "paged_cache_load": f"paged_cache_load({_LOAD_ARGS}) -> (Tensor, Tensor)",
    "paged_cache_load.into": f"paged_cache_load.into({_LOAD_ARGS}, Tensor(a!) key, Tensor(b!) value) -> ()",
    "reshape_and_cache": "reshape_and_cache(Tensor key, Tensor? value, Tensor(a!) key_cache, Tensor(b!)? value_cache, "
                         "Tensor slot_mapping, *, str kv_cache_cfg='nd') -> ()",
}

_LIB = torch.library.Library(NAMESPACE, "DEF")
_Result = TypeVar("_Result")


def _without_grad(impl: Callable[..., _Result]) -> Callable[..., _Result]:
    """``impl`` run without recording gradients (the operators are not differentiable); free when
    gradients are off already, as in inference."""

    @functools.wraps(impl)
    def run(*args: object, **kwargs: object) -> _Result:
        if not torch.is_grad_enabled():
            return impl(*args, **kwargs)
        with torch.no_grad():
            return impl(*args, **kwargs)

    return run


# ----------------------------------------------------------------------------- running a checked call


_Args = Union[KvCacheArgs, PagedLoadArgs, ReshapeAndCacheArgs]
#: Per form of a checked call: the operation's ATB name and the backends' function name.
_OPERATIONS = {KvCacheArgs: (KV_CACHE, "kv_cache"), PagedLoadArgs: (PAGED_LOAD, "paged_cache_load"),
               ReshapeAndCacheArgs: (RESHAPE, "reshape_and_cache")}


def _data_device(args: _Args) -> torch.device:
    return args.past.device if isinstance(args, KvCacheArgs) else args.key_cache.device


def decision(args: _Args) -> policy.Decision:
    """What runs a checked call, and why (the decision the implementations take)."""
    return policy.decide(_OPERATIONS[type(args)][0], _data_device(args), lambda: kernel_domain.outside_reason(args))


def _choose(args: _Args) -> tuple[str, str]:
    """``(backend, function name)`` for a checked call (a fallback on an NPU warns once per reason)."""
    op, function = _OPERATIONS[type(args)]
    return policy.choose(op, _data_device(args), lambda: kernel_domain.outside_reason(args)), function


def _run_on_host(args: _Args, host_fallback: Callable[[], None]) -> None:
    """Run a call on host tensors: the host build when ``sim`` is chosen, else ``host_fallback()``."""
    backend, function = _choose(args)
    if backend == "sim":
        _clear_zero_filled(args)
        getattr(importlib.import_module("ascend_kv.backends.sim"), function)(args)  # may compile on first use
    else:
        host_fallback()


def _run_on_device(args: _Args) -> None:
    """Run a call on device tensors: host index tensors uploaded in one copy, then the kernels or the
    device fallback; neither reads an index value back."""
    args = upload.index_tensors_on_device(args, _data_device(args))  # type: ignore[type-var]
    backend, function = _choose(args)
    if backend == "npu":
        _clear_zero_filled(args)
    getattr(npu if backend == "npu" else on_device, function)(args)


def _clear_zero_filled(args: _Args) -> None:
    """Before the kernels run a ``zero_fill`` load: zero the rows it covers (the kernels then write the
    rows of valid blocks and skip the others, which stay zero)."""
    if isinstance(args, PagedLoadArgs) and args.zero_fill:
        on_device.clear_loaded_rows(args)


def reads_values(*index_tensors: torch.Tensor | None) -> bool:
    """Whether a call on the device checks its index values: all on the host, or full validation."""
    return checks.on_host(*index_tensors) or validation.full()


def _rows_on_device(args: PagedLoadArgs) -> int:
    """The rows of new outputs, read from device index tensors: the one synchronisation of the allocating form."""
    return int(on_device.output_rows(args.context_lens, args.cumsum).item())


# ----------------------------------------------------------------------------- implementations
# Each takes the operator's arguments as the schema gives them and forwards them to the checks,
# whose signatures are the schemas' (SCHEMAS above is the one list of the arguments).


def _kv_cache_cpu(*arguments: object) -> None:
    args = checks.kv_cache_args(*arguments)
    call = checks.kv_cache_call(args)
    _run_on_host(args, lambda: cpu_fallback.kv_cache(call))


def _kv_cache_device(*arguments: object) -> None:
    args = checks.kv_cache_args(*arguments)
    checks.require_base_formats({"new_kv": args.new_kv, "past": args.past})
    layer = args.layer_id if isinstance(args.layer_id, torch.Tensor) else None
    if reads_values(args.token_offset, args.seq_len, layer):
        checks.kv_cache_call(args)
    _run_on_device(args)


def _kv_cache_fake(*arguments: object) -> None:
    """Shapes only: the rules that need neither values nor memory."""
    checks.kv_cache_args(*arguments, shapes_only=True)


def _paged_load_cpu(*arguments: object, **options: Any) -> tuple[torch.Tensor, torch.Tensor]:
    args, call = checks.paged_cache_load(*arguments, **options)
    if call is None:  # zero_fill: the block table is the backends' to screen, as on the device
        _run_on_host(args, lambda: on_device.paged_cache_load(args))
    else:
        _run_on_host(args, lambda: cpu_fallback.paged_cache_load(call))
    return args.key, args.value


def _paged_load_device(*arguments: torch.Tensor, **options: Any) -> tuple[torch.Tensor, torch.Tensor]:
    tensors = {name: options.get(name) for name in ("key", "value")}
    nz = options.get("kv_cache_cfg", 0) == 0  # the schema's int: 0 is NZ, ATB's default
    checks.require_base_formats({"key_cache": arguments[0], "value_cache": arguments[1], **tensors},
                                nz_caches=("key_cache", "value_cache") if nz else ())
    index = (arguments[2], arguments[3], options.get("seq_starts"))
    args, _ = checks.paged_cache_load(*arguments, **options, read_values=reads_values(*index),  # type: ignore[arg-type]
                                      count_rows=_rows_on_device)
    _run_on_device(args)
    return args.key, args.value


def _paged_load_fake(*arguments: object, **options: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """New outputs ``[rows, *row]`` with ``rows`` unknown until run (``0 <= rows <= 2**31 - 1``)."""

    def unknown_rows(args: PagedLoadArgs) -> int:
        return torch.library.get_ctx().new_dynamic_size(min=0, max=checks.INT32_MAX)  # type: ignore[return-value]

    args, _ = checks.paged_cache_load(*arguments, **options, read_values=False, shapes_only=True,  # type: ignore[arg-type]
                                      count_rows=unknown_rows)
    return args.key, args.value


def _paged_load_into_fake(*arguments: object, **options: Any) -> None:
    """Shapes only: the rules that need neither values nor memory."""
    checks.paged_cache_load(*arguments, **options, read_values=False, shapes_only=True)  # type: ignore[arg-type]


def _reshape_and_cache_cpu(*arguments: object, **options: Any) -> None:
    args, slots = checks.reshape_and_cache(*arguments, **options)
    assert slots is not None  # host index values are always read
    _run_on_host(args, lambda: cpu_fallback.reshape_and_cache(args, slots))


def _reshape_and_cache_device(*arguments: torch.Tensor | None, **options: Any) -> None:
    key, value, key_cache, value_cache, slot_mapping = arguments
    checks.require_base_formats({"key": key, "value": value, "key_cache": key_cache, "value_cache": value_cache},
                                nz_caches=("key_cache", "value_cache") if options.get("kv_cache_cfg") == "nz" else ())
    args, _ = checks.reshape_and_cache(*arguments, **options, read_values=reads_values(slot_mapping))  # type: ignore[arg-type]
    _run_on_device(args)


def _reshape_and_cache_fake(*arguments: object, **options: Any) -> None:
    """Shapes only: the rules that need neither values nor memory."""
    checks.reshape_and_cache(*arguments, **options, read_values=False, shapes_only=True)  # type: ignore[arg-type]


def _into(impl: Callable[..., object]) -> Callable[..., None]:
    """The ``.into`` overload of a ``paged_cache_load`` implementation: the same, returning nothing."""

    @functools.wraps(impl)
    def into(*args: object, **kwargs: object) -> None:
        impl(*args, **kwargs)

    return into


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
                    raise checks.negated_view_error(f"{name}[{i}]" if tensors is value else name)

    return reject


# ----------------------------------------------------------------------------- registration

_Implementation = Callable[..., Any]
_IMPLEMENTATIONS: dict[str, tuple[_Implementation, _Implementation, _Implementation]] = {
    "kv_cache": (_kv_cache_cpu, _kv_cache_device, _kv_cache_fake),
    "kv_cache.layer_tensor": (_kv_cache_cpu, _kv_cache_device, _kv_cache_fake),
    "paged_cache_load": (_paged_load_cpu, _paged_load_device, _paged_load_fake),
    "paged_cache_load.into": (_into(_paged_load_cpu), _into(_paged_load_device), _paged_load_into_fake),
    "reshape_and_cache": (_reshape_and_cache_cpu, _reshape_and_cache_device, _reshape_and_cache_fake),
}

_Implementations = dict[str, tuple[_Implementation, _Implementation, _Implementation]]


def register(lib: torch.library.Library, schemas: dict[str, str], implementations: _Implementations) -> None:
    """Define each schema in ``lib`` with its ``(CPU, device, fake)`` implementations: autograd falls
    through, negated views are refused, every other device takes the device implementation, and a
    mutating operator gets its exact functionalization (:mod:`ascend_kv.operators.functionalization`)."""
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


register(_LIB, SCHEMAS, _IMPLEMENTATIONS)
