"""Test helpers for code that calls torch_npu's cache ops: real numbers on a CPU instead of MagicMocks.

Two ways in, and a pytest fixture for each (this module is a pytest plugin: installed, it is
loaded by its ``pytest11`` entry point; else ``pytest -p ascend_kv.testing``):

- :func:`install_cache_ops`: put the cache ops on the ``torch_npu`` stub a test suite already
  has (vllm-ascend's ``tests/ut/conftest.py`` makes one), keeping its MagicMocks' call
  recording; fixture ``install_torch_npu_cache_ops``.
- :func:`torch_npu_stand_in`: ``import torch_npu`` gives a module with the cache ops over a base
  (a MagicMock by default) that answers every other name, so serving code imports unchanged;
  fixture ``stand_in_torch_npu``.

docs/porting_from_torch_npu.md has a conftest for each, tested as written.

Examples
--------
A vllm-ascend-style unit test, its ``torch_npu`` a MagicMock, now checking the cache's contents:

>>> from unittest.mock import MagicMock
>>> torch_npu = ascend_kv.testing.install_cache_ops(MagicMock())
>>> key_cache = torch.zeros(2, 128, 1, 16)
>>> value_cache = torch.zeros(2, 128, 1, 16)
>>> key = torch.randn(1, 1, 16)
>>> torch_npu._npu_reshape_and_cache(key=key, value=key, key_cache=key_cache, value_cache=value_cache,
...                                  slot_indices=torch.tensor([130], dtype=torch.int32))
>>> bool((key_cache[1, 2] == key[0]).all())
True
>>> torch_npu._npu_reshape_and_cache.assert_called_once()
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar
from unittest import mock

import torch

from .compat import torch_npu as facade

#: The functions :func:`install_cache_ops` sets on a module (besides ``atb.npu_paged_cache_load``).
CACHE_OPS = ("_npu_reshape_and_cache", "_npu_reshape_and_cache_siso", "npu_scatter_pa_kv_cache",
             "npu_gather_pa_kv_cache", "npu_format_cast", "get_npu_format", "empty_with_format", "npu_dynamic_quant",
             "npu_scatter_nd_update_", "npu_scatter_nd_update")

_Module = TypeVar("_Module")


def npu_format_cast(tensor: Any, acl_format: int, customize_dtype: torch.dtype | None = None) -> Any:
    """:func:`ascend_kv.compat.torch_npu.npu_format_cast`, passing through what is not a tensor.

    A stub's ``npu_format_cast`` returns its argument (vllm-ascend's: ``lambda weight, fmt:
    weight``), and tests hand it MagicMock weights; those come back as given. A tensor is cast
    (tagged) and checked as the facade does.

    Parameters
    ----------
    tensor : torch.Tensor or object
        A tensor, or anything else (returned unchanged).
    acl_format : int
        2 (ND) or 29 (FRACTAL_NZ).
    customize_dtype : None
        As the facade's (not implemented for tensors).

    Returns
    -------
    torch.Tensor or object
        The cast tensor, or ``tensor`` itself.
    """
    if not isinstance(tensor, torch.Tensor):
        return tensor
    return facade.npu_format_cast(tensor, acl_format, customize_dtype)


#: What :func:`install_cache_ops` installs, by name.
_OPS: dict[str, Callable[..., Any]] = {name: getattr(facade, name) for name in CACHE_OPS}
_OPS["npu_format_cast"] = npu_format_cast


def _put(owner: Any, name: str, op: Callable[..., Any], keep_mocks: bool) -> None:
    """Make ``owner.name`` run ``op``: a mock there runs it as its side effect (still recording calls), else ``op``."""
    current = getattr(owner, name, None)
    if keep_mocks and isinstance(current, mock.Mock):
        current.side_effect = op
    else:
        setattr(owner, name, op)


def install_cache_ops(module: _Module, *, keep_mocks: bool = True) -> _Module:
    """Put torch_npu's cache ops (:data:`CACHE_OPS` and ``atb.npu_paged_cache_load``) on ``module``.

    ``module`` is any object that takes attributes: the stub a conftest put in
    ``sys.modules["torch_npu"]`` (a ``types.ModuleType`` of MagicMocks, or a MagicMock), a plain
    module, the real torch_npu. Its other attributes stay as they are; a missing ``atb`` becomes
    a module holding the paged load. ``npu_format_cast`` passes through what is not a tensor
    (:func:`npu_format_cast`). A module without a ``__file__`` (a stub, not an installed
    torch_npu) is marked as a stand-in, so ``ascend_kv.explain()`` and ``ascend-kv info`` see no
    NPU library behind it; install before the first ascend_kv call, which caches that probe.

    Parameters
    ----------
    module : object
        The ``torch_npu`` to complete.
    keep_mocks : bool, optional
        Where ``module`` has a mock under an op's name (always, when ``module`` is a MagicMock),
        keep that mock and make the op its ``side_effect``: the real op runs, and the mock
        still records the call (``.assert_called_once()``, ``.call_args``), for code that
        bound it at import too. False: set the plain functions.

    Returns
    -------
    object
        ``module`` itself.
    """
    for name, op in _OPS.items():
        _put(module, name, op, keep_mocks)
    atb = getattr(module, "atb", None)
    if atb is None:
        atb = types.ModuleType("torch_npu.atb", "torch_npu.atb's npu_paged_cache_load, run by ascend_kv.")
        setattr(module, "atb", atb)  # noqa: B010  (module is any object: typed as such, not as a torch_npu)
    _put(atb, "npu_paged_cache_load", facade.atb.npu_paged_cache_load, keep_mocks)
    if not isinstance(getattr(module, "__file__", None), str):
        setattr(module, "STAND_IN", True)  # noqa: B010
    return module


# ----------------------------------------------------------------------------- the stand-in


def _forwarding_module(name: str, target: Any) -> types.ModuleType:
    """A package named ``name`` whose missing attributes are ``target``'s (PEP 562 ``__getattr__``)."""
    module = types.ModuleType(name, f"ascend_kv's stand-in for {name}: names it lacks come from {target!r}.")
    module.__path__ = []  # a package, so `import name.<sub>` reaches the finder below
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)

    def forward(attribute: str) -> Any:
        return getattr(target, attribute)

    module.__getattr__ = forward  # type: ignore[method-assign]
    return module


