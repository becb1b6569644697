"""`ascend-kv demo` runs every scenario and checks each against the reference."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ascend_kv.tools import demo


@pytest.mark.parametrize("backend", ["fallback", "sim"])
def test_demo_quick_matches_reference(backend: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert demo.main(["--quick", "--repeats", "1", "--backend", backend]) == 0
    out = capsys.readouterr().out
    assert out.count("ok   ") == len(demo.scenarios(16, __import__("torch").Generator())) == 16
    assert "FAIL" not in out and f"     {backend}:" in out
    assert "all calls match the reference" in out


def test_demo_reports_a_mismatch(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A backend that writes wrong bytes makes the demo fail (the check is real)."""
    import ascend_kv.cpu_fallback as fallback

    real = fallback.kv_cache

    def off_by_one(plan):  # write every token one layer too low
        real(plan)
        plan.args.past[plan.layer_id - 1].fill_(1)

    monkeypatch.setattr(fallback, "kv_cache", off_by_one)
    assert demo.main(["--quick", "--repeats", "1", "--backend", "fallback"]) == 1
    assert "FAIL kv_cache" in capsys.readouterr().out


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
    assert len(allocating) == 4 and len(blocks) == 16  # 12 for the first three operations, 4 block copies
    for block in allocating:
        assert "(allocating: the time includes zero-filling the new key and value)" in block[1]
        assert block[2].startswith("     into given key/value: ") and block[2].endswith("bit-exact vs reference: yes")
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
    assert "FAIL paged ND 8 x" in out and "into given key/value: " in out and "bit-exact vs reference: NO" in out


@pytest.mark.slow  # builds the kernels for the host
def test_the_sims_first_build_says_what_it_is_doing(tmp_path: Path) -> None:
    """The first run on a fresh cache builds the host library (seconds) and says so once on stderr; the next says nothing."""
    script = str(Path(sys.executable).parent / "ascend-kv")
    env = {**os.environ, "ASCEND_KV_CACHE_DIR": str(tmp_path / "cache")}
    for run, expected in ((1, 1), (2, 0)):
        done = subprocess.run([script, "demo", "--quick", "--repeats", "1", "--backend", "sim"], capture_output=True,
                              text=True, env=env, cwd=tmp_path, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stderr.count("ascend_kv: building the AscendC kernels for the host (backend 'sim')") == expected, run
