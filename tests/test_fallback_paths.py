"""The fallback's fast paths: each one bit for bit against the reference, and where the choice switches.

Every path is forced on the shared hypothesis cases (contiguous tensors, where all of them
apply), then the choice itself is checked at its boundaries: the mean run length around
``SLICE_MIN_ROWS``, and strides that rule out a path (each such call is also compared with the
reference on the same strided views, and the whole underlying storage must match, so a path
that writes outside its rows fails).
"""

from __future__ import annotations

import importlib
import shutil
import sysconfig
from collections.abc import Callable

import pytest
import torch
from cases import ND, NZ, bits_equal, kv_cache_case, kv_cache_cases, paged_case, paged_cases, random_bits
from hypothesis import given
from test_ops import run_kv_cache, run_paged

import ascend_kv
from ascend_kv.operators.library import allocate_outputs
from ascend_kv.rules import kv_cache as kv_rules
from ascend_kv.rules import paged_cache_load as load_rules
from ascend_kv.tools import reference

native = importlib.import_module("ascend_kv.cpu_fallback.native")
kv = importlib.import_module("ascend_kv.cpu_fallback.kv_cache")
paged = importlib.import_module("ascend_kv.cpu_fallback.paged_cache_load")

KV_PATHS = ["native", "slices", "rows", "scatter"]
PAGED_PATHS = ["native", "slices", "rows", "gather"]


@pytest.fixture(autouse=True)
def on_fallback():
    with ascend_kv.use_backend("fallback"):
        yield


