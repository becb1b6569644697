"""Shared test configuration: hypothesis profiles and the backends every shared test runs on."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, settings

import ascend_kv

# The `backend` fixture is a context held for the whole test, so sharing it between examples is meant.
_SUPPRESSED = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
settings.register_profile("ci", max_examples=40, deadline=None, suppress_health_check=_SUPPRESSED, print_blob=True)
settings.register_profile("thorough", max_examples=500, deadline=None, suppress_health_check=_SUPPRESSED)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

#: Every backend that runs on a machine without an NPU; the shared suite runs on each.
HOST_BACKENDS = ["fallback", "sim"]


@pytest.fixture(params=HOST_BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run the test body with each host backend chosen explicitly."""
    with ascend_kv.use_backend(request.param):
        yield request.param


@pytest.fixture
def fresh_compile() -> Iterator[None]:
    """torch.compile from scratch: Dynamo reset, no FX graph or autograd cache (each test compiles its own step)."""
    import torch

    torch._dynamo.reset()
    with torch._inductor.config.patch(fx_graph_cache=False), torch._functorch.config.patch(enable_autograd_cache=False):
        yield


@pytest.fixture(autouse=True)
def backend_environment_read_per_test() -> Iterator[None]:
    """``ASCEND_KV_BACKEND`` is read once per process; each test reads the environment it sets up."""
    ascend_kv.dispatch.policy.environment_backend.cache_clear()
    yield
    ascend_kv.dispatch.policy.environment_backend.cache_clear()


@pytest.fixture
def configure(monkeypatch: pytest.MonkeyPatch) -> Callable[[int, int], None]:
    """Set the simulated core count and UB size (the library reads them on every call)."""
    def set_config(cores: int, ub: int) -> None:
        monkeypatch.setenv("ASCEND_KV_SIM_CORES", str(cores))
        monkeypatch.setenv("ASCEND_KV_SIM_UB_BYTES", str(ub))
    return set_config
