"""Build hook: installing from source on an Ascend host with CANN also builds the NPU library.

Everything else about the package is in pyproject.toml. When ``ASCEND_HOME_PATH`` or
``ASCEND_TOOLKIT_HOME`` is set (CANN's ``set_env.sh`` sets them), ``build_py`` configures the
top-level CMakeLists.txt with the installing Python and, when CMake builds the NPU targets,
ships ``libascend_kv_npu.so`` as ``ascend_kv/lib/libascend_kv_npu.so`` (where
:mod:`ascend_kv.backends.npu` looks). CMake needs torch and torch_npu from that Python, so
install with ``pip install --no-build-isolation .`` on such a host. Without CANN, or when CMake
skips the NPU targets (it prints why), the install is the pure-Python package, as everywhere
else; ``ASCEND_KV_SKIP_NPU_BUILD=1`` skips the attempt.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
LIBRARY = "libascend_kv_npu.so"


class BuildPyWithNpuLibrary(build_py):
    """``build_py``, plus the NPU op library when CANN is set up."""

    def run(self) -> None:
        super().run()
        cann = os.environ.get("ASCEND_HOME_PATH") or os.environ.get("ASCEND_TOOLKIT_HOME")
        if not cann or os.environ.get("ASCEND_KV_SKIP_NPU_BUILD"):
            return
        build = ROOT / "build" / "npu"  # the folder scripts/build_npu.sh uses too
        configure = subprocess.run(
            ["cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
             f"-DPython3_EXECUTABLE={sys.executable}"],
            capture_output=True, text=True,
        )
        print(configure.stdout, configure.stderr, sep="\n")
        if configure.returncode != 0 or "ascend_kv: building the NPU kernels" not in configure.stdout:
            print("ascend_kv: NPU library not built (see the 'ascend_kv:' lines above); installing without it")
            return
        # A bare -j starts unbounded jobs; one per CPU is enough for a handful of sources.
        jobs = str(os.cpu_count() or 1)
        subprocess.run(["cmake", "--build", str(build), "--target", "ascend_kv_npu", "-j", jobs], check=True)
        # Editable installs import from the source tree; others from build_lib.
        package = ROOT / "ascend_kv" if self.editable_mode else Path(self.build_lib) / "ascend_kv"
        (package / "lib").mkdir(parents=True, exist_ok=True)
        shutil.copy2(build / "lib" / LIBRARY, package / "lib" / LIBRARY)


setup(cmdclass={"build_py": BuildPyWithNpuLibrary})
