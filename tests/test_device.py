"""Device probing: lazy, cached, never raising, reasons verbatim; the ASCEND_KV_SOC override; and
the torch import that survives a broken device backend (ascend_kv.dispatch.autoload)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ascend_kv.dispatch import autoload
from ascend_kv.dispatch import device as runtime

CANN_MISSING = "libhccl.so: cannot open shared object file: No such file or directory"


@pytest.fixture(autouse=True)
def fresh_caches() -> Iterator[None]:
    """Each test probes from scratch and leaves no cached answer behind."""
    for cached in (runtime.torch_npu, runtime.npu_runtime, runtime._device_name):
        cached.cache_clear()
    yield
    for cached in (runtime.torch_npu, runtime.npu_runtime, runtime._device_name):
        cached.cache_clear()


def fail_import(monkeypatch: pytest.MonkeyPatch, error: Exception) -> list[str]:
    """Make importing torch_npu raise ``error``; returns the list of attempted imports."""
    attempts: list[str] = []

    def import_module(name: str) -> object:
        attempts.append(name)
        raise error

    monkeypatch.setattr(runtime.importlib, "import_module", import_module)
    monkeypatch.setattr(runtime.importlib.metadata, "version", lambda name: "2.13.0")
    monkeypatch.setattr(autoload, "failures", {})
    return attempts


@pytest.mark.parametrize(
    "error", [ImportError(CANN_MISSING), Exception("ASCEND_OPP_PATH /nowhere does not exist"), RuntimeError("x")]
)
def test_torch_npu_failure_is_kept_verbatim_and_probed_once(monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    attempts = fail_import(monkeypatch, error)
    first = runtime.torch_npu()
    assert first == runtime.TorchNpu(None, "2.13.0", f"{type(error).__name__}: {error}")
    assert runtime.torch_npu() is first and attempts == ["torch_npu"]
    state = runtime.npu_runtime()
    assert not state.available and state.device_count == 0
    assert state.reason == f"torch_npu cannot be imported: {type(error).__name__}: {error}"


def test_a_failed_autoload_is_the_reason_without_a_second_import(monkeypatch: pytest.MonkeyPatch) -> None:
    attempts = fail_import(monkeypatch, AssertionError("must not be imported again"))
    monkeypatch.setattr(autoload, "failures", {"torch_npu": f"ImportError: {CANN_MISSING}"})
    assert runtime.torch_npu().reason == f"ImportError: {CANN_MISSING}" and attempts == []


def test_torch_npu_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    fail_import(monkeypatch, ModuleNotFoundError("No module named 'torch_npu'"))

    def not_installed(name: str) -> str:
        raise runtime.importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(runtime.importlib.metadata, "version", not_installed)
    assert runtime.torch_npu().version is None
    assert runtime.npu_runtime().reason == "torch_npu is not installed"


def fake_torch_npu(monkeypatch: pytest.MonkeyPatch, available: bool, names: dict[int, str]) -> list[int]:
    """A working torch_npu with NPUs named ``names``; returns the device indices queried."""
    queried: list[int] = []

    def get_device_name(index: int) -> str:
        queried.append(index)
        return names[index]

    npu = SimpleNamespace(
        get_device_name=get_device_name, is_available=lambda: available, device_count=lambda: len(names),
        current_device=lambda: 1,
    )
    monkeypatch.setattr(runtime.importlib, "import_module", lambda name: SimpleNamespace(__version__="2.13.0", npu=npu))
    monkeypatch.setattr(autoload, "failures", {})
    return queried


def npu_device(index: int | None) -> torch.device:
    """A stand-in for ``torch.device("npu", index)`` (torch knows "npu" only after torch_npu loads)."""
    return SimpleNamespace(type="npu", index=index)  # type: ignore[return-value]


def test_soc_of_the_tensors_device_is_asked_once_per_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(runtime.SOC_ENV, raising=False)
    queried = fake_torch_npu(monkeypatch, True, {0: "Ascend910B3", 1: "Ascend910_9391"})
    assert runtime.npu_runtime() == runtime.NpuRuntime(True, 2, None)
    assert runtime.soc_of(npu_device(0)) == "Ascend910B3"
    assert runtime.soc_of(npu_device(None)) == "Ascend910_9391"  # the current device
    assert runtime.soc_of(npu_device(1)) == "Ascend910_9391"
    assert runtime.soc_of(npu_device(0)) == "Ascend910B3"
    assert queried == [0, 1]
    assert runtime.host_soc() == ("Ascend910B3", "from NPU 0")


def test_no_npu_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(runtime.SOC_ENV, raising=False)
    fake_torch_npu(monkeypatch, False, {})
    state = runtime.npu_runtime()
    assert not state.available and "is_available() is False" in state.reason
    assert runtime.host_soc() == (None, state.reason)


def test_override_applies_to_npu_devices_only(monkeypatch: pytest.MonkeyPatch) -> None:
    queried = fake_torch_npu(monkeypatch, True, {0: "Ascend910B3"})
    monkeypatch.setenv(runtime.SOC_ENV, "  Ascend310P3 ")
    assert runtime.soc_of(npu_device(0)) == "Ascend310P3" and queried == []
    assert runtime.soc_of(torch.device("cpu")) is None
    assert runtime.host_soc() == ("Ascend310P3", f"from {runtime.SOC_ENV}")
    monkeypatch.setenv(runtime.SOC_ENV, "   ")
    assert runtime.soc_override() is None


def test_is_npu() -> None:
    assert runtime.is_npu(npu_device(0)) and not runtime.is_npu(torch.device("cpu"))
    assert not runtime.is_npu(torch.device("meta"))


CPU_WORK = textwrap.dedent(
    """
    import sys, torch, ascend_kv
    from ascend_kv.dispatch import device
    past = torch.zeros(1, 1, 4, 16, dtype=torch.float16)
    ascend_kv.kv_cache(torch.ones(1, 16, dtype=torch.float16), 0, past, torch.tensor([1]), torch.tensor([1]))
    print(device.torch_npu.cache_info().currsize, device.npu_runtime.cache_info().currsize)
    """
)

BROKEN_BACKEND = {
    "broken_backend.py": "raise ImportError('libascendcl.so: cannot open shared object file')\n",
    "broken_backend-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: broken_backend\nVersion: 1.0\n",
    "broken_backend-1.0.dist-info/entry_points.txt": "[torch.backends]\nbroken = broken_backend:autoload\n",
}
SURVIVING_IMPORT = (
    "import os, ascend_kv, torch; from ascend_kv import autoload; "
    "print(autoload.failures); print(os.environ.get('TORCH_DEVICE_BACKEND_AUTOLOAD'))"
)


def broken_backend_environment(folder: Path) -> dict[str, str]:
    """An environment where a torch device backend fails to load, as torch_npu does without CANN."""
    for name, text in BROKEN_BACKEND.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k != autoload.AUTOLOAD_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(folder), env.get("PYTHONPATH", "")])
    return env


@pytest.fixture(scope="module")
def children(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, subprocess.Popen[str]]]:
    """Every fresh Python process the tests below read, started at once (each spends a second importing torch)."""
    plain = {k: v for k, v in os.environ.items() if k not in ("ASCEND_KV_BACKEND", "TORCH_DEVICE_BACKEND_AUTOLOAD")}
    broken = broken_backend_environment(tmp_path_factory.mktemp("broken_backend"))
    runs = {
        "cpu work": (CPU_WORK, plain),
        "plain import torch": ("import torch", broken),
        "import ascend_kv": (SURVIVING_IMPORT, broken),
        "autoload on": ("import ascend_kv", {**broken, autoload.AUTOLOAD_ENV: "1"}),
        "autoload off": ("import ascend_kv; from ascend_kv import autoload; print(autoload.failures)",
                         {**broken, autoload.AUTOLOAD_ENV: "0"}),
    }
    started = {name: subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=env) for name, (code, env) in runs.items()}
    yield started
    for child in started.values():
        child.communicate()


def finished(child: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    stdout, stderr = child.communicate()
    return subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)


def test_cpu_work_never_probes_the_npu(children: dict[str, subprocess.Popen[str]]) -> None:
    """Importing ascend_kv and running on host tensors leaves torch_npu alone (lazy probing)."""
    result = finished(children["cpu work"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0", "0"]


def test_the_trap_is_real_for_plain_import_torch(children: dict[str, subprocess.Popen[str]]) -> None:
    result = finished(children["plain import torch"])
    assert result.returncode != 0 and "Failed to load the backend extension: broken" in result.stderr


def test_import_ascend_kv_survives_a_broken_backend(children: dict[str, subprocess.Popen[str]]) -> None:
    result = finished(children["import ascend_kv"])
    assert result.returncode == 0, result.stderr
    failures, switch = result.stdout.splitlines()
    assert failures == "{'broken': 'ImportError: libascendcl.so: cannot open shared object file'}"
    assert switch == "None"  # the environment is left as it was, for child processes


def test_the_users_autoload_choice_stands(children: dict[str, subprocess.Popen[str]]) -> None:
    result = finished(children["autoload on"])
    assert result.returncode != 0 and "Failed to load the backend extension: broken" in result.stderr
    result = finished(children["autoload off"])
    assert result.returncode == 0 and result.stdout.strip() == "{}"
