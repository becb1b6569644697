"""The dispatch policy (docs/hardware.md#dispatch), decision by decision.

Every combination of: requested backend (auto, npu, sim, fallback) x the tensors' device (cpu,
or an NPU faked by monkeypatching device detection) x SoC product line (supported A2/A3,
unsupported 310P, unknown) x kernel library loaded or not x inputs inside the kernels' domain
(token rows contiguous) or not x operation. The expected outcome comes from a small table written here,
independently of ascend_kv.dispatch.policy.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import ascend_kv
from ascend_kv.backends import kernel_domain, npu
from ascend_kv.dispatch import device as runtime
from ascend_kv.dispatch import policy
from ascend_kv.operators.run import decision as decide_call
from ascend_kv.rules import kv_cache as kv_rules
from ascend_kv.rules import paged_cache_load as load_rules

ERROR = "error"
SOCS = {"Ascend910B3": True, "Ascend910_9382": True, "Ascend310P3": False, "Ascend999X": None}  # supported?
LINES = {"Ascend910B3": "atlas-a2", "Ascend910_9382": "atlas-a3", "Ascend310P3": "atlas-inference", "Ascend999X": None}


def rows_apart(t: torch.Tensor) -> torch.Tensor:
    """``t`` with its last dimension strided in memory: token rows no longer contiguous."""
    return t.transpose(-1, -2).contiguous().transpose(-1, -2)


def kv_call(contiguous: bool) -> ascend_kv.rules.forms.KvCacheArgs:
    past = torch.zeros(2, 2, 8, 32, dtype=torch.float16)
    new_kv = torch.ones(3, 32, dtype=torch.float16)
    return kv_rules.args(new_kv, 1, past if contiguous else rows_apart(past), torch.tensor([4, 2]),
                                torch.tensor([1, 2]))


def paged_call(contiguous: bool) -> ascend_kv.rules.forms.PagedLoadArgs:
    cache = torch.zeros(4, 16, 2, 16, dtype=torch.float16)
    key, value = torch.zeros(20, 2, 16, dtype=torch.float16), torch.zeros(20, 2, 16, dtype=torch.float16)
    return load_rules.args(
        cache, cache, torch.tensor([[2, 0], [1, -1]]), torch.tensor([17, 3]), kv_cache_cfg="nd",
        key=key if contiguous else rows_apart(key), value=value,
    )


def select(args: ascend_kv.rules.forms.KvCacheArgs | ascend_kv.rules.forms.PagedLoadArgs) -> str:
    """The backend the operator's implementation would run for ``args``."""
    decision = decide_call(args)
    device = torch.device(decision.device)
    return policy.choose(decision.op, device, kernel_domain.outside_reason(args))


CALLS = {"KVCacheOperation": kv_call, "PagedCacheLoadOperation": paged_call}


def expected_backend(requested: str, on_npu: bool, supported: bool | None, library: bool, contiguous: bool) -> str:
    """The policy of docs/hardware.md, written as a table (the tensors really are on the host here)."""
    if requested == "fallback":
        return "fallback"
    if requested == "sim":
        return "sim"  # the host build runs tensors outside the kernels' domain on contiguous copies
    if on_npu and supported and library and contiguous:
        return "npu"
    return "fallback" if requested == "auto" else ERROR


def expected_reason(on_npu: bool, supported: bool | None, library: bool, contiguous: bool) -> str:
    """The words the first reason the kernels cannot run must contain."""
    if not on_npu:
        return "not on an Ascend NPU"
    if supported is None:
        return "is not a known Ascend SoC"
    if not supported:
        return "the kernels do not support"
    if not library:
        return "the kernel library is not loaded: no such library here"
    return "the kernels need its"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[SimpleNamespace]:
    """Controls for the fake environment: NPU or not, SoC name, library loaded or not."""
    state = SimpleNamespace(on_npu=False, library=False)
    monkeypatch.setattr(runtime, "is_npu", lambda device: state.on_npu)
    def library() -> npu.LibraryStatus:
        return npu.LibraryStatus(state.library, "/fake/lib.so", None if state.library else "no such library here")

    monkeypatch.setattr(npu, "library", library)
    monkeypatch.delenv(policy.BACKEND_ENV, raising=False)
    monkeypatch.setattr(policy, "_warned", set())
    yield state


COMBINATIONS = list(
    itertools.product(policy.BACKEND_CHOICES, [False, True], SOCS, [False, True], [False, True], CALLS)
)


@pytest.mark.parametrize(("requested", "on_npu", "soc", "library", "contiguous", "op"), COMBINATIONS)
def test_decision_for_every_combination(
    fake: SimpleNamespace, monkeypatch: pytest.MonkeyPatch,
    requested: str, on_npu: bool, soc: str, library: bool, contiguous: bool, op: str,
) -> None:
    fake.on_npu, fake.library = on_npu, library
    monkeypatch.setenv(runtime.SOC_ENV, soc)
    call = CALLS[op](contiguous)
    want = expected_backend(requested, on_npu, SOCS[soc], library, contiguous)
    with ascend_kv.use_backend(requested), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        decision = decide_call(call)
        assert decision.op == op and decision.requested == requested
        if want == ERROR:
            assert decision.backend is None
            with pytest.raises(ascend_kv.BackendUnavailableError, match=f"backend '{requested}' cannot run {op}"):
                select(call)
        else:
            assert decision.backend == want
            assert select(call) == want
            select(call)  # the same reason again: no second warning
    if requested in ("auto", "npu") and want != "npu":
        assert expected_reason(on_npu, SOCS[soc], library, contiguous) in decision.reason
    if on_npu and requested in ("auto", "npu"):
        assert (decision.soc, decision.product_line) == (soc, LINES[soc])
    fallback_warnings = [w for w in caught if issubclass(w.category, ascend_kv.FallbackWarning)]
    assert len(fallback_warnings) == (1 if requested == "auto" and on_npu and want == "fallback" else 0)
    if fallback_warnings:
        assert decision.reason in str(fallback_warnings[0].message)


