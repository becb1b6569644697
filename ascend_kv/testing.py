"""Test helpers for code that calls torch_npu's cache ops: real numbers on a CPU instead of MagicMocks.

Two ways in, and a pytest fixture for each (this module is a pytest plugin: installed, it is
loaded by its ``pytest11`` entry point; else ``pytest -p ascend_kv.testing``):

- :func:`torch_npu_stand_in`: ``import torch_npu`` (and ``torch_npu.atb``) gives
  :mod:`ascend_kv.compat.torch_npu` inside the ``with`` block; fixture ``stand_in_torch_npu``.
- :func:`install_cache_ops`: put the cache ops on a module object the test suite already has,
  e.g. vllm-ascend's MagicMock ``torch_npu``; fixture ``install_torch_npu_cache_ops``.

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
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from .compat import torch_npu as facade

#: The functions :func:`install_cache_ops` sets on a module (besides ``atb.npu_paged_cache_load``).
CACHE_OPS = ("_npu_reshape_and_cache", "_npu_reshape_and_cache_siso", "npu_scatter_pa_kv_cache",
             "npu_gather_pa_kv_cache", "npu_format_cast", "get_npu_format")

#: The module names the stand-in takes over.
_MODULE_NAMES = ("torch_npu", "torch_npu.atb")

_Module = TypeVar("_Module")


@contextlib.contextmanager
def torch_npu_stand_in() -> Iterator[types.ModuleType]:
    """Within the block, ``import torch_npu`` and ``import torch_npu.atb`` give the facade.

    ``sys.modules`` is restored afterwards: a real (or mocked) ``torch_npu`` imported before is
    back, and one that was absent is absent again. Code that bound ``torch_npu`` at its own
    import keeps that binding: import it inside the block, or use :func:`install_cache_ops`.

    Yields
    ------
    module
        :mod:`ascend_kv.compat.torch_npu`.
    """
    saved = {name: sys.modules[name] for name in _MODULE_NAMES if name in sys.modules}
    sys.modules["torch_npu"] = facade
    sys.modules["torch_npu.atb"] = facade.atb
    try:
        yield facade
    finally:
        for name in _MODULE_NAMES:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


def install_cache_ops(module: _Module) -> _Module:
    """Set torch_npu's cache ops (:data:`CACHE_OPS` and ``atb.npu_paged_cache_load``) on ``module``.

    ``module`` is any object that takes attributes: a MagicMock standing for ``torch_npu``, a
    ``types.ModuleType``, the real torch_npu. Its other attributes stay as they are; a missing
    ``atb`` becomes a namespace holding the paged load.

    Returns
    -------
    object
        ``module`` itself.
    """
    for name in CACHE_OPS:
        setattr(module, name, getattr(facade, name))
    atb = getattr(module, "atb", None)
    if atb is None:
        atb = types.SimpleNamespace()
        setattr(module, "atb", atb)  # noqa: B010  (module is any object: typed as such, not as a torch_npu)
    atb.npu_paged_cache_load = facade.atb.npu_paged_cache_load
    return module


# ----------------------------------------------------------------------------- pytest fixtures

try:
    import pytest
except ImportError:  # the helpers above need no pytest; only the fixtures do
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.fixture
    def stand_in_torch_npu() -> Iterator[types.ModuleType]:
        """``import torch_npu`` gives :mod:`ascend_kv.compat.torch_npu` for the test (see :func:`torch_npu_stand_in`)."""
        with torch_npu_stand_in() as module:
            yield module

    @pytest.fixture
    def install_torch_npu_cache_ops() -> Iterator[Callable[[Any], Any]]:
        """:func:`install_cache_ops`, with every attribute it set put back after the test."""
        undo: list[tuple[Any, str, bool, Any]] = []  # (owner, attribute, present before, its value)

        def install(module: Any) -> Any:
            owners = [(module, name) for name in (*CACHE_OPS, "atb")]
            if getattr(module, "atb", None) is not None:
                owners.append((module.atb, "npu_paged_cache_load"))
            undo.extend((owner, name, hasattr(owner, name), getattr(owner, name, None)) for owner, name in owners)
            return install_cache_ops(module)

        yield install
        for owner, name, present, value in reversed(undo):
            if present:
                setattr(owner, name, value)
            else:
                delattr(owner, name)
