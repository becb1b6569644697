"""vllm-ascend's ``tests/ut/conftest.py`` in shape, plus the one line that adopts ascend_kv.

Their conftest makes ``torch_npu`` a ``types.ModuleType`` of MagicMocks (``npu``, ``profiler``,
``npu_fusion_attention``, a pass-through ``npu_format_cast``, ``_C``, ``_npu_reshape_and_cache``,
...) and sets ``torch.npu`` to a MagicMock; their cache tests can then only assert calls. Here
``ascend_kv.testing.install_cache_ops(sys.modules["torch_npu"])`` puts the cache ops on that same
stub, so the tests check what the caches hold, and the stub's MagicMocks still record calls.

vllm-ascend builds the stub when its conftest is imported; here a module-scoped fixture builds it
and takes it down afterwards (``sys.modules``, ``torch.npu``), so the rest of ascend_kv's suite
runs without a ``torch_npu``.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Iterator
from unittest.mock import MagicMock, patch

import pytest
import torch

import ascend_kv.testing


def make_torch_npu_stub() -> types.ModuleType:
    """A ``torch_npu`` shaped as vllm-ascend's conftest makes it (the attributes its UTs rely on)."""
    torch_npu = types.ModuleType("torch_npu")
    torch_npu.__spec__ = importlib.util.spec_from_loader("torch_npu", loader=None)
    torch_npu.__path__ = []
    torch_npu.npu = MagicMock()  # type: ignore[attr-defined]
    torch_npu.profiler = MagicMock()  # type: ignore[attr-defined]
    torch_npu.npu_fusion_attention = MagicMock()  # type: ignore[attr-defined]
    torch_npu.npu_format_cast = MagicMock(side_effect=lambda weight, fmt: weight)  # type: ignore[attr-defined]
    torch_npu._C = MagicMock()  # type: ignore[attr-defined]
    torch_npu.npu.current_device = MagicMock(return_value=0)  # type: ignore[attr-defined]
    torch_npu._npu_flash_attention = MagicMock()  # type: ignore[attr-defined]
    torch_npu._npu_reshape_and_cache = MagicMock()  # type: ignore[attr-defined]
    torch_npu.npu_rms_norm = MagicMock()  # type: ignore[attr-defined]
    return torch_npu


@pytest.fixture(scope="module", autouse=True)
def torch_npu_stub() -> Iterator[types.ModuleType]:
    """The stub in ``sys.modules["torch_npu"]`` for the module's tests, with ascend_kv's cache ops installed."""
    saved = {name: sys.modules.pop(name) for name in list(sys.modules)
             if name in ("torch_npu", "torch_npu._C", "tiny_engine")}
    stub = make_torch_npu_stub()
    sys.modules["torch_npu"] = stub
    sys.modules["torch_npu._C"] = stub._C  # type: ignore[attr-defined]
    ascend_kv.testing.install_cache_ops(sys.modules["torch_npu"])  # the line a project adds to its conftest
    npu = MagicMock()
    npu.is_available = MagicMock(return_value=False)
    with patch.object(torch, "npu", npu, create=True):
        yield stub
    for name in ("torch_npu", "torch_npu._C", "tiny_engine"):
        sys.modules.pop(name, None)
    sys.modules.update(saved)


@pytest.fixture(autouse=True)
def fresh_call_records(torch_npu_stub: types.ModuleType) -> None:
    """Each test counts its own calls on the module's stub (its MagicMocks outlive a test)."""
    for name in ("_npu_reshape_and_cache", "npu_format_cast"):
        getattr(torch_npu_stub, name).reset_mock()
