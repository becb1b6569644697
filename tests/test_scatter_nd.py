"""scatter_nd_update (docs/semantics.md §15.1) through the public function and torch_npu's facade: every
backend bit for bit against the plain reference, its rules at their boundaries, compiled and eager.

Caches come in the layouts sparse-attention engines allocate (tests/scatter_cases.py): padded pages,
column slices, per-layer views, transposed rows; every byte of the base is compared, so bytes outside
the cache (page padding, other columns) must not change.
"""

from __future__ import annotations

import doctest

import npu_fixtures
import pytest
import torch
from cases import bits_equal
from hypothesis import assume, given
from hypothesis import strategies as st
from npu_fixtures import NPU, SUPPORTED, run
from scatter_cases import ScatterCase, scatter_cases

import ascend_kv
from ascend_kv.api import sparse_ops
from ascend_kv.compat import torch_npu
from ascend_kv.dispatch import policy
from ascend_kv.tools import reference

OPS = torch.ops.ascend_kv
kernel_library, soc = npu_fixtures.kernel_library, npu_fixtures.soc  # the fake NPU's route (fixtures)


def expected(case: ScatterCase) -> torch.Tensor:
    """The base after the reference's writes (on the host)."""
    base = case.base.clone()
    reference.scatter_nd_update(case.var(base), case.indices(), case.updates)
    return base


# ----------------------------------------------------------------------------- the host paths and the sim


@given(case=scatter_cases())
def test_matches_the_reference_on_the_host(backend: str, case: ScatterCase) -> None:
    want = expected(case)
    assert ascend_kv.scatter_nd_update(case.var(), case.indices(), case.updates) is not None
    assert bits_equal(case.base, want)


@pytest.mark.parametrize("cores", [1, 2, 7, 40])
@given(case=scatter_cases())
def test_the_kernel_matches_the_reference_at_every_core_count(monkeypatch: pytest.MonkeyPatch, cores: int,
                                                              case: ScatterCase) -> None:
    monkeypatch.setenv("ASCEND_KV_SIM_CORES", str(cores))
    want = expected(case)
    with ascend_kv.use_backend("sim"):
        ascend_kv.scatter_nd_update(case.var(), case.indices(), case.updates)
    assert bits_equal(case.base, want)


@given(case=scatter_cases())
def test_int32_and_int64_indices_write_the_same(case: ScatterCase) -> None:
    bases = []
    for dtype in (torch.int32, torch.int64):
        base = case.base.clone()
        ascend_kv.scatter_nd_update(case.var(base), case.indices(dtype=dtype), case.updates)
        bases.append(base)
    assert bits_equal(*bases)


def test_a_destination_named_twice_takes_the_last_row(backend: str) -> None:
    cache = torch.zeros(2, 4, 3)
    rows = torch.arange(12.0).reshape(4, 3)
    ascend_kv.scatter_nd_update(cache, torch.tensor([[1, 2], [0, 0], [1, 2], [-1, 2]]), rows)
    assert cache[1, 2].tolist() == rows[2].tolist() and cache[0, 0].tolist() == rows[1].tolist()
    assert cache.count_nonzero() == 6  # rows 1 and 2 only: row 0 is replaced, row 3 is padding


def test_many_rows_spread_over_threads_keep_the_last_writer() -> None:
    """A call large enough for every thread: flat rows named up to three times each."""
    var = torch.zeros(512, 64, dtype=torch.float16)
    index = torch.randint(0, 512, (2048,), generator=torch.Generator().manual_seed(0))
    rows = torch.randn(2048, 64).to(torch.float16)
    want = var.clone()
    reference.scatter_nd_update(want, index, rows)
    ascend_kv.scatter_nd_update(var, index, rows)
    assert bits_equal(var, want)


def test_rows_of_more_strided_loops_than_a_piece_holds() -> None:
    base = torch.randn(6, 3, 3, 3, 3, 6)
    var = base[:, ::2, ::2, ::2, ::2, ::3]  # [6, 2, 2, 2, 2, 2], no two dims merge
    rows = torch.randn(3, 2, 2, 2, 2, 2)
    want = base.clone()
    reference.scatter_nd_update(want[:, ::2, ::2, ::2, ::2, ::3], torch.tensor([4, 1, 4]), rows)
    ascend_kv.scatter_nd_update(var, torch.tensor([4, 1, 4]), rows)
    assert bits_equal(base, want)


