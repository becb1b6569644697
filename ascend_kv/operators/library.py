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

Each implementation checks its call in the two steps of :mod:`ascend_kv.rules.forms` (the
structure, remembered per call signature; the index values, where they are read), allocates
the outputs an allocating call needs, and runs it (:mod:`.run`).

The operators are not differentiable: the ``Autograd`` key falls through to the implementation,
which runs without recording gradients.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .. import cpu_fallback
from ..cpu_fallback import on_device
from ..rules import formats
from ..rules import kv_cache as kv_rules
from ..rules import paged_cache_load as load_rules
from ..rules import reshape_and_cache as write_rules
from ..rules.common import INT32_MAX
from ..rules.forms import PagedLoadArgs
from . import run
from .registration import NAMESPACE, Implementations, register

_KV_ARGS = "Tensor(a!) past, Tensor token_offset, Tensor seq_len"
_LOAD_INPUTS = "Tensor key_cache, Tensor value_cache, Tensor block_table, Tensor context_lens"
# The options are positional (with defaults): the dispatcher converts keyword arguments at a
# measured several microseconds per call (docs/benchmarks.md); callers may still name them.
_LOAD_OPTIONS = "int kv_cache_cfg=0, bool cumsum=False, Tensor? seq_starts=None, bool zero_fill=False"
SCHEMAS = {
    "kv_cache": f"kv_cache(Tensor new_kv, int layer_id, {_KV_ARGS}) -> ()",
    "kv_cache.layer_tensor": f"kv_cache.layer_tensor(Tensor new_kv, Tensor layer_id, {_KV_ARGS}) -> ()",
    "paged_cache_load": f"paged_cache_load({_LOAD_INPUTS}, {_LOAD_OPTIONS}) -> (Tensor, Tensor)",
    "paged_cache_load.into": f"paged_cache_load.into({_LOAD_INPUTS}, Tensor(a!) key, Tensor(b!) value, "
                             f"{_LOAD_OPTIONS}) -> ()",
    "reshape_and_cache": "reshape_and_cache(Tensor key, Tensor? value, Tensor(a!) key_cache, Tensor(b!)? value_cache, "
                         "Tensor slot_mapping, str kv_cache_cfg='nd') -> ()",
}

_LIB = torch.library.Library(NAMESPACE, "DEF")


# ----------------------------------------------------------------------------- kv_cache


def _kv_cache_cpu(*arguments: Any) -> None:
    plan = kv_rules.plan(kv_rules.args(*arguments))
    run.on_host(plan.args, lambda: cpu_fallback.kv_cache(plan))


def _kv_cache_device(new_kv: torch.Tensor, *arguments: Any) -> None:
    formats.require_base_formats({"new_kv": new_kv, "past": arguments[1]})
    args = kv_rules.args(new_kv, *arguments)
    if run.reads_values(args):
        kv_rules.plan(args)
    run.on_device(args)


def _kv_cache_fake(*arguments: Any) -> None:
    """Shapes only: the rules that need neither values nor memory."""
    kv_rules.args(*arguments, shapes_only=True)


# ----------------------------------------------------------------------------- paged_cache_load


def allocate_outputs(args: PagedLoadArgs, rows: Any) -> None:
    """Give ``args`` the outputs it lacks, zero-filled, ``[rows, *row]`` on the caches' device (after
    every rule has passed); ``rows`` may be symbolic (fake tensors)."""
    for name, cache, row in (("key", args.key_cache, args.geometry.key_row),
                             ("value", args.value_cache, args.geometry.value_row)):
        if getattr(args, name) is not None:
            continue
        shape = (rows, *row)
        try:
            setattr(args, name, torch.zeros(shape, dtype=cache.dtype, device=cache.device))
        except (RuntimeError, MemoryError) as error:  # the allocator's refusal, on any device
            raise ValueError(
                f"{name}: the output {list(shape)} that context_lens asks for "
                f"({math.prod(shape) * cache.dtype.itemsize} bytes) cannot be allocated: {error}"
            ) from error


def _zero_loaded_rows(args: run.Args) -> None:
    """Before the kernels run a ``zero_fill`` load: zero the rows it covers (the kernels then write the
    rows of valid blocks and skip the others, which stay zero)."""
    assert isinstance(args, PagedLoadArgs)
    if args.zero_fill:
        on_device.clear_loaded_rows(args)