def test_one_warning_per_reason_not_per_call(fake: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.on_npu = True
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for soc in ["Ascend310P3", "Ascend310P3", "Ascend910B3", "Ascend910B3", "Ascend310P1"]:
            monkeypatch.setenv(runtime.SOC_ENV, soc)
            select(kv_call(True))
    messages = [str(w.message) for w in caught if issubclass(w.category, ascend_kv.FallbackWarning)]
    assert len(messages) == 3  # 310P3, 910B3 (library missing), 310P1: three distinct reasons
    assert "Ascend310P3" in messages[0] and "not loaded" in messages[1] and "Ascend310P1" in messages[2]


def test_explicit_npu_that_cannot_run_writes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    past = torch.zeros(1, 1, 4, 16, dtype=torch.float16)
    monkeypatch.setenv(policy.BACKEND_ENV, "npu")
    with pytest.raises(ascend_kv.BackendUnavailableError, match="not on an Ascend NPU"):
        ascend_kv.kv_cache(torch.ones(1, 16, dtype=torch.float16), 0, past, torch.tensor([1]), torch.tensor([1]))
    assert not past.any()


def test_choice_precedence_context_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(policy.BACKEND_ENV, " Fallback ")
    assert policy.requested_backend() == "fallback"
    with ascend_kv.use_backend("sim"):
        assert policy.requested_backend() == "sim"
        with ascend_kv.use_backend("auto"):
            assert policy.requested_backend() == "auto"
        assert policy.requested_backend() == "sim"
    monkeypatch.setenv(policy.BACKEND_ENV, "gpu")
    assert policy.requested_backend() == "fallback"                            # read once...
    policy.environment_backend.cache_clear()                                   # ...until asked to read again
    with pytest.raises(ValueError, match="ASCEND_KV_BACKEND must be one of auto, npu, sim, fallback, got 'gpu'"):
        policy.requested_backend()
    with pytest.raises(ValueError, match="got 'gpu'"):                           # a bad name is not remembered
        policy.requested_backend()
    with pytest.raises(ValueError, match="backend must be one of"), ascend_kv.use_backend("cuda"):
        pass


def test_explain_runs_nothing_and_says_why(fake: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    decision = ascend_kv.explain("kv_cache", "cpu")
    assert (decision.op, decision.backend, decision.device) == ("KVCacheOperation", "fallback", "cpu")
    assert "not on an Ascend NPU" in str(decision)
    fake.on_npu, fake.library = True, True
    monkeypatch.setenv(runtime.SOC_ENV, "ascend910_9391")
    decision = ascend_kv.explain("PagedCacheLoadOperation", "cpu")
    assert (decision.backend, decision.soc, decision.product_line) == ("npu", "ascend910_9391", "atlas-a3")
    assert ascend_kv.explain("kv_cache", "cpu", backend="fallback").backend == "fallback"
    assert ascend_kv.explain("kv_cache", "meta", backend="sim").backend is None  # sim: host tensors only


def test_explain_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="op must be one of KVCacheOperation, PagedCacheLoadOperation, "
                                         "ReshapeAndCacheOperation, BlockCopyOperation, kv_cache"):
        ascend_kv.explain("write_cache")
    with pytest.raises(ValueError, match="backend must be one of"):
        ascend_kv.explain("kv_cache", "cpu", backend="gpu")
    with pytest.raises(TypeError, match="device must be a str or torch.device, got int"):
        ascend_kv.explain("kv_cache", 0)  # type: ignore[arg-type]


def test_explain_default_device_is_the_host_without_an_npu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "npu_runtime", lambda: runtime.NpuRuntime(False, 0, "no NPU"))
    decision = ascend_kv.explain("kv_cache")
    assert decision.device == "cpu" and decision.reason.endswith("(no NPU here: no NPU)")


def test_library_reason_names_the_missing_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    missing = tmp_path / "libascend_kv_npu.so"
    monkeypatch.setenv(npu.LIBRARY_ENV, str(missing))
    npu.library.cache_clear()
    try:
        status = npu.library()
        assert not status.loaded and status.path == str(missing)
        assert str(missing) in status.reason and "$ASCEND_KV_NPU_LIB" in status.reason
        missing.write_bytes(b"not a library")
        npu.library.cache_clear()
        status = npu.library()
        assert not status.loaded and status.reason.startswith("OSError") and str(missing) in status.reason
    finally:
        npu.library.cache_clear()


def test_default_library_location_is_inside_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(npu.LIBRARY_ENV, raising=False)
    assert npu.library_path() == npu.DEFAULT_LIBRARY
    assert npu.DEFAULT_LIBRARY.parent.parent == Path(ascend_kv.__file__).parent