# ----------------------------------------------------------------------------- the NPU route (fake NPU)


@pytest.mark.parametrize("index_on", ["device", "host"])
@given(case=scatter_cases())
def test_on_the_npu_one_launch_and_nothing_read_back(soc: str, index_on: str, case: ScatterCase) -> None:
    assume(soc != SUPPORTED or case.in_kernel_domain())
    want = expected(case)
    base = case.base.to(NPU)
    var, updates = case.var(base), case.updates.to(NPU)
    index = case.indices(NPU if index_on == "device" else "cpu")
    seen = run(lambda: ascend_kv.scatter_nd_update(var, index, updates))
    assert bits_equal(base.cpu(), want)
    assert seen.transfers == 0 and seen.blocking_uploads == 0
    writes = len(case.tuples) > 0 and var.numel() > 0
    assert seen.uploads == (1 if index_on == "host" and case.tuples else 0)
    assert seen.launches == (1 if soc == SUPPORTED and writes else 0)


def test_rows_outside_the_kernels_domain_run_on_the_device_fallback(kernel_library: None,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Transposed rows on an A2: the device fallback, with one FallbackWarning, nothing read back."""
    monkeypatch.setenv("ASCEND_KV_SOC", SUPPORTED)
    policy.forget()
    base = torch.randn(4, 3, 5)
    want = base.clone()
    rows = torch.randn(2, 5, 3)
    reference.scatter_nd_update(want.transpose(1, 2), torch.tensor([2, 0]), rows)
    on_npu = base.to(NPU)
    before = OPS._runs()[npu_fixtures.DEVICE_FALLBACK]
    seen = run(lambda: ascend_kv.scatter_nd_update(on_npu.transpose(1, 2), torch.tensor([2, 0], device=NPU),
                                                   rows.to(NPU)))
    assert OPS._runs()[npu_fixtures.DEVICE_FALLBACK] == before + 1
    assert seen.transfers == 0 and seen.launches == 0 and seen.warnings == 1
    assert bits_equal(on_npu.cpu(), want)
    policy.forget()


@st.composite
def garbage(draw: st.DrawFn) -> tuple[int, list[list[int]]]:
    """Device index values nobody checked: anything, 64-bit extremes included."""
    k = draw(st.sampled_from([1, 2]))
    values = st.one_of(st.integers(-3, 6), st.sampled_from([-(2**63), 2**63 - 1, 2**31, 2**32 + 1]))
    n = draw(st.integers(0, 6))
    return k, draw(st.lists(st.lists(values, min_size=k, max_size=k), min_size=n, max_size=n))


@given(case=garbage())
def test_out_of_range_device_indices_are_skipped(soc: str, case: tuple[int, list[list[int]]]) -> None:
    k, tuples = case
    var = torch.arange(4 * 3 * 2, dtype=torch.int16).reshape((4, 3, 2) if k == 2 else (12, 2))
    rows = -torch.arange(len(tuples) * 2, dtype=torch.int16).reshape(len(tuples), 2) - 1
    index = torch.tensor(tuples, dtype=torch.int64).reshape(len(tuples), k)
    want = var.clone()
    reference.scatter_nd_update(want, index, rows)
    on_npu = var.to(NPU)
    seen = run(lambda: ascend_kv.scatter_nd_update(on_npu, index.to(NPU), rows.to(NPU)))
    assert seen.transfers == 0
    assert bits_equal(on_npu.cpu(), want)


# ----------------------------------------------------------------------------- rules


def test_rules_at_their_boundaries_write_nothing() -> None:
    var = torch.randn(3, 4, 2)     # [num_blocks = 3, block_size = 4, 2]
    rows1, rows2 = torch.randn(1, 4, 2), torch.randn(1, 2)
    t = torch.tensor
    cases = [
        ((t([2]), rows1), None),                                                          # the last row
        ((t([3]), rows1), (ValueError, r"indices\[0\] = 3 is out of range: var.shape\[0\] = 3")),
        ((t([[2]]), rows1), None),
        ((t([[2, 3]]), rows2), None),                                                     # the last pair
        ((t([[2, 4]]), rows2), (ValueError, r"indices\[0\] = \(2, 4\) is out of range: var.shape\[:2\] = \(3, 4\)")),
        ((t([[3, 0]]), rows2), (ValueError, r"indices\[0\] = \(3, 0\) is out of range")),
        ((t([[-1, 9]]), rows2), None),                                                    # padding
        ((t([[0, 0], [2, 4]]), torch.randn(2, 2)), (ValueError, r"indices\[1\] = \(2, 4\)")),  # nothing written
        ((t([[0, 0, 0]]), torch.randn(1)), (ValueError, r"indices must be \[n\] or \[n, k\] index tuples of k = 1")),
        ((t([[[0]]]), rows1), (ValueError, r"indices must be \[n\] or \[n, k\]")),
        ((t([0.0]), rows1), (TypeError, "indices must have dtype")),
        ((t([0], dtype=torch.int16), rows1), (TypeError, "indices must have dtype")),
        ((t([0]), torch.randn(1, 4, 3)), (ValueError, r"updates must have shape \(n, \*var.shape\[1:\]\) = \(1, 4, 2\)")),
        ((t([0, 1]), rows1), (ValueError, r"updates must have shape .* = \(2, 4, 2\), got \(1, 4, 2\)")),
        ((t([[0, 1]]), rows1), (ValueError, r"updates must have shape \(n, \*var.shape\[2:\]\) = \(1, 2\)")),
        ((t([0]), rows1.double()), (TypeError, "updates")),
    ]
    for (index, rows), error in cases:
        if error is None:
            ascend_kv.scatter_nd_update(var.clone(), index, rows)
            continue
        before = var.clone()
        with pytest.raises(error[0], match=error[1]):
            ascend_kv.scatter_nd_update(var, index, rows)
        assert bits_equal(var, before), f"{index} wrote"


def test_var_rules() -> None:
    index, rows = torch.tensor([0]), torch.ones(1, 2)
    cases = [
        (torch.zeros(4, 2, dtype=torch.complex128), (TypeError, "var must have an element type of 1, 2, 4 or 8")),
        (torch.zeros(4, 1).expand(4, 2), (ValueError, "var is written in place")),
        (torch.zeros(4, 2, requires_grad=True), (ValueError, "var requires grad")),
        (torch.zeros(()), (ValueError, "var must have at least 1 dims")),
    ]
    for var, (kind, message) in cases:
        with pytest.raises(kind, match=message):
            ascend_kv.scatter_nd_update(var, index, rows)
    buf = torch.zeros(4, 4)
    with pytest.raises(ValueError, match="var"):
        ascend_kv.scatter_nd_update(buf[:, :2], index, buf[:1, 1:3])  # updates share var's bytes
    with pytest.raises(TypeError, match="var must be a torch.Tensor"):
        ascend_kv.scatter_nd_update("cache", index, rows)  # type: ignore[arg-type]


def test_devices_must_agree(kernel_library: None) -> None:
    with pytest.raises(ValueError, match="updates is on cpu but var is on npu:0"):
        ascend_kv.scatter_nd_update(torch.zeros(4, 2, device=NPU), torch.tensor([0]), torch.ones(1, 2))
    with pytest.raises(ValueError, match="indices is on npu:1, but index tensors must be on the host"):
        ascend_kv.scatter_nd_update(torch.zeros(4, 2, device=NPU), torch.tensor([0], device="npu:1"),
                                    torch.ones(1, 2, device=NPU))


# ----------------------------------------------------------------------------- torch_npu's facade


def test_the_facade_takes_batched_index_tuples() -> None:
    """SFA's write: ``npu_scatter_nd_update_(cache.view(-1, D), slots.view(-1, 1), rows)``, and [B, T, 2] pairs."""
    cache = torch.zeros(4, 8, 1, 16, dtype=torch.bfloat16)
    slots = torch.tensor([[3, 9], [-1, 31]], dtype=torch.int32)
    rows = torch.randn(2, 2, 16).to(torch.bfloat16)
    want = cache.clone()
    reference.scatter_nd_update(want.view(-1, 16), slots.view(-1, 1), rows.view(-1, 16))
    assert torch_npu.npu_scatter_nd_update_(cache.view(-1, 16), slots.view(2, 2, 1), rows) is not None
    assert bits_equal(cache, want)
    pairs = torch.stack([slots // 8, slots % 8], dim=-1)
    pairs[1, 0] = -1
    fresh = torch_npu.npu_scatter_nd_update(torch.zeros_like(cache), pairs, rows.unsqueeze(2))
    assert bits_equal(fresh, want)


def test_the_out_of_place_facade_leaves_its_input() -> None:
    var = torch.zeros(3, 2)
    out = torch_npu.npu_scatter_nd_update(var, torch.tensor([[1]]), torch.ones(1, 2))
    assert var.count_nonzero() == 0 and out[1].tolist() == [1.0, 1.0]


def test_the_facade_names_its_shape_rules() -> None:
    with pytest.raises(ValueError, match=r"indices must have at least 2 dims"):
        torch_npu.npu_scatter_nd_update_(torch.zeros(3, 2), torch.tensor([1]), torch.ones(1, 2))
    with pytest.raises(ValueError, match=r"updates must have shape indices.shape\[:-1\] \+ input.shape\[1:\] = \(1, 2\)"):
        torch_npu.npu_scatter_nd_update_(torch.zeros(3, 2), torch.tensor([[1]]), torch.ones(2, 1))


def test_the_stand_in_torch_npu_has_both(stand_in_torch_npu: object) -> None:
    import torch_npu as stand_in  # type: ignore[import-not-found]

    var = torch.zeros(3, 2)
    stand_in.npu_scatter_nd_update_(var, torch.tensor([[2]]), torch.ones(1, 2))
    assert var[2].tolist() == [1.0, 1.0]
    assert stand_in.npu_scatter_nd_update(var, torch.tensor([[0]]), torch.ones(1, 2))[0].tolist() == [1.0, 1.0]


# ----------------------------------------------------------------------------- graphs


def _step(pages: torch.Tensor, scales: torch.Tensor, pairs: torch.Tensor, rows: torch.Tensor,
          row_scales: torch.Tensor) -> None:
    """Two layers' compressed caches in padded pages, and a scale cache written by flat slots."""
    for layer in range(2):
        cache = pages[layer, :, :32].view(-1, 4, 8)          # [num_blocks, 4, 8] in pages of 40
        ascend_kv.scatter_nd_update(cache, pairs, rows[layer])
    torch_npu.npu_scatter_nd_update_(scales.view(-1, 1), (pairs[:, 0] * 4 + pairs[:, 1]).view(-1, 1), row_scales)



@pytest.mark.parametrize("dynamic", [None, True])
def test_compiled_equals_eager_with_changing_row_counts(fresh_compile: None, dynamic: bool | None) -> None:
    compiled = torch.compile(_step, backend="inductor", fullgraph=True, dynamic=dynamic)
    for n in (1, 3, 2, 4):
        g = torch.Generator().manual_seed(n)
        pages, scales = torch.randn(2, 5, 40, generator=g), torch.randn(5, 4, generator=g)
        pairs = torch.stack([torch.arange(n) % 5, torch.arange(n) % 4], dim=1).to(torch.int32)
        pairs[0, 1] = -1  # padding
        rows, row_scales = torch.randn(2, n, 8, generator=g), torch.randn(n, 1, generator=g)
        eager = [pages.clone(), scales.clone()]
        ran = [pages.clone(), scales.clone()]
        _step(*eager, pairs, rows, row_scales)
        compiled(*ran, pairs, rows, row_scales)
        assert all(bits_equal(r, e) for r, e in zip(ran, eager)), f"{n} rows"


def test_passes_opcheck() -> None:
    var = torch.randn(3, 4, 2)
    torch.library.opcheck(OPS.scatter_nd_update.default, (var, torch.tensor([[0, 1], [-1, 0]]), torch.randn(2, 2)))
    torch.library.opcheck(OPS.scatter_nd_update.default,
                          (var.view(12, 2).to(torch.bfloat16), torch.tensor([3, 5], dtype=torch.int32),
                           torch.randn(2, 2).to(torch.bfloat16)))


def test_the_docstring_examples_run() -> None:
    for module in (sparse_ops, torch_npu):
        results = doctest.testmod(module, extraglobs={"torch": torch, "ascend_kv": ascend_kv})
        assert results.failed == 0 and results.attempted > 0
