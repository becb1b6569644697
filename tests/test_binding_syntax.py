"""The NPU build's host code compiles against torch's and torch_npu's own headers (no CANN here).

torch_npu's wheel ships its headers and the ACL headers. The newest torch_npu wheel of the
installed torch's minor version or older (torch_npu releases carry torch's version; the newest
torch may have none yet, then the newest torch_npu stands in) is downloaded once (``pip download
--no-deps``, never installed) and its ``include`` folder is unpacked into
``$ASCEND_KV_CACHE_DIR`` (default ``~/.cache/ascend_kv``). Then the kernel entries
(``ascendc/host/kernel_entry.cpp``, as ``ascend_kv_npu``) and the NPU launcher
(``ascendc/host/launch_npu.cpp``: device queries, storage format, tiling upload, launches) must
pass ``g++ -fsyntax-only`` with the flags the NPU build takes from torch, and our declarations of
the generated kernel launchers must match the kernels' parameter lists. (The host build compiles
the same kernel entries for real.)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from ascend_kv.operators import build

pytestmark = pytest.mark.slow  # g++ parses the binding against the torch and torch_npu headers

ROOT = Path(__file__).resolve().parents[1]
HOST = ROOT / "ascendc" / "host"
KERNELS = ROOT / "ascendc" / "kernels"
TORCH_MAJOR, TORCH_MINOR = (int(part) for part in torch.__version__.split(".")[:2])
TORCH_NPU = f"torch_npu<{TORCH_MAJOR}.{TORCH_MINOR + 1}"  # the newest release not ahead of torch


def _cache_dir() -> Path:
    return Path(os.environ.get("ASCEND_KV_CACHE_DIR") or Path.home() / ".cache" / "ascend_kv")


@pytest.fixture(scope="module")
def torch_npu_include() -> Path:
    """``torch_npu/include`` of the torch_npu wheel for this torch, unpacked once into the cache."""
    target = _cache_dir() / f"torch_npu-for-torch{TORCH_MAJOR}.{TORCH_MINOR}"
    include = target / "torch_npu" / "include"
    if not (include / "torch_npu" / "csrc" / "core" / "npu" / "NPUStream.h").is_file():
        with tempfile.TemporaryDirectory() as download:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                 TORCH_NPU, "-d", download],
                check=True,
            )
            (wheel,) = Path(download).glob("torch_npu-*.whl")
            with zipfile.ZipFile(wheel) as archive:
                members = [name for name in archive.namelist() if name.startswith("torch_npu/include/")]
                archive.extractall(target, members)
    return include


def _syntax_check(source: Path, torch_npu_include: Path) -> subprocess.CompletedProcess[str]:
    compile_flags, _ = build.flags(build.Library("ascend_kv_npu", "", (), ()))  # what CMakeLists.txt takes too
    command = [
        build.compiler(), *compile_flags, "-fsyntax-only", "-Werror=return-type",
        "-DASCEND_KV_KERNEL_LIBRARY=ascend_kv_npu",
        f"-I{torch_npu_include}", f"-I{torch_npu_include / 'third_party' / 'acl' / 'inc'}",
        f"-I{HOST}", str(source),
    ]
    return subprocess.run(command, check=False, capture_output=True, text=True)


def _launcher_without_the_layer_argument(folder: Path) -> Path:
    """A copy of launch_npu.cpp whose kv_cache launch drops one kernel argument."""
    source = (HOST / "launch_npu.cpp").read_text()
    broken = source.replace("Address(layer), tilingGm", "tilingGm", 1)
    assert broken != source
    copy = folder / "launch_npu.cpp"
    copy.write_text(broken)
    return copy


@pytest.fixture(scope="module")
def syntax_checks(
    torch_npu_include: Path, tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, Future[subprocess.CompletedProcess[str]]]]:
    """Every translation unit below, checked concurrently (each parses all of torch's headers)."""
    sources = {name: HOST / name for name in ("kernel_entry.cpp", "launch_npu.cpp")}
    sources["broken launch_npu.cpp"] = _launcher_without_the_layer_argument(tmp_path_factory.mktemp("broken"))
    with ThreadPoolExecutor(max_workers=len(sources)) as pool:
        yield {name: pool.submit(_syntax_check, source, torch_npu_include) for name, source in sources.items()}


@pytest.mark.parametrize("source", ["kernel_entry.cpp", "launch_npu.cpp"])
def test_npu_host_code_compiles_against_torch_and_torch_npu_headers(
    syntax_checks: dict[str, Future[subprocess.CompletedProcess[str]]], source: str,
) -> None:
    result = syntax_checks[source].result()
    assert result.returncode == 0, result.stderr[-4000:]


def test_a_wrong_launcher_call_does_not_compile(syntax_checks: dict[str, Future[subprocess.CompletedProcess[str]]]) -> None:
    """The check is not vacuous: the launcher with one kernel argument dropped is rejected."""
    result = syntax_checks["broken launch_npu.cpp"].result()
    assert result.returncode != 0 and "aclrtlaunch_kv_cache_kernel" in result.stderr


def _kernel_parameters(kernel: str) -> list[str]:
    """Parameter names of ``extern "C" ... void <kernel>(GM_ADDR a, ...)`` in ascendc/kernels/."""
    for source in KERNELS.glob("*.cpp"):
        code = re.sub(r"//[^\n]*", "", source.read_text())
        match = re.search(rf'extern "C"[^;{{]*?void\s+{kernel}\s*\((.*?)\)\s*\{{', code, re.DOTALL)
        if match:
            return [p.split()[-1] for p in match.group(1).split(",")]
    raise AssertionError(f"kernel {kernel} not found in {KERNELS}")


def _launcher_parameters(kernel: str) -> list[str]:
    """Parameter names of our declaration of ``aclrtlaunch_<kernel>``, after blockDim and stream."""
    source = (HOST / "launch_npu.cpp").read_text()
    match = re.search(rf"uint32_t aclrtlaunch_{kernel}\((.*?)\);", source, re.DOTALL)
    assert match, f"aclrtlaunch_{kernel} is not declared in launch_npu.cpp"
    names = [p.split()[-1].lstrip("*") for p in match.group(1).split(",")]
    assert names[:2] == ["blockDim", "stream"]
    return names[2:]


@pytest.mark.parametrize("kernel", ["kv_cache_kernel", "paged_cache_load_kernel", "reshape_and_cache_kernel",
                                    "block_copy_kernel", "transfer_blocks_kernel", "reshape_and_cache_quant_kernel",
                                    "paged_cache_load_dequant_kernel", "batch_memcpy_kernel"])
def test_launcher_declarations_match_the_kernels(kernel: str) -> None:
    assert _launcher_parameters(kernel) == _kernel_parameters(kernel)
