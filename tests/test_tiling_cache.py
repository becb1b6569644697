"""The NPU build's cache of device tilings (ascendc/host/tiling_cache.h), run on the host.

A tiling holds per-call sizes, so an eager server with varying prefill lengths makes a new one
per length: the cache keeps at most ``kTilingCacheEntries`` (256) that may go, least recently used
first, and keeps for good the tilings a graph capture used. One C++ driver
(ascendc/sim/tests/tiling_cache_cases.cpp) holds the cases; it is compiled once per session."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "ascendc" / "sim" / "tests" / "tiling_cache_cases.cpp"
BOUND = 256


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cxx = shutil.which("g++")
    assert cxx is not None, "the tiling-cache tests need g++ on PATH"
    exe = tmp_path_factory.mktemp("tiling_cache") / "tiling_cache_cases"
    cmd = [cxx, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-I", str(ROOT / "ascendc" / "host"), str(DRIVER),
           "-o", str(exe)]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return exe


def run(driver: Path, case: str) -> dict[str, int]:
    done = subprocess.run([str(driver), case], check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return {key: int(value) for key, value in (line.split("=", 1) for line in done.stdout.splitlines())}


def test_varying_prefill_lengths_stay_within_the_bound(driver: Path) -> None:
    """10,000 calls, each with a new token count: every one made, never more than 256 held."""
    out = run(driver, "varying_prefill")
    assert out == {"size": BOUND, "largest": BOUND, "live": BOUND, "made": 10_000}


def test_the_least_recently_used_tiling_goes_first(driver: Path) -> None:
    """A full cache, its oldest entry used again, one new entry: the second oldest is the one dropped."""
    out = run(driver, "recently_used_stay")
    assert (out["oldest_remade"], out["second_oldest_remade"], out["largest"]) == (0, 1, BOUND)


def test_the_tilings_of_a_captured_graph_are_kept_for_good(driver: Path) -> None:
    """Ten tilings used while capturing survive 10,000 eager calls (a replay reads them) and are
    never made again; the eager ones stay within the bound beside them."""
    out = run(driver, "captured_are_kept")
    assert (out["captured_remade"], out["size"], out["live"]) == (0, BOUND + 10, BOUND + 10)


def test_a_tiling_held_by_a_queued_launch_outlives_its_drop(driver: Path) -> None:
    out = run(driver, "held_past_a_drop")
    assert (out["held_id"], out["live_while_held"], out["live"]) == (7, BOUND + 1, BOUND)
