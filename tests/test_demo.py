"""`ascend-kv demo` runs every scenario and checks each against the reference."""

from __future__ import annotations

import pytest

from ascend_kv import demo


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

    def off_by_one(call):  # write every token one layer too low
        real(call)
        call.past[call.layer_id - 1].fill_(1)

    monkeypatch.setattr(fallback, "kv_cache", off_by_one)
    assert demo.main(["--quick", "--repeats", "1", "--backend", "fallback"]) == 1
    assert "FAIL kv_cache" in capsys.readouterr().out
