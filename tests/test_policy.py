"""The dispatch policy (docs/hardware.md#dispatch), decision by decision, and the decisions the
operators keep.

Every combination of: requested backend (auto, npu, sim, fallback) x the tensors' device (cpu,
or an NPU faked by monkeypatching device detection) x SoC product line (supported A2/A3,
unsupported 310P, unknown) x kernel library loaded or not x inputs inside the kernels' domain
(token rows contiguous) or not x operation. The expected outcome comes from a small table written here,
independently of ascend_kv.dispatch.policy.

The C++ operators ask Python (``policy.choose``) once per operation, device, requested backend and
reason the kernels cannot take a call, and keep the answer per thread; ``policy.forget()`` drops
what they kept. The table is checked on ``policy.choose`` itself; what the operators keep, on the
fake NPU of tests/fake_npu through the public functions.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import fake_npu
import pytest
import torch
from cases import bits_equal, kv_cache_case, paged_case

import ascend_kv
from ascend_kv.backends import npu, sim
from ascend_kv.dispatch import device as runtime
from ascend_kv.dispatch import policy
from ascend_kv.tools import reference

ERROR = "error"
SOCS = {"Ascend910B3": True, "Ascend910_9382": True, "Ascend310P3": False, "Ascend999X": None}  # supported?
LINES = {"Ascend910B3": "atlas-a2", "Ascend910_9382": "atlas-a3", "Ascend310P3": "atlas-inference", "Ascend999X": None}
#: Why the kernels cannot take a call whose token rows are not contiguous, as the operators say it
#: (csrc/rules/kernel_domain.cpp); None: inside the kernels' domain.
OUTSIDE = {
    "KVCacheOperation": "past has sizes (2, 2, 8, 32) and strides (512, 256, 1, 8): the kernels need its rows "
                        "(dim 3) contiguous",
    "PagedCacheLoadOperation": "key has sizes (20, 2, 16) and strides (32, 1, 2): the kernels need its rows contiguous",
}
CPU = torch.device("cpu")


def select(op: str, requested: str, contiguous: bool) -> str:
    """The backend the operators would run: what they ask ``policy.choose`` for a call of ``op``."""
    return policy.choose(op, CPU, requested, None if contiguous else OUTSIDE[op])


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
    policy.forget()  # every reason warns once more
    yield state
    policy.forget()


COMBINATIONS = list(
    itertools.product(policy.BACKEND_CHOICES, [False, True], SOCS, [False, True], [False, True], OUTSIDE)
)


@pytest.mark.parametrize(("requested", "on_npu", "soc", "library", "contiguous", "op"), COMBINATIONS)
def test_decision_for_every_combination(
    fake: SimpleNamespace, monkeypatch: pytest.MonkeyPatch,
    requested: str, on_npu: bool, soc: str, library: bool, contiguous: bool, op: str,
) -> None:
    fake.on_npu, fake.library = on_npu, library
    monkeypatch.setenv(runtime.SOC_ENV, soc)
    want = expected_backend(requested, on_npu, SOCS[soc], library, contiguous)
    with ascend_kv.use_backend(requested), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        decision = policy.decide(op, CPU, None if contiguous else OUTSIDE[op])
        assert decision.op == op and decision.requested == requested
        if want == ERROR:
            assert decision.backend is None
            with pytest.raises(ascend_kv.BackendUnavailableError, match=f"backend '{requested}' cannot run {op}"):
                select(op, requested, contiguous)
        else:
            assert decision.backend == want
            assert select(op, requested, contiguous) == want
            select(op, requested, contiguous)  # the same reason again: no second warning
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
            select("KVCacheOperation", "auto", True)
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




# ----------------------------------------------------------------------------- the decisions the operators keep


SUPPORTED, UNSUPPORTED = "Ascend910B3", "Ascend310P3"
KERNELS, DEVICE_FALLBACK = 2, 3  # positions in torch.ops.ascend_kv._runs()


@pytest.fixture
def on_fake_npu(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The fake NPU, the kernels' host build as its kernel library, ``auto``, nothing kept or warned yet."""
    fake_npu.install()
    monkeypatch.setenv(npu.LIBRARY_ENV, str(sim.library_path()))
    monkeypatch.delenv(policy.BACKEND_ENV, raising=False)
    npu.library.cache_clear()
    policy.forget()
    yield
    monkeypatch.undo()
    npu.library.cache_clear()
    policy.forget()


def kv_call_on_npu(rows_apart: bool = False) -> tuple[tuple, torch.Tensor]:
    """A kv_cache call on the fake NPU (past's rows strided apart, or not) and the past it must leave."""
    case = kv_cache_case(torch.float16, [1, 2], [4, 2], hidden=32)
    new_kv, layer, past, offsets, lens = case.args
    expected = reference.kv_cache(new_kv, layer, past.clone(), offsets, lens)
    on_npu = past.to("npu")
    if rows_apart:
        on_npu = on_npu.transpose(-1, -2).contiguous().transpose(-1, -2)
    return (new_kv.to("npu"), layer, on_npu, offsets, lens), expected


