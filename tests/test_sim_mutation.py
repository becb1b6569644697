"""The instrument catches what it must: an off-by-one forced into a kernel's GM offset makes
the sim fail with a message from the host model that names the tensor and the offset.

The kernels are copied, one offset in each is shifted by one row, and the copy is built
(into a private cache) and run through the public API."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch
from cases import ND, NZ, kv_cache_case, paged_case

import ascend_kv
from ascend_kv.backends import sim

MUTATIONS = {
    "kernels/kv_cache.cpp": ("static_cast<uint64_t>(readStart) + lo;", "static_cast<uint64_t>(readStart) + lo + 1;"),
    "kernels/paged_cache_load.cpp": ("static_cast<uint64_t>(outStart) + lo;", "static_cast<uint64_t>(outStart) + lo + 1;"),
}


@pytest.fixture(scope="module")
def mutant_sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mutant") / "ascendc"
    shutil.copytree(sim.source_root(), root)
    for name, (original, mutated) in MUTATIONS.items():
        text = (root / name).read_text()
        assert text.count(original) == 1, f"{name} changed: update the mutation"
        (root / name).write_text(text.replace(original, mutated))
    return root


@pytest.fixture
def mutant_sim(mutant_sources: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(sim, "source_root", lambda: mutant_sources)
    monkeypatch.setattr(sim, "_library", None)
    monkeypatch.setenv("ASCEND_KV_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "mutant-cache"))
    monkeypatch.setenv("ASCEND_KV_SIM_CORES", "1")
    with ascend_kv.use_backend("sim"):
        yield


def overrun(message: str, access: str, tensor: str) -> tuple[int, int, int]:
    """``(buffer, offset, count)`` of the model's report, which must name ``tensor``."""
    found = re.search(rf"GM {access} out of bounds: tensor '{tensor}' \(buffer of (\d+) elements\) offset (\d+) count (\d+)",
                      message)
    assert found is not None, message
    return tuple(int(n) for n in found.groups())  # type: ignore[return-value]


def test_kv_cache_read_past_new_kv_is_named(mutant_sim) -> None:
    """5 rows of 64 float16 = 640 bytes; the shifted copy reads them from byte 128 (one row late)."""
    case = kv_cache_case(torch.float16, [5], [5], hidden=64)
    with pytest.raises(RuntimeError) as info:
        ascend_kv.kv_cache(*case.args)
    assert overrun(str(info.value), "read", "new_kv") == (640, 128, 640)


@pytest.mark.parametrize("layout", [ND, NZ])
def test_paged_write_past_key_is_named(mutant_sim, layout) -> None:
    """7 rows of 32 float16 = 448 bytes; the shifted copy writes past the end of ``key``."""
    case = paged_case(layout, [7])
    with pytest.raises(RuntimeError) as info:
        ascend_kv.paged_cache_load(*case.args, **case.kwargs)
    buffer, offset, count = overrun(str(info.value), "write", "key")
    assert buffer == 448 and offset >= 64 and offset + count > buffer


def test_the_unmutated_kernels_pass_the_same_calls() -> None:
    """Control: the same calls on the real sources raise nothing."""
    with ascend_kv.use_backend("sim"):
        ascend_kv.kv_cache(*kv_cache_case(torch.float16, [5], [5], hidden=64).args)
        for layout in (ND, NZ):
            case = paged_case(layout, [7])
            ascend_kv.paged_cache_load(*case.args, **case.kwargs)
