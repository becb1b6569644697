"""How ``torch.compile`` turns the in-place operators into a functional graph, exactly.

``torch.compile`` functionalizes a mutating operator with ``auto_functionalized_v2``: the
written tensors become outputs, and each written view is regenerated from its base by its
size, stride and storage offset. Inductor (PyTorch 2.13) loses a *symbolic* storage offset in
that regeneration: under dynamic shapes a write into ``out[1]`` or ``kv[1]`` lands in ``out[0]``
or ``kv[0]`` (docs/compiling.md; ``tests/test_compile_views.py`` has a repro with a plain
``torch.library`` op). So a call that writes a tensor with a symbolic storage offset takes
another route: a functional twin of the operator returns written copies of those tensors, which
are copied back (``view.copy_(written)``), a route functionalization handles exactly, at the
cost of the copies. Every other call keeps ``auto_functionalized_v2``, which inductor runs in
place, with no copy.

Eager calls never come here: the rule runs only under ``FunctionalTensorMode`` (AOTAutograd).
"""

from __future__ import annotations

import re
from typing import Any

import torch
from torch._higher_order_ops.auto_functionalize import do_auto_functionalize_v2
from torch._subclasses.functional_tensor import FunctionalTensorMode

_OpOverload = torch._ops.OpOverload
#: The functional twin of each operator that has one (``twin(*args) -> [written copies]``).
_TWINS: dict[_OpOverload, _OpOverload] = {}


def _written(op: _OpOverload) -> list[tuple[int, str]]:
    """``(position, name)`` of the arguments ``op`` writes (``Tensor(a!)`` in its schema)."""
    return [(i, a.name) for i, a in enumerate(op._schema.arguments) if a.alias_info is not None and a.alias_info.is_write]


def _arguments(op: _OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    """Every argument of a call of ``op``, in schema order (defaults filled in)."""
    schema = op._schema.arguments
    return [args[i] if i < len(args) else kwargs.get(a.name, a.default_value) for i, a in enumerate(schema)]


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors of an argument: itself, the tensors of a list, or none (None)."""
    if isinstance(value, torch.Tensor):
        return [value]
    return [t for t in value if isinstance(t, torch.Tensor)] if isinstance(value, (list, tuple)) else []


def _written_tensors(op: _OpOverload, arguments: list[Any]) -> list[torch.Tensor]:
    """Every tensor ``op`` writes, in schema order (lists flattened)."""
    return [t for i, _ in _written(op) for t in _tensors(arguments[i])]


def _call_on_copies(op: _OpOverload, arguments: list[Any]) -> list[torch.Tensor]:
    """Run ``op`` with fresh copies of the tensors it writes; return the written copies, in the order
    of :func:`_written_tensors`."""
    arguments = list(arguments)
    copies = []
    for i, _ in _written(op):
        value = arguments[i]
        if isinstance(value, (list, tuple)):
            arguments[i] = [t.clone() if isinstance(t, torch.Tensor) else t for t in value]
        elif isinstance(value, torch.Tensor):
            arguments[i] = value.clone()
        copies += _tensors(arguments[i])
    positional = [a for a, spec in zip(arguments, op._schema.arguments) if not spec.kwarg_only]
    keywords = {spec.name: a for a, spec in zip(arguments, op._schema.arguments) if spec.kwarg_only}
    op(*positional, **keywords)
    return copies


def _has_symbolic_offset(tensor: object) -> bool:
    return isinstance(tensor, torch.Tensor) and isinstance(tensor.storage_offset(), torch.SymInt)


def _functionalize(mode: FunctionalTensorMode, op: _OpOverload, types: Any, args: tuple[Any, ...],
                   kwargs: dict[str, Any]) -> None:
    """The ``FunctionalTensorMode`` rule of a mutating ``ascend_kv`` operator (see the module's text)."""
    arguments = _arguments(op, args, kwargs)
    written = _written_tensors(op, arguments)
    if not any(_has_symbolic_offset(t) for t in written):
        return do_auto_functionalize_v2(mode, op, args, kwargs)  # type: ignore[no-any-return]
    with mode:
        for tensor, result in zip(written, _TWINS[op](*arguments)):
            tensor.copy_(result)
    return None


def register(op: _OpOverload, lib: torch.library.Library) -> None:
    """Give ``op``, if it writes any argument, a functional twin ``functional_<name>`` in ``lib`` and
    the rule above."""
    if not _written(op):
        return
    name = op._schema.name.split("::")[1]
    overload = f".{op._overloadname}" if op._overloadname != "default" else ""
    declared = str(op._schema)
    declared = re.sub(r"\([a-z]+!\)", "", declared[declared.index("(") + 1:declared.rindex(") ->")])
    inputs = ", ".join(a.split("=")[0] for a in declared.split(", ") if a != "*")  # all positional, nothing written
    lib.define(f"functional_{name}{overload}({inputs}) -> Tensor[]")
    twin = getattr(getattr(torch.ops, lib.ns), f"functional_{name}").__getattr__(op._overloadname)

    def run(*arguments: Any) -> list[torch.Tensor]:
        return _call_on_copies(op, list(arguments))

    lib.impl(f"functional_{name}{overload}", run, "CompositeExplicitAutograd")
    torch.library.register_fake(twin.__qualname__, run, lib=lib)
    _TWINS[op] = twin
    torch.library.register_torch_dispatch(op.__qualname__, FunctionalTensorMode, _functionalize, lib=lib)
