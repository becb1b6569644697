"""The fake NPU's route for tests of the state-cache operations: the kernels' host build as the NPU
kernel library, an A2 part (kernels only) and a 310P part (device fallback only), and a run that
counts transfers, launches and fallback warnings. Import the fixtures by name into a test module.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import fake_npu
import pytest
import torch

import ascend_kv
from ascend_kv.backends import npu, sim
from ascend_kv.dispatch import policy

SUPPORTED, UNSUPPORTED = "Ascend910B3", "Ascend310P3"
fake_npu.install()
NPU = torch.device("npu", 0)
#: Positions in torch.ops.ascend_kv._runs(): where the operators' calls ran.
HOST_PATHS, SIM, KERNELS, DEVICE_FALLBACK = 0, 1, 2, 3


@pytest.fixture(scope="module")
def kernel_library() -> Iterator[None]:
    """The kernels' host build as the NPU kernel library (loaded, so its launch count can be read)."""
    sim.load()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(npu.LIBRARY_ENV, str(sim.library_path()))
        npu.library.cache_clear()
        yield
    npu.library.cache_clear()


@pytest.fixture(params=[SUPPORTED, UNSUPPORTED])
def soc(request: pytest.FixtureRequest, kernel_library: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An A2 part, where only the kernels may run, and a 310P part, where only the device fallback may."""
    monkeypatch.setenv("ASCEND_KV_SOC", request.param)
    policy.forget()
    barred = DEVICE_FALLBACK if request.param == SUPPORTED else KERNELS
    before = torch.ops.ascend_kv._runs()[barred]
    yield str(request.param)
    assert torch.ops.ascend_kv._runs()[barred] == before, f"{'device fallback' if barred == DEVICE_FALLBACK else 'kernels'} ran"
    policy.forget()


@dataclass
class Seen:
    """What one call did: device-to-host transfers, uploads (blocking ones), kernel launches, fallback warnings."""

    transfers: int
    uploads: int
    blocking_uploads: int
    launches: int
    warnings: int


def launches() -> int:
    """Kernel launches of the host build (the kernel library here)."""
    return int(torch.ops.ascend_kv_host.launches())


def run(call: Callable[[], Any]) -> Seen:
    before = launches()
    with warnings.catch_warnings(record=True) as caught, fake_npu.counting() as counts:
        warnings.simplefilter("always")
        call()
    fallbacks = [w for w in caught if issubclass(w.category, ascend_kv.FallbackWarning)]
    return Seen(counts.transfers, counts.uploads, counts.blocking_uploads, launches() - before, len(fallbacks))
