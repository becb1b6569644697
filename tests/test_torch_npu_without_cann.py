"""torch_npu installed, CANN missing (docs/hardware.md): checked for real in its own cached venv.

Runs ``scripts/check_torch_npu_without_cann.sh``, which builds (once) a venv with the newest
torch_npu (2.14.0) and the torch it pins but no CANN, installs this checkout into it, and checks that
plain ``import torch`` fails there while ``import ascend_kv``, ``ascend-kv info`` (naming the
missing library), ``ascend-kv support-matrix`` and the demo all work on the fallback.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a virtual environment of its own, with wheels from the package index

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "check_torch_npu_without_cann.sh"


def test_every_entry_point_works_with_torch_npu_but_without_cann() -> None:
    result = subprocess.run(["bash", str(SCRIPT)], check=False, capture_output=True, text=True, timeout=1800)
    report = result.stdout
    assert result.returncode == 0, report[-6000:] + result.stderr[-3000:]
    for check in (
        "the trap is real: plain 'import torch' fails here",
        "python -c 'import ascend_kv'",
        "ascend-kv info names the missing library",
        "ascend-kv support-matrix --soc Ascend910B3 --json",
        "ascend-kv demo --quick",
    ):
        assert f"ok    {check}" in report, report[-6000:]
    assert "FAIL" not in report
    assert "libhccl.so" in report  # the reason, verbatim
