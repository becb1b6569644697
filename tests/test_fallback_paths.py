"""The fallback's CPU paths, bit for bit against the reference, on every layout that once chose a path.

The Python fallback had four paths per operation (the compiled copier, one slice per run, row
indexing, scatter/gather) and chose among them by strides and mean run length; its tests forced
each path in turn. The C++ host paths (cpu_fallback/host.cpp) have one copy primitive for every
layout, so these tests hold what each forced path was checked for, through the public functions:
the shared hypothesis cases, the old choice's boundaries (mean run length around its
``SLICE_MIN_ROWS``), and the strides that ruled a path out. Each strided call is compared with
the reference on the same views of a second copy of the whole storage, so a write outside the
rows fails; every call is counted where it ran (``torch.ops.ascend_kv._runs()``: the host paths).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import torch
from cases import ND, NZ, bits_equal, kv_cache_case, kv_cache_cases, paged_case, paged_cases, random_bits
from hypothesis import given
from test_ops import run_kv_cache, run_paged

import ascend_kv
from ascend_kv.tools import reference

#: The mean run lengths from which the Python fallback switched to one slice per run.
KV_SLICE_MIN_ROWS = 20
PAGED_SLICE_MIN_ROWS = {ND: 112, NZ: 8}


@pytest.fixture(autouse=True)
def on_fallback() -> Iterator[None]:
    with ascend_kv.use_backend("fallback"):
        yield


@contextmanager
def on_the_host_paths(calls: int = 1) -> Iterator[None]:
    """The block's calls ran ``calls`` times on the host paths, and nowhere else."""
    before = torch.ops.ascend_kv._runs()
    yield
    after = torch.ops.ascend_kv._runs()
    assert [a - b for a, b in zip(after, before)] == [calls, 0, 0, 0]


# ----------------------------------------------------------------------------- the shared cases


@given(case=kv_cache_cases())
def test_every_kv_cache_case_matches_reference(case) -> None:
    with on_the_host_paths():
        run_kv_cache(case)


@given(case=paged_cases())
def test_every_paged_case_matches_reference(case) -> None:
    with on_the_host_paths():
        run_paged(case)


# ----------------------------------------------------------------------------- kv_cache: where a path was chosen


@pytest.mark.parametrize("rows", [1, KV_SLICE_MIN_ROWS - 1, KV_SLICE_MIN_ROWS, 3 * KV_SLICE_MIN_ROWS])
def test_kv_cache_around_the_old_mean_run_length(rows: int) -> None:
    # mean rows per non-empty entry: (rows + rows) / 2; an empty entry does not count
    case = kv_cache_case(torch.float16, [rows, 0, rows], [rows, 3, rows + 2], max_seq_len=2 * rows + 2)
    with on_the_host_paths():
        run_kv_cache(case)


