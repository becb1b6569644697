"""`ascend-kv demo` runs every scenario and checks each against the reference."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import ascend_kv
from ascend_kv.dispatch import policy
from ascend_kv.operators import library
from ascend_kv.tools import demo

#: Where the operators count a call the policy gave to each host backend (torch.ops.ascend_kv._runs()).
PLACE = {"fallback": "host paths", "sim": "sim"}


@pytest.mark.parametrize("backend", ["fallback", "sim"])
def test_demo_quick_matches_reference(backend: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert demo.main(["--quick", "--repeats", "1", "--backend", backend]) == 0
    out = capsys.readouterr().out
    built = [scenario for build in demo.scenarios(16, torch.Generator()) for scenario in build()]
    assert out.count("ok   ") == len(built) == 19
    assert "FAIL" not in out and "all calls match the reference and ran where explain() said" in out
    blocks = scenario_blocks(out)
    # the C8 decode step (quantized writes, dequantized reads) runs where the others do: the sim has the
    # quantizing kernels
    assert len([b for b in blocks if " C8 " in b[0]]) == 2
    # every operation with a backend choice: the backend explain() names, where the operators counted the call
    # (the counts, not the decision), and explain()'s reason; swap_blocks, which has no kernel, says so
    for block in blocks[:-1]:
        assert block[1].startswith(f"     {backend}, ran on {PLACE[backend]}: "), block
        assert block[-1] == "     why: chosen explicitly (ASCEND_KV_BACKEND or use_backend)", block
    assert blocks[-1][0].startswith("ok   swap_blocks") and blocks[-1][1].startswith("     host paths: ")
    assert blocks[-1][-1].startswith("     why: swap_blocks has no kernel on any backend")
    assert f"torch intra-op threads: {torch.get_num_threads()}" in out


def test_demo_says_why_auto_runs_the_fallback(capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a backend forced, each call's reason is explain()'s for its device: CPU tensors, no NPU kernels."""
    monkeypatch.delenv("ASCEND_KV_BACKEND", raising=False)
    assert demo.main(["--quick", "--repeats", "1"]) == 0
    blocks = scenario_blocks(capsys.readouterr().out)
    assert len(blocks) == 19
    for block in blocks[:-1]:
        assert block[1].startswith("     fallback, ran on host paths: ")
        assert block[-1] == f"     why: {ascend_kv.explain(block_op(block), 'cpu').reason}"
        assert block[-1] == "     why: the tensors are on cpu, not on an Ascend NPU"


def block_op(block: list[str]) -> str:
    """The operation of a scenario block, from its name."""
    name = block[0][5:]
    return next(op for prefix, op in (("kv_cache", "kv_cache"), ("paged write", "reshape_and_cache"),
                                      ("paged", "paged_cache_load"), ("block_copy", "block_copy"),
                                      ("copy_blocks", "copy_blocks"), ("scatter_blocks", "scatter_blocks")) if name.startswith(prefix))


