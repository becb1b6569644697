"""The ``ascend-kv`` command: support-matrix, info, and the demo/bench delegation."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ascend_kv import cli, device, support
from ascend_kv.backends import npu

A2_A3 = {"KVCacheOperation": True, "PagedCacheLoadOperation": True, "ReshapeAndCacheOperation": True,
         "BlockCopyOperation": True}
RESHAPE_ONLY = {"KVCacheOperation": False, "PagedCacheLoadOperation": False, "ReshapeAndCacheOperation": True,
                "BlockCopyOperation": False}
RESHAPE_AND_BLOCK_COPY = {**RESHAPE_ONLY, "BlockCopyOperation": True}
NONE = {"KVCacheOperation": False, "PagedCacheLoadOperation": False, "ReshapeAndCacheOperation": False,
        "BlockCopyOperation": False}
ND_NZ, ND, NZ = ["nd", "nz"], ["nd"], ["nz"]
ANSWERS = [  # (SoC, product line, documented operations, ReshapeAndCache layouts)
    ("Ascend910B3", "atlas-a2", A2_A3, ND_NZ),
    ("ascend910b4-1", "atlas-a2", A2_A3, ND_NZ),
    ("  ASCEND910_9391\n", "atlas-a3", A2_A3, ND_NZ),
    ("Ascend950PR_9579", "atlas-350", RESHAPE_ONLY, ND),
    ("Ascend910B", "atlas-training", RESHAPE_ONLY, NZ),
    (" ascend910b ", "atlas-training", RESHAPE_ONLY, NZ),
    ("Ascend910PremiumA", "atlas-training", RESHAPE_ONLY, NZ),
    ("ascend310p3vir02", "atlas-inference", RESHAPE_AND_BLOCK_COPY, NZ),
    ("Ascend310B1", "atlas-200i-500-a2", RESHAPE_ONLY, NZ),
]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize(("soc", "line", "ops", "layouts"), ANSWERS)
def test_support_matrix_for_one_soc_as_json(
    capsys: pytest.CaptureFixture[str], soc: str, line: str, ops: dict[str, bool], layouts: list[str]
) -> None:
    status, out, err = run(capsys, "support-matrix", "--soc", soc, "--json")
    assert (status, err) == (0, "")
    assert json.loads(out) == {"soc": soc, "product_line": line, "ops": ops,
                               "layouts": {"ReshapeAndCacheOperation": layouts}}


@pytest.mark.parametrize("soc", ["Ascend910", "Ascend910C", "Ascend 910B3", "", "nvidia-a100"])
def test_unknown_soc_exits_2_listing_the_known_families(capsys: pytest.CaptureFixture[str], soc: str) -> None:
    status, out, err = run(capsys, "support-matrix", "--soc", soc, "--json")
    assert status == 2
    assert json.loads(out) == {"soc": soc, "product_line": None, "ops": NONE,
                               "layouts": {"ReshapeAndCacheOperation": []}}
    assert f"unknown SoC name {soc!r}" in err
    for line in support.PRODUCT_LINES:
        assert line.id in err
    status, out, err = run(capsys, "support-matrix", "--soc", soc)
    assert status == 2 and out == "" and "Known families" in err


def test_support_matrix_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "support-matrix") == (0, support.markdown_table(), "")
    status, out, _ = run(capsys, "support-matrix", "--json")
    whole = json.loads(out)
    assert status == 0 and whole["operations"] == list(support.OPERATIONS)
    assert {line["id"]: line["ops"] for line in whole["product_lines"]} == support.matrix()
    status, out, _ = run(capsys, "support-matrix", "--soc", "Ascend910B2C")
    assert status == 0 and out.startswith("Ascend910B2C: atlas-a2 (") and "KVCacheOperation yes" in out


def test_info_json_on_this_host(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(device.SOC_ENV, "Ascend910B3")
    monkeypatch.delenv("ASCEND_KV_BACKEND", raising=False)
    status, out, _ = run(capsys, "info", "--json")
    report = json.loads(out)
    assert status == 0
    assert report["soc"] == {"name": "Ascend910B3", "source": "from ASCEND_KV_SOC", "product_line": "atlas-a2"}
    assert report["kernel_library"]["loaded"] is False and "libascend_kv_npu.so" in report["kernel_library"]["reason"]
    assert report["requested_backend"] == "auto"
    for op in support.OPERATIONS:
        assert report["ops"][op]["reason"]
        if report["device"] == "cpu":  # no NPU here
            assert report["ops"][op]["backend"] == "fallback"
            assert report["ops"][op]["reason"].startswith("the tensors are on cpu, not on an Ascend NPU (no NPU here")
    assert {"torch", "torch_npu", "cann", "npu"} <= set(report)


def test_info_names_the_missing_cann_library(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    reason = "ImportError: libhccl.so: cannot open shared object file: No such file or directory"
    monkeypatch.setattr(device, "torch_npu", lambda: device.TorchNpu(None, "2.13.0", reason))
    not_available = device.NpuRuntime(False, 0, f"torch_npu cannot be imported: {reason}")
    monkeypatch.setattr(device, "npu_runtime", lambda: not_available)
    monkeypatch.setattr(npu, "library", lambda: npu.LibraryStatus(False, "/x/libascend_kv_npu.so", "missing"))
    monkeypatch.delenv(device.SOC_ENV, raising=False)
    status, out, _ = run(capsys, "info")
    assert status == 0
    assert f"CANN runtime    not loaded: {reason}" in out
    assert "torch_npu       2.13.0 (not loaded)" in out
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in out and "set_env.sh" in out
    status, out, _ = run(capsys, "info", "--json")
    report = json.loads(out)
    assert report["cann"] == {"loaded": False, "reason": reason} and report["advice"] == device.AUTOLOAD_ADVICE


def test_info_with_a_bad_backend_choice_exits_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASCEND_KV_BACKEND", "cuda")
    status, _, err = run(capsys, "info")
    assert status == 2 and "ASCEND_KV_BACKEND must be one of auto, npu, sim, fallback, got 'cuda'" in err


@pytest.mark.parametrize("command", ["demo", "bench"])
def test_demo_and_bench_get_the_remaining_arguments(monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    seen: list[list[str]] = []
    module = SimpleNamespace(main=lambda argv: seen.append(argv) or 3)
    monkeypatch.setitem(sys.modules, f"ascend_kv.{command}", module)
    assert cli.main([command, "--quick", "-h", "x"]) == 3
    assert seen == [["--quick", "-h", "x"]]


def test_console_script_and_python_m(tmp_path: Path) -> None:
    script = str(Path(sys.executable).parent / "ascend-kv")
    matrix = ["support-matrix", "--soc", " ascend910b ", "--json"]
    commands = [[script, *matrix], [sys.executable, "-m", "ascend_kv", *matrix], [script, "support-matrix", "--soc", "Ascend910X"]]
    children = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
                for c in commands]                                          # started at once: each imports torch
    (console, console_err), (module, module_err), (_, unknown_err) = (child.communicate() for child in children)
    assert children[0].returncode == 0, console_err
    assert children[1].returncode == 0, module_err
    assert json.loads(console)["product_line"] == json.loads(module)["product_line"] == "atlas-training"
    assert children[2].returncode == 2 and "Known families" in unknown_err