@pytest.mark.parametrize("dtype", [torch.int8, torch.float16, torch.float32])
def test_kv_cache_decode_rows(dtype: torch.dtype) -> None:
    """One token per entry (the old compiled copier's case), 1-, 2- and 4-byte rows."""
    case = kv_cache_case(dtype, [1, 1, 1], [1, 5, 16], hidden=32 // dtype.itemsize * 3)
    with on_the_host_paths():
        run_kv_cache(case)


def run_kv_views(make: Callable[[], tuple], view: Callable[[tuple], tuple]) -> None:
    """Run the op and the reference on ``view`` of two copies of the tensors ``make()`` returns;
    compare the whole storages."""
    base = make()
    ours, ref = ([t.clone() if isinstance(t, torch.Tensor) else t for t in base] for _ in range(2))
    with on_the_host_paths():
        ascend_kv.kv_cache(*view(ours))
    reference.kv_cache(*view(ref))
    assert all(bits_equal(a, b) for a, b in zip(ours, ref) if isinstance(a, torch.Tensor))


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


def test_kv_cache_past_with_batch_and_positions_transposed() -> None:
    """No flat row view of past (once the scatter path)."""
    run_kv_views(_kv_tensors(transposed=True), lambda t: _kv_args(t[0], t[1].transpose(1, 2), t[2], t[3]))


def test_kv_cache_past_rows_with_gaps() -> None:
    run_kv_views(_kv_tensors(hidden_factor=2), lambda t: _kv_args(t[0], t[1][..., :32], t[2], t[3]))


def test_kv_cache_strided_hidden() -> None:
    """past's elements two apart within a row (once the 2-byte index_copy_ path)."""
    run_kv_views(_kv_tensors(hidden_factor=2), lambda t: _kv_args(t[0], t[1][..., ::2], t[2], t[3]))


def test_kv_cache_strided_new_kv() -> None:
    run_kv_views(_kv_tensors(new_factor=2), lambda t: _kv_args(t[0][:, ::2], t[1], t[2], t[3]))


def test_kv_cache_new_kv_4d_with_strided_heads() -> None:
    """A 4-D new_kv whose heads lie apart (read as its flat token list)."""
    run_kv_views(_kv_tensors(new_factor=2),
                 lambda t: _kv_args(t[0].view(5, 4, 16)[:, :, :8].unsqueeze(0), t[1], t[2], t[3]))


# ----------------------------------------------------------------------------- paged_cache_load: where a path was chosen


@pytest.mark.parametrize("layout, block_size", [(ND, 128), (NZ, 16)])
@pytest.mark.parametrize("longer", [False, True])
def test_paged_around_the_old_mean_run_length(layout, block_size: int, longer: bool) -> None:
    # one run per entry; mean SLICE_MIN_ROWS - 1 + longer (the empty entry has no run)
    mean = PAGED_SLICE_MIN_ROWS[layout] - 1 + longer
    case = paged_case(layout, [mean - 3, 0, mean + 3], block_size=block_size, num_blocks=3)
    with on_the_host_paths():
        run_paged(case)


@pytest.mark.parametrize("layout", [ND, NZ])
def test_paged_into_given_outputs_with_spare_rows(layout) -> None:
    """Given outputs longer than the rows loaded: the rows past them keep their bits."""
    case = paged_case(layout, [3, 40], give_outputs=True, extra_rows=2)
    with on_the_host_paths():
        run_paged(case)


def run_paged_views(layout, make: Callable[[], list], view: Callable[[list], tuple]) -> None:
    """Op and reference on ``view`` of two copies of the tensors ``make()`` returns; compare storages."""
    base = make()
    ours, ref = ([t.clone() for t in base] for _ in range(2))
    table, lens = torch.tensor([[2, 0], [1, 3]]), torch.tensor([20, 3])
    key_cache, value_cache, key, value = view(ours)
    with on_the_host_paths():
        ascend_kv.paged_cache_load(key_cache, value_cache, table, lens, kv_cache_cfg=layout, key=key, value=value)
    rk, rv, rkey, rvalue = view(ref)
    reference.paged_cache_load(rk, rv, table, lens, kv_cache_cfg=layout, key=rkey, value=rvalue)
    assert all(bits_equal(a, b) for a, b in zip(ours, ref))


def _nd(out_shape: tuple[int, ...], cache_shape: tuple[int, ...] = (4, 16, 2, 16)) -> Callable[[], list]:
    return lambda: [random_bits(cache_shape, torch.float16, 1), random_bits(cache_shape, torch.float16, 2),
                    random_bits(out_shape, torch.float16, 3), random_bits(out_shape, torch.float16, 4)]


def test_paged_nd_output_rows_with_gaps() -> None:
    """key and value the two halves of one [rows, 2, heads, head_size] buffer (never the dense rows path)."""
    run_paged_views(ND, _nd((23, 2, 2, 16)), lambda t: (t[0], t[1], t[2][:, 0], t[3][:, 1]))


def test_paged_nd_cache_blocks_transposed() -> None:
    """No flat token view of the caches (once the gather path)."""
    run_paged_views(ND, _nd((23, 2, 16), cache_shape=(16, 4, 2, 16)),
                    lambda t: (t[0].transpose(0, 1), t[1].transpose(0, 1), t[2], t[3]))


def test_paged_nd_strided_heads_and_columns() -> None:
    """Heads two apart in the caches, output columns a slice of wider rows."""
    make = lambda: [random_bits((4, 16, 4, 16), torch.float16, 1), random_bits((4, 16, 2, 32), torch.float16, 2),
                    random_bits((23, 2, 24), torch.float16, 3), random_bits((23, 2, 16), torch.float16, 4)]
    run_paged_views(ND, make, lambda t: (t[0][:, :, ::2], t[1][..., 8:24], t[2][..., 4:20], t[3]))


def test_paged_nz_strided_fractals() -> None:
    """An NZ key cache whose 32-byte pieces lie apart (not for the old copier) beside a dense value cache."""
    make = lambda: [random_bits((4, 2, 16, 16, 2), torch.float16, 1), random_bits((4, 2, 16, 16), torch.float16, 2),
                    random_bits((23, 32), torch.float16, 3), random_bits((23, 32), torch.float16, 4)]
    run_paged_views(NZ, make, lambda t: (t[0][..., 0], t[1], t[2], t[3]))


def test_paged_nz_outputs_with_gaps() -> None:
    make = lambda: [random_bits((4, 2, 16, 16), torch.float16, 1), random_bits((4, 2, 16, 16), torch.float16, 2),
                    random_bits((23, 40), torch.float16, 3), random_bits((23, 2, 32), torch.float16, 4)]
    run_paged_views(NZ, make, lambda t: (t[0], t[1], t[2][:, 3:35], t[3][:, 1]))