def test_demo_reports_a_mismatch(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A call that writes wrong bytes makes the demo fail (the check is real)."""
    real = demo.kv_cache

    def off_by_one(new_kv, layer_id, past, *rest):  # also writes the layer below the one asked for
        out = real(new_kv, layer_id, past, *rest)
        past[layer_id - 1].fill_(1)
        return out

    monkeypatch.setattr(demo, "kv_cache", off_by_one)
    assert demo.main(["--quick", "--repeats", "1", "--backend", "fallback"]) == 1
    out = capsys.readouterr().out
    assert out.count("FAIL kv_cache") == 3 and "bit-exact vs reference: NO" in out
    assert "3 calls differ from the reference or ran elsewhere than explain() said" in out


def test_demo_reports_a_call_that_ran_elsewhere(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The place printed is the operators' count, not the decision: a decision that does not match where
    the call ran fails the scenario, though its bytes are right."""
    real = policy.explain

    def says_sim(op, device=None, backend=None):
        return dataclasses.replace(real(op, device, backend), backend="sim")

    monkeypatch.setattr(policy, "explain", says_sim)
    assert demo.main(["--quick", "--repeats", "1", "--backend", "fallback"]) == 1
    blocks = scenario_blocks(capsys.readouterr().out)
    assert [b[0][:4] for b in blocks] == ["FAIL"] * 18 + ["ok  "]            # swap_blocks asks no policy
    assert blocks[0][1].startswith("     sim, but ran on host paths (explain() said sim): ")
    assert blocks[0][1].endswith("bit-exact vs reference: yes")


def scenario_blocks(out: str) -> list[list[str]]:
    """The demo's output, one list of lines per scenario (its ``ok``/``FAIL`` line first)."""
    blocks: list[list[str]] = []
    for line in out.splitlines():
        if line.startswith(("ok   ", "FAIL ")):
            blocks.append([line])
        elif blocks and line.startswith("     "):
            blocks[-1].append(line)
    return blocks


def test_allocating_loads_show_the_into_form_beside_them(capsys: pytest.CaptureFixture[str]) -> None:
    """An allocating paged load's time includes zero-filling its new outputs: the demo says so and
    times the same call into given key and value, checked too."""
    assert demo.main(["--quick", "--repeats", "1", "--backend", "fallback"]) == 0
    blocks = scenario_blocks(capsys.readouterr().out)
    allocating = [b for b in blocks if b[0][5:].startswith(("paged ND", "paged NZ")) and "given outputs" not in b[0]]
    assert len(allocating) == 4 and len(blocks) == 19  # 12 for the first three operations, 2 C8, 5 block moves
    for block in allocating:
        assert "(allocating: the time includes zero-filling the new key and value)" in block[1]
        assert block[2].startswith("     into given key/value, ran on host paths: ")
        assert block[2].endswith("bit-exact vs reference: yes")
    others = [b for b in blocks if b not in allocating]
    assert not any("into given key/value" in line or "allocating:" in line for b in others for line in b)


def test_a_wrong_into_form_fails_the_demo(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The into form is checked against the reference like the allocating one."""
    real = demo.paged_cache_load

    def spoiled(*args, **kwargs):
        out = real(*args, **kwargs)
        if "key" in kwargs:                                     # outputs given: spoil one byte of them
            kwargs["key"].view(-1)[0] += 1
        return out

    monkeypatch.setattr(demo, "paged_cache_load", spoiled)
    assert demo.main(["--quick", "--repeats", "1", "--backend", "fallback"]) == 1
    out = capsys.readouterr().out
    (block,) = [b for b in scenario_blocks(out) if b[0].startswith("FAIL paged ND 8 x")]
    assert block[1].endswith("bit-exact vs reference: yes (allocating: the time includes zero-filling the new key "
                             "and value)")
    assert block[2].startswith("     into given key/value, ran on host paths: ")
    assert block[2].endswith("bit-exact vs reference: NO")


@pytest.mark.slow  # builds the kernels for the host
def test_the_sims_first_build_says_what_it_is_doing(tmp_path: Path) -> None:
    """The first run on a fresh cache builds the host library (seconds), says so once on stderr and how long it took;
    the next says nothing."""
    script = str(Path(sys.executable).parent / "ascend-kv")
    env = {**os.environ, "ASCEND_KV_CACHE_DIR": str(tmp_path / "cache")}
    operators = library.load()                      # the operator library, cached already: only the sim is built
    (tmp_path / "cache").mkdir()
    shutil.copy(operators, tmp_path / "cache" / operators.name)
    for run, expected in ((1, 1), (2, 0)):
        done = subprocess.run([script, "demo", "--quick", "--repeats", "1", "--backend", "sim"], capture_output=True,
                              text=True, env=env, cwd=tmp_path, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stderr.count("ascend_kv: compiling the AscendC kernels for the host (backend 'sim')") == expected, run
        assert len(re.findall(r"ascend_kv: compiled the AscendC kernels for the host \(backend 'sim'\) in \d+ s\n",
                              done.stderr)) == expected, run


def test_scenarios_are_built_only_when_reached() -> None:
    """Listing the demo's scenarios draws no random inputs (each group makes its tensors when it runs, and
    they are freed after), so the first row comes at once and the peak memory is one scenario's."""
    g = torch.Generator().manual_seed(0)
    state = g.get_state()
    builders = demo.scenarios(1, g)
    assert len(builders) == 18 and torch.equal(g.get_state(), state)  # 19 scenarios, the C8 pair built together
    (first,) = builders[0]()
    assert not torch.equal(g.get_state(), state) and first.name.startswith("kv_cache prefill")


def test_a_backend_that_cannot_run_is_refused_before_any_work(capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    monkeypatch.setattr(demo, "kv_cache_scenario", lambda *a, **k: built.append("kv_cache"))
    with pytest.raises(ascend_kv.BackendUnavailableError, match=r"^backend 'npu' cannot run KVCacheOperation on cpu: "
                                                                r"the tensors are on cpu, not on an Ascend NPU$"):
        demo.main(["--quick", "--backend", "npu"])
    assert capsys.readouterr().out == "" and not built
