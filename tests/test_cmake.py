"""The top-level CMakeLists.txt: configures everywhere, and says why it skips the NPU targets.

No CANN here, so the NPU branch is exercised up to the kernel toolchain with a fake CANN folder
and a stub torch_npu that names a SoC: each reason to skip is printed and configuring succeeds.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # CMake configures the project, several times

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


def test_without_cann_only_the_host_targets(tmp_path: Path) -> None:
    out = configure(tmp_path / "build", {})
    assert "ascend_kv: CANN not found" in out
    assert "skipping the NPU targets" in out
    assert "ascend_kv_host" in (tmp_path / "build" / "Makefile").read_text()


@pytest.mark.parametrize(
    ("soc", "why"),
    [
        (None, "torch_npu cannot be imported"),
        ("Ascend310P3", "the kernels do not support SOC_VERSION Ascend310P3 (product line 'atlas-inference')"),
        ("Ascend999", "the kernels do not support SOC_VERSION Ascend999 (product line '')"),
        ("Ascend910B3", "CANN's ascendc_kernel_cmake/ascendc.cmake not found under"),
    ],
)
def test_with_cann_each_reason_to_skip_is_said(tmp_path: Path, soc: str | None, why: str) -> None:
    cann = tmp_path / "cann"
    cann.mkdir()
    env = {"ASCEND_HOME_PATH": str(cann)}
    if soc is not None:  # a torch_npu stand-in that reports `soc` for NPU 0
        (tmp_path / "stub" / "torch_npu").mkdir(parents=True)
        (tmp_path / "stub" / "torch_npu" / "__init__.py").write_text(STUB_TORCH_NPU.format(soc=soc))
        env["PYTHONPATH"] = str(tmp_path / "stub")
    out = configure(tmp_path / "build", env)
    assert f"ascend_kv: CANN at {cann}" in out
    assert why in out and "skipping the NPU targets" in out


def test_soc_version_given_wins_over_detection(tmp_path: Path) -> None:
    (tmp_path / "cann").mkdir()
    (tmp_path / "stub" / "torch_npu").mkdir(parents=True)
    (tmp_path / "stub" / "torch_npu" / "__init__.py").write_text(STUB_TORCH_NPU.format(soc="Ascend910B3"))
    env = {"ASCEND_TOOLKIT_HOME": str(tmp_path / "cann"), "PYTHONPATH": str(tmp_path / "stub")}
    out = configure(tmp_path / "build", env, "-DSOC_VERSION=Ascend310B1")
    assert "SOC_VERSION Ascend310B1 (product line 'atlas-200i-500-a2')" in out


FAKE_ASCENDC_CMAKE = """
function(ascendc_library name kind)
  add_library(${name} ${kind} ${ARGN})
endfunction()
function(ascendc_include_directories name)
  target_include_directories(${name} ${ARGN})
endfunction()
"""


def test_with_everything_present_the_npu_targets_are_configured(tmp_path: Path) -> None:
    """CANN's legacy ascendc.cmake stood in for by plain CMake functions: the NPU branch configures."""
    cmake_dir = tmp_path / "cann" / "compiler" / "tikcpp" / "ascendc_kernel_cmake"
    cmake_dir.mkdir(parents=True)
    (cmake_dir / "ascendc.cmake").write_text(FAKE_ASCENDC_CMAKE)
    (tmp_path / "stub" / "torch_npu").mkdir(parents=True)
    (tmp_path / "stub" / "torch_npu" / "__init__.py").write_text(STUB_TORCH_NPU.format(soc="Ascend910_9391"))
    env = {"ASCEND_HOME_PATH": str(tmp_path / "cann"), "PYTHONPATH": str(tmp_path / "stub")}
    out = configure(tmp_path / "build", env)
    assert "ascend_kv: building the NPU kernels for Ascend910_9391 (atlas-a3)" in out
    assert "skipping" not in out
    makefile = (tmp_path / "build" / "Makefile").read_text()
    assert "ascend_kv_npu" in makefile and "ascend_kv_kernels" in makefile and "ascend_kv_host" in makefile
    # CANN's own ACL headers win over the copies torch_npu bundles
    flags = (tmp_path / "build" / "CMakeFiles" / "ascend_kv_npu.dir" / "flags.make").read_text()
    cann_include = flags.index(f"-I{tmp_path / 'cann' / 'include'}")
    bundled_acl = flags.index("include/third_party/acl/inc")
    assert cann_include < bundled_acl
    assert "-DASCEND_KV_OP_NAMESPACE=ascend_kv_npu" in flags


def test_native_builds_run_a_bounded_number_of_jobs() -> None:
    """A bare `-j` starts as many compilers as there are targets' sources at once."""
    for script in (ROOT / "setup.py", ROOT / "scripts" / "build_npu.sh"):
        text = script.read_text()
        assert "--build" in text
        assert not re.search(r'"-j"\]|-j\s*$|-j\s*\\?\n', text, re.MULTILINE), script
