"""How ``torch.compile`` turns the in-place operators into a functional graph, exactly.

``torch.compile`` functionalizes a mutating operator with ``auto_functionalized_v2``: the
written tensors become outputs, and each written view is regenerated from its base by its
size, stride and storage offset. Inductor places that regenerated view wrongly in two cases
(docs/compiling.md; ``tests/test_compile_views.py`` has repros with a plain ``torch.library``
op): a *symbolic* storage offset is lost (every version here: under dynamic shapes a write into
``out[1]`` or ``kv[1]`` lands in ``out[0]`` or ``kv[0]``), and before PyTorch 2.13 the non-zero
offset of a graph input that is a view (``kv[1]`` made outside the compiled function) is taken
from the view's own data pointer instead of its storage's, so the write lands past it (a view
made inside the compiled function is placed right). So a call that writes such a tensor takes
another route: the operator's functional twin
(``functional_<name>``, defined with it in C++) returns written copies of those tensors, which
are copied back (``view.copy_(written)``), a route functionalization handles exactly, at the cost
of the copies. Every other call keeps ``auto_functionalized_v2``, which inductor runs in place,
with no copy.

Eager calls never come here: the rule runs only under ``FunctionalTensorMode`` (AOTAutograd),
and this module is imported, and :func:`install` run, the first time a call is traced (the
operators' shapes-only implementations say so), not by ``import ascend_kv``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._subclasses.functional_tensor import FunctionalTensorMode

_OpOverload = torch._ops.OpOverload
_installed = False
#: Inductor before 2.13 misplaces a view at a non-zero offset regenerated from a graph input
#: (PyTorch's fix: "Fix as_strided offsets for graph input views", in 2.13).
_NONZERO_OFFSETS_MISPLACED = tuple(int(part) for part in torch.__version__.split(".")[:2]) < (2, 13)


def _written(op: _OpOverload) -> list[int]:
    """The positions of the arguments ``op`` writes (``Tensor(a!)`` in its schema)."""
    return [i for i, a in enumerate(op._schema.arguments) if a.alias_info is not None and a.alias_info.is_write]


def _arguments(op: _OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    """Every argument of a call of ``op``, in schema order (defaults filled in)."""
    schema = op._schema.arguments
    return [args[i] if i < len(args) else kwargs.get(a.name, a.default_value) for i, a in enumerate(schema)]


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors of an argument: itself, the tensors of a list, or none (None)."""
    if isinstance(value, torch.Tensor):
        return [value]
    return [t for t in value if isinstance(t, torch.Tensor)] if isinstance(value, (list, tuple)) else []


def _misplaced(tensor: torch.Tensor) -> bool:
    """Whether inductor would place ``tensor``, regenerated from its base, wrongly (see the module's text):
    a symbolic offset, or before 2.13 a graph input's non-zero one (a graph input is no view here)."""
    offset = tensor.storage_offset()
    return isinstance(offset, torch.SymInt) or (_NONZERO_OFFSETS_MISPLACED and offset != 0 and not tensor._is_view())


def _twin(op: _OpOverload) -> _OpOverload:
    """``functional_<name>`` of ``op``: its arguments, returning written copies of the tensors it writes."""
    packet = getattr(torch.ops.ascend_kv, f"functional_{op._schema.name.split('::')[1]}")
    twin: _OpOverload = getattr(packet, op._overloadname)
    return twin


def _functionalize(mode: FunctionalTensorMode, op: _OpOverload, types: Any, args: tuple[Any, ...],
                   kwargs: dict[str, Any]) -> None:
    """The ``FunctionalTensorMode`` rule of a writing ``ascend_kv`` operator (see the module's text)."""
    arguments = _arguments(op, args, kwargs)
    written = [t for i in _written(op) for t in _tensors(arguments[i])]
    if not any(_misplaced(t) for t in written):
        from torch._higher_order_ops.auto_functionalize import do_auto_functionalize_v2

        return do_auto_functionalize_v2(mode, op, args, kwargs)  # type: ignore[no-any-return]
    with mode:
        for tensor, result in zip(written, _twin(op)(*arguments)):
            _bits(tensor).copy_(_bits(result))  # as bits: a compiled copy of floats may change NaN payloads
    return None


_SAME_WIDTH_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` viewed as integers of its element width (the same memory)."""
    return tensor.view(_SAME_WIDTH_INT[tensor.element_size()])


def install() -> None:
    """Register the rule for every writing operator of ``torch.ops.ascend_kv`` (once)."""
    global _installed
    if _installed:
        return
    for qualified in torch._C._dispatch_get_all_op_names():  # every operator, looked up or not
        namespace, _, name = qualified.partition("::")
        if namespace != "ascend_kv" or name.startswith(("_", "functional_")):
            continue
        packet, _, overload = name.partition(".")
        op = getattr(getattr(torch.ops.ascend_kv, packet), overload or "default")
        if _written(op):
            torch.library.register_torch_dispatch(op, FunctionalTensorMode, _functionalize)
    _installed = True
