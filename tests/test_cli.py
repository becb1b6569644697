"""The ``ascend-kv`` command: support-matrix, info, and the demo/bench delegation."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import ascend_kv
from ascend_kv.backends import npu
from ascend_kv.dispatch import device, policy, support
from ascend_kv.tools import cli

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


KERNELS_RUN = {"atlas-a2": A2_A3, "atlas-a3": A2_A3}                   # ascend_kv's own kernels: A2/A3 only


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
                               "layouts": {"ReshapeAndCacheOperation": layouts},
                               "kernels_run": KERNELS_RUN.get(line, NONE)}


@pytest.mark.parametrize("soc", ["Ascend910", "Ascend910C", "Ascend 910B3", "", "nvidia-a100"])
def test_unknown_soc_exits_2_listing_the_known_families(capsys: pytest.CaptureFixture[str], soc: str) -> None:
    status, out, err = run(capsys, "support-matrix", "--soc", soc, "--json")
    assert status == 2
    assert json.loads(out) == {"soc": soc, "product_line": None, "ops": NONE,
                               "layouts": {"ReshapeAndCacheOperation": []}, "kernels_run": NONE}
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
    by_id = {line["id"]: line for line in whole["product_lines"]}
    for _, line, ops, layouts in ANSWERS:
        assert {k: by_id[line][k] for k in ("ops", "layouts", "kernels_run")} == {
            "ops": ops, "layouts": {"ReshapeAndCacheOperation": layouts}, "kernels_run": KERNELS_RUN.get(line, NONE)}
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
    assert report["intra_op_threads"] == torch.get_num_threads()


def test_info_says_how_many_threads_the_host_paths_use(capsys: pytest.CaptureFixture[str]) -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        status, out, _ = run(capsys, "info")
    finally:
        torch.set_num_threads(before)
    assert status == 0
    assert "host threads    3 (torch's intra-op threads: the host paths of CPU calls run over them)" in out


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


def test_info_names_an_unknown_soc_and_keeps_the_columns_apart(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(device.SOC_ENV, "Ascend999X")
    monkeypatch.delenv("ASCEND_KV_BACKEND", raising=False)
    status, out, _ = run(capsys, "info")
    assert status == 0
    assert "SoC             Ascend999X (from ASCEND_KV_SOC): not a known Ascend SoC" in out and "None" not in out
    for op in support.OPERATIONS:
        (line,) = [line for line in out.splitlines() if line.startswith(op)]
        assert line.split()[:2] == [op, "fallback:"]


def test_info_says_sim_cannot_run_without_a_compiler(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ascend_kv.backends import sim

    monkeypatch.setattr(sim, "_loaded", None)                       # not yet loaded in this process
    monkeypatch.setenv("CXX", "no-such-c++")                        # and no C++ compiler of that name
    monkeypatch.setenv("ASCEND_KV_BACKEND", "sim")
    status, out, _ = run(capsys, "info")
    assert status == 0
    for op in support.OPERATIONS:
        assert f"{op} cannot run: the host build of the kernels is not available: it builds the AscendC kernels " \
               "for the host with a C++ compiler, and 'no-such-c++' was not found (install g++ or clang++, or set " \
               "CXX)" in " ".join(out.split())
    status, out, _ = run(capsys, "info", "--json")
    assert {d["backend"] for d in json.loads(out)["ops"].values()} == {None}


def test_info_hint_names_the_build_script_of_this_checkout(capsys: pytest.CaptureFixture[str]) -> None:
    """From a source checkout the hint names its build script (test_packaging checks the wheel's hint)."""
    _, out, _ = run(capsys, "info", "--json")
    reason = json.loads(out)["kernel_library"]["reason"]
    assert str(Path(__file__).resolve().parents[1] / "scripts" / "build_npu.sh") in reason


@pytest.mark.parametrize(("argv", "variable", "value", "message"), [
    (["demo", "--quick", "--repeats", "1", "--backend", "npu"], None, None,
     "backend 'npu' cannot run KVCacheOperation on cpu: the tensors are on cpu, not on an Ascend NPU"),
    (["demo", "--quick", "--repeats", "1"], "ASCEND_KV_BACKEND", "bogus",
     "ASCEND_KV_BACKEND must be one of auto, npu, sim, fallback, got 'bogus'"),
    (["demo", "--quick", "--repeats", "1"], "ASCEND_KV_VALIDATE", "ful",
     "ASCEND_KV_VALIDATE must be one of device, full, got 'ful'"),
    (["info"], "ASCEND_KV_VALIDATE", "fulll", "ASCEND_KV_VALIDATE must be one of device, full, got 'fulll'"),
])
def test_setting_and_backend_errors_are_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str], variable: str | None,
    value: str | None, message: str,
) -> None:
    monkeypatch.delenv("ASCEND_KV_BACKEND", raising=False)
    if variable is not None:
        monkeypatch.setenv(variable, value)
    status, _, err = run(capsys, *argv)
    assert (status, err) == (2, f"ascend-kv: {message}\n")


