"""What the distribution ships: ascend_kv and its subpackages, no generic top-level names, and the C++
sources the operator library and the kernels' host build are compiled from on first use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # pip builds a wheel
def test_wheel_holds_only_the_ascend_kv_package(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True,
    )
    (wheel,) = tmp_path.glob("ascend_kv-*.whl")
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert tops == {"ascend_kv", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}
    names = zipfile.ZipFile(wheel).namelist()
    sources = [p.relative_to(ROOT).as_posix() for folder in ("csrc", "cpu_fallback", "ascendc")
               for p in (ROOT / folder).rglob("*") if p.suffix in (".h", ".cpp") and "tests" not in p.parts]
    assert sources and {f"ascend_kv/_sources/{path}" for path in sources} <= set(names)
    assert "ascend_kv/py.typed" in names
    assert {"ascend_kv/compat/torch_npu.py", "ascend_kv/testing.py"} <= set(names)
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[pytest11]" in text and "ascend_kv.testing = ascend_kv.testing" in text
    (license_file,) = [name for name in names if name.endswith((".dist-info/licenses/LICENSE", ".dist-info/LICENSE"))]
    assert b"Apache License\n                           Version 2.0" in zipfile.ZipFile(wheel).read(license_file)
    # Installed from the wheel (the operator library compiled from the wheel's sources: the same files, so
    # the cached build), `ascend-kv info` gives a library hint that is true there: no scripts/ folder.
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True)
    env = {**os.environ, "PYTHONPATH": str(target)}
    done = subprocess.run([sys.executable, "-m", "ascend_kv", "info", "--json"], capture_output=True, text=True,
                          env=env, cwd=tmp_path, check=True)
    library = json.loads(done.stdout)["kernel_library"]
    assert library["path"].startswith(str(target))
    assert "build_npu.sh" not in library["reason"]
    assert "installed from its source on a host with CANN" in library["reason"] and "pip install" in library["reason"]


def test_no_top_level_name_but_ascend_kv(tmp_path: Path) -> None:
    """The source folders csrc/, cpu_fallback/ and ascendc/ ship as data under ascend_kv: none is importable."""
    code = ("import importlib.util, ascend_kv;"
            "assert all(importlib.util.find_spec(n) is None for n in ('csrc', 'cpu_fallback', 'ascendc'))")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path)