def fallback_warnings(call: tuple) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ascend_kv.kv_cache(*call)
    return [str(w.message) for w in caught if issubclass(w.category, ascend_kv.FallbackWarning)]


def test_a_kept_fallback_decision_warns_once_until_forgotten(on_fake_npu: None,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """On a 310P part the device fallback runs and says so once: the operators keep the decision
    (no second warning, even with Python's record of warnings cleared); after ``forget()`` they
    ask again and it warns again."""
    monkeypatch.setenv(runtime.SOC_ENV, UNSUPPORTED)
    before = torch.ops.ascend_kv._runs()[DEVICE_FALLBACK]
    call, expected = kv_call_on_npu()
    first = fallback_warnings(call)
    assert len(first) == 1 and "the kernels do not support KVCacheOperation" in first[0] and UNSUPPORTED in first[0]
    assert fallback_warnings(call) == []
    policy._warned.clear()                    # the decision is kept by the operators, not asked again
    assert fallback_warnings(call) == []
    policy.forget()
    assert len(fallback_warnings(call)) == 1
    assert torch.ops.ascend_kv._runs()[DEVICE_FALLBACK] - before == 4
    assert bits_equal(call[2].cpu(), expected)


def test_a_kept_decision_follows_what_forget_drops(on_fake_npu: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SoC is read when the operators ask: a changed ASCEND_KV_SOC takes effect after ``forget()``."""
    monkeypatch.setenv(runtime.SOC_ENV, SUPPORTED)
    call, expected = kv_call_on_npu()
    runs = torch.ops.ascend_kv._runs()
    assert fallback_warnings(call) == []
    monkeypatch.setenv(runtime.SOC_ENV, UNSUPPORTED)
    assert fallback_warnings(call) == []                                  # kept: the kernels again
    after = torch.ops.ascend_kv._runs()
    assert after[KERNELS] - runs[KERNELS] == 2 and after[DEVICE_FALLBACK] == runs[DEVICE_FALLBACK]
    policy.forget()
    assert len(fallback_warnings(call)) == 1                              # asked again: the fallback
    assert torch.ops.ascend_kv._runs()[DEVICE_FALLBACK] == after[DEVICE_FALLBACK] + 1
    assert bits_equal(call[2].cpu(), expected)


def test_a_call_outside_the_kernels_domain_falls_back_once_per_reason(on_fake_npu: None,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """On a supported part with the kernel library loaded, strided token rows are outside the
    kernels' domain: the device fallback runs, with the reason the operators give (the strides);
    contiguous rows run the kernels; each reason is one decision, warned once."""
    monkeypatch.setenv(runtime.SOC_ENV, SUPPORTED)
    runs = torch.ops.ascend_kv._runs()
    inside, expected = kv_call_on_npu()
    outside, _ = kv_call_on_npu(rows_apart=True)
    assert fallback_warnings(inside) == []
    said = fallback_warnings(outside)
    assert len(said) == 1 and "the call is outside the kernels' domain: past has sizes (2, 2, 16, 32)" in said[0]
    assert "the kernels need its rows (dim 3) contiguous" in said[0]
    assert fallback_warnings(outside) == [] and fallback_warnings(inside) == []
    after = torch.ops.ascend_kv._runs()
    assert (after[KERNELS] - runs[KERNELS], after[DEVICE_FALLBACK] - runs[DEVICE_FALLBACK]) == (2, 2)
    assert bits_equal(inside[2].cpu(), expected) and bits_equal(outside[2].cpu(), expected)


def test_an_explicit_npu_request_that_cannot_run_raises_every_call(on_fake_npu: None,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """No decision is kept for a backend that cannot run: each call raises, writing nothing."""
    monkeypatch.setenv(runtime.SOC_ENV, UNSUPPORTED)
    call, _ = kv_call_on_npu()
    before = call[2].cpu()
    with ascend_kv.use_backend("npu"):
        for _ in range(2):
            with pytest.raises(ascend_kv.BackendUnavailableError, match="backend 'npu' cannot run KVCacheOperation"):
                ascend_kv.kv_cache(*call)
    assert bits_equal(call[2].cpu(), before)


def test_the_host_never_asks_python_under_auto_or_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Host calls under auto and fallback run the host paths without a decision asked of Python."""
    asked: list[object] = []
    choose = policy.choose
    monkeypatch.setattr(policy, "choose", lambda *args: asked.append(args) or choose(*args))
    policy.forget()
    case = paged_case(ascend_kv.KvCacheCfg.K_CACHE_V_CACHE_ND, [5, 3])
    for requested in ("auto", "fallback"):
        with ascend_kv.use_backend(requested):
            ascend_kv.paged_cache_load(*case.args, **case.kwargs)
    assert asked == []
    policy.forget()