def test_a_closed_pipe_is_not_an_error(tmp_path: Path) -> None:
    """`ascend-kv demo | head`: the reader goes away; the command stops quietly, exit 0."""
    script = str(Path(sys.executable).parent / "ascend-kv")
    child = subprocess.Popen([script, "demo", "--quick", "--repeats", "1"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()                                          # gone before the first line is written
    err = child.stderr.read()
    assert (child.wait(), err) == (0, "")


def _operation_named(text: str, op: str) -> bool:
    """``op`` (an ATB name) appears in ``text`` as itself or as its function's name."""
    return op in text or next(name for name, atb in policy._OP_NAMES.items() if atb == op) in text


def test_texts_name_every_operation(capsys: pytest.CaptureFixture[str]) -> None:
    """Help texts, the demo script, the package's description and docstring: no text from the days of two operations."""
    from ascend_kv.tools import demo

    helps = {}
    for name, main, argv in (("ascend-kv --help", cli.main, ["--help"]), ("demo --help", demo.main, ["--help"])):
        with pytest.raises(SystemExit):
            main(argv)
        helps[name] = capsys.readouterr().out
    root = Path(__file__).resolve().parents[1]
    description = re.search(r'^description = "(.*)"$', (root / "pyproject.toml").read_text(), re.MULTILINE)
    assert description is not None
    listing = {"ascend-kv --help": helps["ascend-kv --help"], "pyproject description": description.group(1),
               "ascend_kv docstring": ascend_kv.__doc__ or ""}
    texts = {**listing, "demo --help": helps["demo --help"], "scripts/demo.sh": (root / "scripts" / "demo.sh").read_text()}
    for name, text in texts.items():
        assert not re.search(r"\bboth\b|\btwo operations\b", text), name
    for name, text in listing.items():
        assert [op for op in support.OPERATIONS if not _operation_named(text, op)] == [], name


@pytest.mark.parametrize("command", ["demo", "bench"])
def test_demo_and_bench_get_the_remaining_arguments(monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    seen: list[list[str]] = []
    module = SimpleNamespace(main=lambda argv: seen.append(argv) or 3)
    monkeypatch.setitem(sys.modules, f"ascend_kv.tools.{command}", module)
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


def test_bench_overhead_is_a_mode_of_bench(capsys: pytest.CaptureFixture[str]) -> None:
    """``ascend-kv bench --help`` names the mode; ``ascend-kv bench --overhead --help`` shows the mode's own options."""
    for argv, expected in ((["bench", "--help"], "--overhead"),
                           (["bench", "--overhead", "--help"], "usage: ascend-kv bench --overhead")):
        with pytest.raises(SystemExit) as exited:
            cli.main(argv)
        assert exited.value.code == 0
        assert expected in capsys.readouterr().out
    assert cli.main(["bench", "--overhead", "--rounds", "0"]) == 2
    assert "--rounds, --calls and --swept-rounds must be >= 1" in capsys.readouterr().err


def test_every_public_operation_is_listed_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    """policy.FUNCTIONS is every public operation (the lower-case callables of ascend_kv that take tensors), and
    ``ascend-kv --help`` names each."""
    helpers = {"explain", "use_backend", "validate", "nd_to_nz", "nz_to_nd", "state_slot_bytes",
               "allocate_transfer_caches"}
    public = {name for name in ascend_kv.__all__ if name.islower() and name not in helpers}
    assert set(policy.FUNCTIONS) == public
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert all(re.search(rf"\b{name}\b", text) for name in policy.FUNCTIONS)


@pytest.mark.parametrize(("soc", "op", "backend_word", "status"), [
    ("Ascend910B3", "reshape_and_cache", "runs on fallback: the kernel library is not loaded", 0),  # no CANN build here
    ("Ascend310P3", "kv_cache", "runs on fallback: the kernels do not support KVCacheOperation on Atlas inference", 0),
    ("Ascend999X", "kv_cache", "runs on fallback: SoC 'Ascend999X' is not a known Ascend SoC", 2),
])
def test_explain_answers_for_a_soc_anywhere(capsys: pytest.CaptureFixture[str], soc: str, op: str,
                                            backend_word: str, status: int) -> None:
    code, out, _ = run(capsys, "explain", op, "--soc", soc)
    expected = ascend_kv.explain(op, soc=soc)
    assert code == status and out.splitlines()[0] == str(expected) and backend_word in out
    assert str(expected).startswith(f"{support.OPERATIONS[0] if op == 'kv_cache' else 'ReshapeAndCacheOperation'} "
                                    f"on an NPU ({soc}) (auto): ")
    code, out, _ = run(capsys, "explain", op, "--soc", soc, "--json")
    assert json.loads(out)["reason"] == expected.reason and json.loads(out)["soc"] == soc


def test_explain_on_this_host_and_its_refusals(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "explain", "block_copy", "--device", "cpu", "--backend", "fallback")
    assert code == 0 and out.splitlines()[0] == str(ascend_kv.explain("block_copy", "cpu", "fallback"))
    code, out, err = run(capsys, "explain", "swap_tokens")
    assert code == 2 and out == "" and err.startswith("ascend-kv: op must be one of KVCacheOperation")
    code, _, err = run(capsys, "explain", "kv_cache", "--soc", " ")
    assert code == 2 and "soc must be a SoC name" in err
    with pytest.raises(ValueError, match="pass device or soc, not both"):
        ascend_kv.explain("kv_cache", "cpu", soc="Ascend910B3")