@pytest.fixture
def torch_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a machine without a C compiler: the compiled copier is missing."""
    monkeypatch.setattr(native, "AVAILABLE", False)


def test_native_copier_is_built_where_a_compiler_is() -> None:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    assert native.AVAILABLE == (shutil.which(compiler) is not None)


@pytest.mark.parametrize("runs, item, error, message", [
    (([0], [0, 0], [1]), 32, ValueError, "one entry per run"),
    (([0], [0], [1]), 16, ValueError, "multiple of 32"),
    (([0], [0], [1]), 0, ValueError, "multiple of 32"),
    (([0], [0], [1.0]), 32, TypeError, "integer"),
    (([0], 0, [1]), 32, TypeError, "sequences of ints"),
    (([0], [2**63], [1]), 32, OverflowError, "too big"),
])
def test_native_copier_rejects_inconsistent_runs(
    runs: tuple[object, object, object], item: int, error: type[Exception], message: str
) -> None:
    src, dst = torch.zeros(64, dtype=torch.int8), torch.zeros(64, dtype=torch.int8)
    with pytest.raises(error, match=message):
        native.copy_with(native.Steps(0, 0, 0, item, 32, 32, 1, 0, 0), src.data_ptr(), dst.data_ptr(), *runs, 0)
    assert not dst.any()


# ----------------------------------------------------------------------------- every path, forced


@pytest.mark.parametrize("way", KV_PATHS)
@given(case=kv_cache_cases())
def test_every_kv_cache_path_matches_reference(monkeypatch: pytest.MonkeyPatch, way: str, case) -> None:
    monkeypatch.setattr(kv, "path", lambda call: way)
    run_kv_cache(case)


@pytest.mark.parametrize("way", PAGED_PATHS)
@given(case=paged_cases())
def test_every_paged_path_matches_reference(monkeypatch: pytest.MonkeyPatch, way: str, case) -> None:
    forced = {ND: way, NZ: "gather" if way == "rows" else way}                  # rows is ND only
    monkeypatch.setattr(paged, "_path", lambda plan, cache, out, route: forced[plan.args.layout])
    run_paged(case)


@given(case=kv_cache_cases())
def test_kv_cache_without_compiler_matches_reference(torch_only: None, case) -> None:
    run_kv_cache(case)


@given(case=paged_cases())
def test_paged_without_compiler_matches_reference(torch_only: None, case) -> None:
    run_paged(case)


# ----------------------------------------------------------------------------- kv_cache: the choice


def kv_path(args: tuple) -> str:
    return kv.path(kv_rules.check(*args))


def run_kv_views(make: Callable[[], tuple], view: Callable[[tuple], tuple]) -> str:
    """Run op and reference on ``view`` of two copies of the tensors ``make()`` returns; compare storages."""
    base = make()
    ours, ref = ([t.clone() if isinstance(t, torch.Tensor) else t for t in base] for _ in range(2))
    way = kv_path(view(ours))
    ascend_kv.kv_cache(*view(ours))
    reference.kv_cache(*view(ref))
    assert all(bits_equal(a, b) for a, b in zip(ours, ref) if isinstance(a, torch.Tensor))
    return way


@pytest.mark.parametrize("rows, expected", [(kv.SLICE_MIN_ROWS - 1, "rows"), (kv.SLICE_MIN_ROWS, "slices")])
def test_kv_cache_slices_from_mean_run_length(torch_only: None, rows: int, expected: str) -> None:
    # mean rows per non-empty entry: (rows + rows) / 2; an empty entry does not count
    case = kv_cache_case(torch.float16, [rows, 0, rows], [rows, 3, rows + 2], max_seq_len=2 * rows)
    assert kv_path(case.args) == expected
    run_kv_cache(case)


def test_kv_cache_native_when_built_and_rows_contiguous() -> None:
    case = kv_cache_case(torch.int8, [1, 1, 1], [1, 5, 16])
    assert kv_path(case.args) == "native"
    run_kv_cache(case)


def _kv_tensors(hidden_factor: int = 1, new_factor: int = 1, transposed: bool = False) -> Callable[[], tuple]:
    """``new_kv`` and ``past`` storages, wider by the factors, or ``past`` as [layers, seq, batch, hidden]."""
    layers, batch, seq, hidden = 2, 3, 16, 32
    def make() -> tuple:
        shape = (layers, seq, batch, hidden) if transposed else (layers, batch, seq, hidden * hidden_factor)
        return (random_bits((5, hidden * new_factor), torch.float16, 1), random_bits(shape, torch.float16, 2),
                torch.tensor([2, 16, 4]), torch.tensor([1, 2, 2]))
    return make


def _kv_args(new_kv: torch.Tensor, past: torch.Tensor, offsets: torch.Tensor, lens: torch.Tensor) -> tuple:
    return (new_kv, 1, past, offsets, lens)


@pytest.mark.parametrize("compiled", [True, False])
def test_kv_cache_past_with_batch_and_positions_transposed(monkeypatch: pytest.MonkeyPatch, compiled: bool) -> None:
    monkeypatch.setattr(native, "AVAILABLE", compiled)
    way = run_kv_views(_kv_tensors(transposed=True), lambda t: _kv_args(t[0], t[1].transpose(1, 2), t[2], t[3]))
    assert way == ("native" if compiled else "scatter")                        # no flat row view


@pytest.mark.parametrize("compiled", [True, False])
def test_kv_cache_past_rows_with_gaps(monkeypatch: pytest.MonkeyPatch, compiled: bool) -> None:
    monkeypatch.setattr(native, "AVAILABLE", compiled)
    way = run_kv_views(_kv_tensors(hidden_factor=2), lambda t: _kv_args(t[0], t[1][..., :32], t[2], t[3]))
    assert way == ("native" if compiled else "rows")


def test_kv_cache_strided_hidden_is_not_native() -> None:
    way = run_kv_views(_kv_tensors(hidden_factor=2), lambda t: _kv_args(t[0], t[1][..., ::2], t[2], t[3]))
    assert way == "rows"                                                       # fp16 index_copy_, no wide view


def test_kv_cache_strided_new_kv_is_not_native() -> None:
    way = run_kv_views(_kv_tensors(new_factor=2), lambda t: _kv_args(t[0][:, ::2], t[1], t[2], t[3]))
    assert way == "rows"


# ----------------------------------------------------------------------------- paged_cache_load: the choice


def paged_paths(case) -> tuple[str, str]:
    plan = load_rules.check(*case.args, **case.kwargs)
    allocate_outputs(plan.args, plan.end_row)  # as the allocating operator does
    return paged.paths(plan)


@pytest.mark.parametrize("layout, short, block_size", [(ND, "rows", 128), (NZ, "gather", 16)])
@pytest.mark.parametrize("longer", [False, True])
def test_paged_slices_from_mean_run_length(torch_only: None, layout, short: str, block_size: int, longer: bool) -> None:
    # one run per entry; mean SLICE_MIN_ROWS - 1 + longer (the empty entry has no run)
    mean = paged.SLICE_MIN_ROWS[layout] - 1 + longer
    case = paged_case(layout, [mean - 3, 0, mean + 3], block_size=block_size, num_blocks=3)
    assert paged_paths(case) == (("slices",) * 2 if longer else (short,) * 2)
    run_paged(case)


@pytest.mark.parametrize("layout", [ND, NZ])
def test_paged_native_when_built(layout) -> None:
    case = paged_case(layout, [3, 40], give_outputs=True, extra_rows=2)
    assert paged_paths(case) == ("native", "native")
    run_paged(case)


def run_paged_views(layout, make: Callable[[], list], view: Callable[[list], tuple]) -> tuple[str, str]:
    """Op and reference on ``view`` of two copies of the tensors ``make()`` returns; compare storages."""
    base = make()
    ours, ref = ([t.clone() for t in base] for _ in range(2))
    key_cache, value_cache, key, value = view(ours)
    table, lens = torch.tensor([[2, 0], [1, 3]]), torch.tensor([20, 3])
    call = load_rules.check(key_cache, value_cache, table, lens, kv_cache_cfg=layout, key=key, value=value)
    ways = paged.paths(call)
    ascend_kv.paged_cache_load(key_cache, value_cache, table, lens, kv_cache_cfg=layout, key=key, value=value)
    rk, rv, rkey, rvalue = view(ref)
    reference.paged_cache_load(rk, rv, table, lens, kv_cache_cfg=layout, key=rkey, value=rvalue)
    assert all(bits_equal(a, b) for a, b in zip(ours, ref))
    return ways


def _nd(out_shape: tuple[int, ...], cache_shape: tuple[int, ...] = (4, 16, 2, 16)) -> Callable[[], list]:
    return lambda: [random_bits(cache_shape, torch.float16, 1), random_bits(cache_shape, torch.float16, 2),
                    random_bits(out_shape, torch.float16, 3), random_bits(out_shape, torch.float16, 4)]


@pytest.mark.parametrize("compiled, slice_min_rows, expected", [
    (True, 16, "native"), (False, 16, "gather"), (False, 1, "slices"),        # 3 runs (16, 4, 3): mean 7.7
])
def test_paged_nd_output_rows_with_gaps(
    monkeypatch: pytest.MonkeyPatch, compiled: bool, slice_min_rows: int, expected: str
) -> None:
    monkeypatch.setattr(native, "AVAILABLE", compiled)
    monkeypatch.setitem(paged.SLICE_MIN_ROWS, ND, slice_min_rows)
    ways = run_paged_views(ND, _nd((23, 2, 2, 16)), lambda t: (t[0], t[1], t[2][:, 0], t[3][:, 1]))
    assert ways == (expected, expected)                                        # never `rows`: output not dense


@pytest.mark.parametrize("compiled", [True, False])
def test_paged_nd_cache_blocks_transposed(monkeypatch: pytest.MonkeyPatch, compiled: bool) -> None:
    monkeypatch.setattr(native, "AVAILABLE", compiled)
    monkeypatch.setitem(paged.SLICE_MIN_ROWS, ND, 100)
    ways = run_paged_views(
        ND, _nd((23, 2, 16), cache_shape=(16, 4, 2, 16)),
        lambda t: (t[0].transpose(0, 1), t[1].transpose(0, 1), t[2], t[3]),
    )
    assert ways == (("native",) * 2 if compiled else ("gather",) * 2)          # no flat token view


def test_paged_nz_strided_fractals_are_not_native(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(paged.SLICE_MIN_ROWS, NZ, 100)
    make = lambda: [random_bits((4, 2, 16, 16, 2), torch.float16, 1), random_bits((4, 2, 16, 16), torch.float16, 2),
                    random_bits((23, 32), torch.float16, 3), random_bits((23, 32), torch.float16, 4)]
    ways = run_paged_views(NZ, make, lambda t: (t[0][..., 0], t[1], t[2], t[3]))
    assert ways == ("gather", "native")
