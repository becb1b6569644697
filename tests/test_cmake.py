"""The top-level CMakeLists.txt: configures everywhere, and says why it skips the NPU targets.

No CANN here, so the NPU branch is exercised up to the kernel toolchain with a fake CANN folder
and a stub torch_npu that names a SoC: each reason to skip is printed and configuring succeeds.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # CMake configures the project, several times (concurrently)

ROOT = Path(__file__).resolve().parents[1]
STUB_TORCH_NPU = "class npu:\n    @staticmethod\n    def get_device_name(index):\n        return {soc!r}\n"


def configure(build: Path, env_extra: dict[str, str], *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "SOC_VERSION")}
    env.update(env_extra)
    result = subprocess.run(
        ["cmake", "-S", str(ROOT), "-B", str(build), f"-DPython3_EXECUTABLE={sys.executable}", *args],
        check=False, capture_output=True, text=True, env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def stub_torch_npu(folder: Path, soc: str) -> str:
    """A torch_npu stand-in in ``folder`` that reports ``soc`` for NPU 0; returns the PYTHONPATH for it."""
    (folder / "torch_npu").mkdir(parents=True)
    (folder / "torch_npu" / "__init__.py").write_text(STUB_TORCH_NPU.format(soc=soc))
    return str(folder)


FAKE_ASCENDC_CMAKE = """
function(ascendc_library name kind)
  add_library(${name} ${kind} ${ARGN})
endfunction()
function(ascendc_include_directories name)
  target_include_directories(${name} ${ARGN})
endfunction()
"""

#: Why the NPU targets are skipped, given a fake CANN and a torch_npu stand-in reporting this SoC (None: no torch_npu).
SKIP_REASONS = [
    (None, "torch_npu cannot be imported"),
    ("Ascend310P3", "the kernels do not support SOC_VERSION Ascend310P3 (product line 'atlas-inference')"),
    ("Ascend999", "the kernels do not support SOC_VERSION Ascend999 (product line '')"),
    ("Ascend910B3", "CANN's ascendc_kernel_cmake/ascendc.cmake not found under"),
]


def without_cann(folder: Path) -> tuple[dict[str, str], tuple[str, ...]]:
    return {}, ()


def with_cann_and_soc(soc: str | None) -> Callable[[Path], tuple[dict[str, str], tuple[str, ...]]]:
    def setup(folder: Path) -> tuple[dict[str, str], tuple[str, ...]]:
        (folder / "cann").mkdir()
        env = {"ASCEND_HOME_PATH": str(folder / "cann")}
        if soc is not None:
            env["PYTHONPATH"] = stub_torch_npu(folder / "stub", soc)
        return env, ()
    return setup


def soc_version_given(folder: Path) -> tuple[dict[str, str], tuple[str, ...]]:
    (folder / "cann").mkdir()
    env = {"ASCEND_TOOLKIT_HOME": str(folder / "cann"), "PYTHONPATH": stub_torch_npu(folder / "stub", "Ascend910B3")}
    return env, ("-DSOC_VERSION=Ascend310B1",)


def everything_present(folder: Path) -> tuple[dict[str, str], tuple[str, ...]]:
    """CANN's legacy ascendc.cmake stood in for by plain CMake functions."""
    cmake_dir = folder / "cann" / "compiler" / "tikcpp" / "ascendc_kernel_cmake"
    cmake_dir.mkdir(parents=True)
    (cmake_dir / "ascendc.cmake").write_text(FAKE_ASCENDC_CMAKE)
    env = {"ASCEND_HOME_PATH": str(folder / "cann"), "PYTHONPATH": stub_torch_npu(folder / "stub", "Ascend910_9391")}
    return env, ()


SETUPS = {"without CANN": without_cann, "SOC_VERSION given": soc_version_given, "everything present": everything_present,
          **{f"CANN, {soc}": with_cann_and_soc(soc) for soc, _ in SKIP_REASONS}}


@dataclass
class Configured:
    folder: Path
    future: Future[str]

    @property
    def build(self) -> Path:
        return self.folder / "build"

    @property
    def stdout(self) -> str:
        return self.future.result()


@pytest.fixture(scope="module")
def configured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Configured]]:
    """Every setup above configured once, all at the same time (each configure mostly waits on processes)."""
    with ThreadPoolExecutor(max_workers=len(SETUPS)) as pool:
        runs = {}
        for name, setup in SETUPS.items():
            folder = tmp_path_factory.mktemp("cmake")
            env, args = setup(folder)
            runs[name] = Configured(folder, pool.submit(configure, folder / "build", env, *args))
        yield runs


def test_without_cann_no_target_and_the_reason(configured: dict[str, Configured]) -> None:
    """The operator library and the kernels' host build are not CMake targets (ascend_kv/operators/build.py
    compiles them): without CANN there is nothing to build, and configuring says why."""
    run = configured["without CANN"]
    assert "ascend_kv: CANN not found" in run.stdout
    assert "skipping the NPU targets" in run.stdout
    makefile = (run.build / "Makefile").read_text()
    assert "ascend_kv_npu" not in makefile and "ascend_kv_host" not in makefile


@pytest.mark.parametrize(("soc", "why"), SKIP_REASONS)
def test_with_cann_each_reason_to_skip_is_said(configured: dict[str, Configured], soc: str | None, why: str) -> None:
    run = configured[f"CANN, {soc}"]
    assert f"ascend_kv: CANN at {run.folder / 'cann'}" in run.stdout
    assert why in run.stdout and "skipping the NPU targets" in run.stdout


def test_soc_version_given_wins_over_detection(configured: dict[str, Configured]) -> None:
    assert "SOC_VERSION Ascend310B1 (product line 'atlas-200i-500-a2')" in configured["SOC_VERSION given"].stdout


def test_with_everything_present_the_npu_targets_are_configured(configured: dict[str, Configured]) -> None:
    run = configured["everything present"]
    assert "ascend_kv: building the NPU kernels for Ascend910_9391 (atlas-a3)" in run.stdout
    assert "skipping" not in run.stdout
    makefile = (run.build / "Makefile").read_text()
    assert "ascend_kv_npu" in makefile and "ascend_kv_kernels" in makefile and "ascend_kv_host" not in makefile
    # CANN's own ACL headers win over the copies torch_npu bundles
    flags = (run.build / "CMakeFiles" / "ascend_kv_npu.dir" / "flags.make").read_text()
    cann_include = flags.index(f"-I{run.folder / 'cann' / 'include'}")
    bundled_acl = flags.index("include/third_party/acl/inc")
    assert cann_include < bundled_acl
    assert "-DASCEND_KV_KERNEL_LIBRARY=ascend_kv_npu" in flags
    # torch's flags as the operator library takes them (torch's own CMake config is not used)
    assert "-D_GLIBCXX_USE_CXX11_ABI=" in flags and "torch/include" in flags


def test_native_builds_run_a_bounded_number_of_jobs() -> None:
    """A bare `-j` starts as many compilers as there are targets' sources at once."""
    for script in (ROOT / "setup.py", ROOT / "scripts" / "build_npu.sh"):
        text = script.read_text()
        assert "--build" in text
        assert not re.search(r'"-j"\]|-j\s*$|-j\s*\\?\n', text, re.MULTILINE), script
