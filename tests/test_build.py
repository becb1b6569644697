"""The builder of the C++ libraries (ascend_kv/operators/build.py): how sources share translation units."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ascend_kv.operators import build, library


def sources(tmp_path: Path, sizes: list[int]) -> list[Path]:
    paths = []
    for i, size in enumerate(sizes):
        path = tmp_path / f"s{i}.cpp"
        path.write_text("x" * size)
        paths.append(path)
    return paths


@pytest.mark.parametrize("count", [1, 2, 3, 5, 8])
def test_units_hold_every_source_once_in_order_and_about_as_large(tmp_path: Path, count: int) -> None:
    files = sources(tmp_path, [900, 100, 400, 400, 300, 50])
    shares = build.units(files, count)
    assert len(shares) == min(count, len(files))
    assert sorted(path for share in shares for path in share) == sorted(files)
    for share in shares:
        assert share == sorted(share, key=files.index)
    sizes = [sum(path.stat().st_size for path in share) for share in shares]
    assert max(sizes) - min(sizes) <= 900          # greedy by size: no share exceeds another by more than a file


def test_units_of_no_sources_or_no_cpus() -> None:
    assert build.units([], 4) == []
    assert build.units([Path(__file__)], 0) == [[Path(__file__)]]


def test_only_a_library_that_allows_it_shares_units() -> None:
    assert library.definition().shared_units
    from ascend_kv.backends import sim
    assert not sim.definition().shared_units           # the kernel sources each stand alone, as on the NPU


@pytest.mark.slow
def test_the_operator_library_builds_as_one_unit(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                  capfd: pytest.CaptureFixture[str]) -> None:
    """Each CPU count shares the sources out differently; as one unit every internal name must be unique,
    so every sharing builds."""
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    monkeypatch.setenv("ASCEND_KV_CACHE_DIR", str(tmp_path))
    definition = library.definition()
    path = build.build(definition)
    assert path.is_file() and path.parent == tmp_path
    assert f"({len(definition.sources)} files in 1 translation unit)" in capfd.readouterr().err
