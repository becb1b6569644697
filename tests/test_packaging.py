"""What the distribution ships: ascend_kv and its subpackages, no generic top-level names, and the C++
sources the operator library and the kernels' host build are compiled from on first use."""

from __future__ import annotations

import json
import os
import shutil
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
    assert {"ascend_kv/compat/torch_npu.py", "ascend_kv/testing.py", "ascend_kv/transfer/agent.py"} <= set(names)
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


def test_a_clone_named_ascend_kv_beside_a_script_is_the_package_it_holds(tmp_path: Path) -> None:
    """A script run from the folder holding a clone named ``ascend_kv``: ``import ascend_kv`` finds the clone's
    root first, which becomes the package inside it (not an empty namespace without the functions); the
    operator library is the cached one (a build is named by its sources' names and bytes)."""
    clone = tmp_path / "work" / "ascend_kv"
    clone.mkdir(parents=True)
    shutil.copy(ROOT / "__init__.py", clone / "__init__.py")
    for folder in ("ascend_kv", "csrc", "cpu_fallback", "ascendc"):
        shutil.copytree(ROOT / folder, clone / folder, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    script = clone.parent / "step.py"
    script.write_text("import torch, ascend_kv\n"
                      "past = torch.zeros(1, 1, 4, 16)\n"
                      "ascend_kv.kv_cache(torch.ones(2, 16), 0, past, torch.tensor([3]), torch.tensor([2]))\n"
                      "print(ascend_kv.__file__, int(past.sum()))\n")
    ran = subprocess.run([sys.executable, str(script)], cwd=clone.parent, capture_output=True, text=True, check=False)
    assert (ran.returncode, ran.stdout) == (0, f"{clone / 'ascend_kv' / '__init__.py'} 32\n"), ran.stderr
    assert "compiling" not in ran.stderr
    other = subprocess.run([sys.executable, "-c", "import ascend_kv; print(ascend_kv.__file__)"], cwd=tmp_path,
                           capture_output=True, text=True, check=False)
    assert other.returncode == 0 and other.stdout.endswith("/ascend_kv/__init__.py\n"), other.stderr
    assert str(clone) not in other.stdout  # from elsewhere: the installed package
