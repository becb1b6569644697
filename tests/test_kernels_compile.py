"""Every kernel compiles on its own against the host model, as strictly as Huawei's headers allow.

The host model (``ascendc/sim/include/kernel_operator.h``) declares each AscendC call with
Huawei's signature, const-ness included (docs/host_model.md, "Signatures"), so a kernel that
Huawei's headers would reject does not compile here either. Each kernel file is parsed alone with
``-fsyntax-only -Wall -Wextra -Werror``, and planted misuses of the API, each of which Huawei's
headers reject, must fail to compile: a writable pointer made from the read-only ``GetPhyAddr()``
(the defect a kernel once had), and a ``SetValue`` through a GlobalTensor seen as const.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ascend_kv.operators import build

ROOT = Path(__file__).resolve().parents[1]
ASCENDC = ROOT / "ascendc"
KERNELS = sorted((ASCENDC / "kernels").glob("*.cpp"))


def _parse(source: Path) -> subprocess.CompletedProcess[str]:
    """``c++ -fsyntax-only`` of one kernel source (in a ``kernels/`` folder beside ``tiling.h``) against the
    host model, which comes first on the include path."""
    return subprocess.run(
        [build.compiler(), "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
         f"-I{ASCENDC / 'sim' / 'include'}", f"-I{source.parent.parent}", f"-I{source.parent}", str(source)],
        capture_output=True, text=True, check=False,
    )


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda path: path.stem)
def test_each_kernel_compiles_alone_without_warnings(kernel: Path) -> None:
    result = _parse(kernel)
    assert result.returncode == 0, result.stderr


# (file, original text, misuse): each misuse is rejected by Huawei's own declarations
# (asc-devkit include/basic_api/kernel_tensor.h).
MISUSES = {
    "writable-pointer-from-const-GetPhyAddr": (
        "quant_params.h",
        "narrow.SetGlobalBuffer(reinterpret_cast<__gm__ uint16_t*>(gm), spanBytes / sizeof(uint16_t));",
        "narrow.SetGlobalBuffer(reinterpret_cast<__gm__ uint16_t*>(wide.GetPhyAddr()), spanBytes / 2);",
    ),
    "SetValue-through-a-const-GlobalTensor": (
        "reshape_and_cache_quant.cpp",
        "scaleCache.wide.SetValue(byte / sizeof(float), scales.GetValue(h));",
        "static_cast<const ScaleCache&>(scaleCache).wide.SetValue(byte / sizeof(float), scales.GetValue(h));",
    ),
}


@pytest.mark.parametrize("misuse", sorted(MISUSES))
def test_a_planted_api_misuse_does_not_compile(misuse: str, tmp_path: Path) -> None:
    name, original, planted = MISUSES[misuse]
    copy = tmp_path / "kernels"
    copy.mkdir()
    for source in (ASCENDC / "kernels").iterdir():
        text = source.read_text()
        if source.name == name:
            assert original in text, f"{name} no longer holds the line this mutant replaces"
            text = text.replace(original, planted)
        (copy / source.name).write_text(text)
    (tmp_path / "tiling.h").write_text((ASCENDC / "tiling.h").read_text())
    kernel = "reshape_and_cache_quant.cpp"  # includes quant_params.h
    assert _parse(ASCENDC / "kernels" / kernel).returncode == 0
    result = _parse(copy / kernel)
    assert result.returncode != 0, f"the model accepted {misuse!r}"
    assert "const" in result.stderr