class _Submodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``torch_npu.<a>.<b>`` inside the stand-in as the attribute ``b`` of ``torch_npu.<a>``
    (from the base), wrapped in a module that forwards to it, so the base itself is never changed."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        parent, _, name = fullname.rpartition(".")
        if not fullname.startswith("torch_npu.") or not hasattr(sys.modules.get(parent), name):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        parent, _, name = spec.name.rpartition(".")
        return _forwarding_module(spec.name, getattr(sys.modules[parent], name))

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: the module forwards to an existing object."""


def _no_npu() -> mock.MagicMock:
    """A MagicMock ``torch_npu`` whose ``npu`` says there is no NPU (the default base)."""
    base = mock.MagicMock(name="torch_npu")
    base.npu.is_available.return_value = False
    base.npu.device_count.return_value = 0
    return base


def _torch_npu_names() -> list[str]:
    return [name for name in sys.modules if name == "torch_npu" or name.startswith("torch_npu.")]


@contextlib.contextmanager
def torch_npu_stand_in(base: Any = None) -> Iterator[types.ModuleType]:
    """Within the block, ``import torch_npu`` gives the cache ops over ``base``.

    The module yielded has the facade's cache ops, format helpers and ``atb.npu_paged_cache_load``
    (``npu_format_cast`` passing through what is not a tensor); every other name, and every
    submodule (``torch_npu._C``, ``torch_npu.profiler``, ...), comes from ``base``. So serving
    code imports unchanged: ``from torch_npu import npu_fusion_attention`` gives the base's.
    ``torch.npu`` is the stand-in's ``npu`` where torch has none (as vllm-ascend's conftest
    sets it). The stand-in is marked as such: ascend_kv sees no NPU library behind it.

    ``sys.modules`` and ``torch.npu`` are restored afterwards: a real or mocked ``torch_npu``
    (and its submodules) imported before is back, one that was absent is absent again. Code that
    bound ``torch_npu`` at its own import keeps that binding: import it inside the block, or use
    :func:`install_cache_ops` on the module it bound.

    Parameters
    ----------
    base : object, optional
        What answers the names the stand-in does not implement: a module (e.g. a suite's own
        stub) or a MagicMock. By default a MagicMock whose ``npu.is_available()`` is False.

    Yields
    ------
    module
        The stand-in ``torch_npu``.
    """
    base = _no_npu() if base is None else base
    module = _forwarding_module("torch_npu", base)
    module.atb = _forwarding_module("torch_npu.atb", getattr(base, "atb", None))  # type: ignore[attr-defined]
    npu = getattr(base, "npu", None)
    module.npu = _no_npu().npu if npu is None else npu  # type: ignore[attr-defined]
    install_cache_ops(module, keep_mocks=False)
    saved = {name: sys.modules.pop(name) for name in _torch_npu_names()}
    sys.modules["torch_npu"], sys.modules["torch_npu.atb"] = module, module.atb  # type: ignore[attr-defined]
    finder = _Submodules()
    sys.meta_path.insert(0, finder)
    provides_npu = not hasattr(torch, "npu")
    if provides_npu:
        torch.npu = module.npu  # type: ignore[attr-defined]
    try:
        yield module
    finally:
        if provides_npu:
            delattr(torch, "npu")
        sys.meta_path.remove(finder)
        for name in _torch_npu_names():
            del sys.modules[name]
        sys.modules.update(saved)


# ----------------------------------------------------------------------------- pytest fixtures


def _restorer(module: Any) -> Callable[[], None]:
    """A function putting back every attribute :func:`install_cache_ops` may set on ``module`` (and mocks' side effects)."""
    owners = [(module, name) for name in (*CACHE_OPS, "atb", "STAND_IN")]
    if getattr(module, "atb", None) is not None:
        owners.append((module.atb, "npu_paged_cache_load"))
    state = []  # (owner, attribute, present before, its value, the value's side effect if a mock)
    for owner, name in owners:
        value = getattr(owner, name, None)
        state.append((owner, name, hasattr(owner, name), value,
                      value.side_effect if isinstance(value, mock.Mock) else None))

    def restore() -> None:
        for owner, name, present, value, side_effect in reversed(state):
            if isinstance(value, mock.Mock):
                value.side_effect = side_effect
            if present:
                setattr(owner, name, value)
            elif hasattr(owner, name):
                delattr(owner, name)

    return restore


try:
    import pytest
except ImportError:  # the helpers above need no pytest; only the fixtures do
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.fixture
    def stand_in_torch_npu() -> Iterator[types.ModuleType]:
        """``import torch_npu`` gives the stand-in for the test (see :func:`torch_npu_stand_in`)."""
        with torch_npu_stand_in() as module:
            yield module

    @pytest.fixture
    def install_torch_npu_cache_ops() -> Iterator[Callable[..., Any]]:
        """:func:`install_cache_ops`, with every attribute it set (and every mock's side effect) put back after the test."""
        undo: list[Callable[[], None]] = []

        def install(module: Any, *, keep_mocks: bool = True) -> Any:
            undo.append(_restorer(module))
            return install_cache_ops(module, keep_mocks=keep_mocks)

        yield install
        for restore in reversed(undo):
            restore()