def _paged_load_cpu(*arguments: Any, key: torch.Tensor | None = None,
                    value: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    plan = load_rules.plan(args := load_rules.args(*arguments, key=key, value=value))
    if key is None:  # the allocating form (the rules let both outputs be given, or neither)
        allocate_outputs(args, plan.end_row)
    if args.zero_fill:  # the block table is the backends' to screen, as on the device
        run.on_host(args, lambda: on_device.paged_cache_load(args), _zero_loaded_rows)
    else:
        run.on_host(args, lambda: cpu_fallback.paged_cache_load(plan), _zero_loaded_rows)
    return args.key, args.value  # type: ignore[return-value]


def _paged_load_device(key_cache: torch.Tensor, value_cache: torch.Tensor, block_table: torch.Tensor,
                       context_lens: torch.Tensor, kv_cache_cfg: int = 0, *options: Any, key: torch.Tensor | None = None,
                       value: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    nz = kv_cache_cfg == 0  # the schema's int: 0 is NZ, ATB's default
    formats.require_base_formats({"key_cache": key_cache, "value_cache": value_cache, "key": key, "value": value},
                                 nz_caches=("key_cache", "value_cache") if nz else ())
    args = load_rules.args(key_cache, value_cache, block_table, context_lens, kv_cache_cfg, *options, key=key,
                           value=value)
    if run.reads_values(args):
        allocate_outputs(args, load_rules.plan(args).end_row)
    elif args.key is None:  # the one synchronisation of the allocating form: its row count
        allocate_outputs(args, int(on_device.output_rows(args.context_lens, args.cumsum).item()))
    run.on_device(args, _zero_loaded_rows)
    return args.key, args.value  # type: ignore[return-value]


def _paged_load_fake(*arguments: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """New outputs ``[rows, *row]`` with ``rows`` unknown until run (``0 <= rows <= 2**31 - 1``)."""
    args = load_rules.args(*arguments, shapes_only=True)
    allocate_outputs(args, torch.library.get_ctx().new_dynamic_size(min=0, max=INT32_MAX))
    return args.key, args.value  # type: ignore[return-value]


def _paged_load_into_fake(*arguments: Any) -> None:
    """Shapes only: the rules that need neither values nor memory."""
    _into(load_rules.args)(*arguments, shapes_only=True)


def _into(impl: Any) -> Any:
    """The ``.into`` overload of a ``paged_cache_load`` implementation: the outputs follow the four
    inputs in its schema; the same call, returning nothing."""

    def into(key_cache: torch.Tensor, value_cache: torch.Tensor, block_table: torch.Tensor,
             context_lens: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *options: Any,
             **flags: Any) -> None:
        impl(key_cache, value_cache, block_table, context_lens, *options, key=key, value=value, **flags)

    into.__name__ = impl.__name__ + "_into"
    return into


# ----------------------------------------------------------------------------- reshape_and_cache


def _reshape_and_cache_cpu(*arguments: Any) -> None:
    plan = write_rules.plan(write_rules.args(*arguments))
    run.on_host(plan.args, lambda: cpu_fallback.reshape_and_cache(plan))


def _reshape_and_cache_device(key: torch.Tensor, value: torch.Tensor | None, key_cache: torch.Tensor,
                              value_cache: torch.Tensor | None, slot_mapping: torch.Tensor,
                              kv_cache_cfg: str = "nd") -> None:
    formats.require_base_formats({"key": key, "value": value, "key_cache": key_cache, "value_cache": value_cache},
                                 nz_caches=("key_cache", "value_cache") if kv_cache_cfg == "nz" else ())
    args = write_rules.args(key, value, key_cache, value_cache, slot_mapping, kv_cache_cfg)
    if run.reads_values(args):
        write_rules.plan(args)
    run.on_device(args)


def _reshape_and_cache_fake(*arguments: Any) -> None:
    """Shapes only: the rules that need neither values nor memory."""
    write_rules.args(*arguments, shapes_only=True)


# ----------------------------------------------------------------------------- registration

_IMPLEMENTATIONS: Implementations = {
    "kv_cache": (_kv_cache_cpu, _kv_cache_device, _kv_cache_fake),
    "kv_cache.layer_tensor": (_kv_cache_cpu, _kv_cache_device, _kv_cache_fake),
    "paged_cache_load": (_paged_load_cpu, _paged_load_device, _paged_load_fake),
    "paged_cache_load.into": (_into(_paged_load_cpu), _into(_paged_load_device), _paged_load_into_fake),
    "reshape_and_cache": (_reshape_and_cache_cpu, _reshape_and_cache_device, _reshape_and_cache_fake),
}

register(_LIB, SCHEMAS, _IMPLEMENTATIONS)
