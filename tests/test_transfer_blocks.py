"""The public ``gather_blocks`` and ``scatter_blocks`` (docs/semantics.md §12): against the reference of the
spec's loop bit for bit over layouts, head splits, shapes, key-only caches and index dtypes; blocks
not named keep their bytes; every host rule at its boundary with nothing written; the device
fallback (on the fake NPU of tests/fake_npu) with unchecked ids and zero transfers; the graph tools."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import fake_npu
import pytest
import torch
from cases import bits_equal, random_bits, require_compiled_as_eager
from hypothesis import given
from test_block_copy import judge
from transfer_cases import TransferCase, make_case, transfer_cases

import ascend_kv
from ascend_kv.tools import reference

OPS = torch.ops.ascend_kv
HOST_PATHS, DEVICE_FALLBACK = 0, 3  # positions in torch.ops.ascend_kv._runs()
fake_npu.install()


def gather(case: TransferCase, out: torch.Tensor | None = None, ids: torch.Tensor | None = None,
           keys: list[torch.Tensor] | None = None, values: list[torch.Tensor] | None = None) -> torch.Tensor:
    return ascend_kv.gather_blocks(case.keys if keys is None else keys, case.values if values is None else values,
                                   case.block_ids() if ids is None else ids, case.buffer if out is None else out,
                                   cache_layout=case.cache_layout, out_layout=case.buffer_layout,
                                   head_splits=case.splits)


def scatter(case: TransferCase, src: torch.Tensor | None = None, ids: torch.Tensor | None = None,
            keys: list[torch.Tensor] | None = None, values: list[torch.Tensor] | None = None) -> None:
    ascend_kv.scatter_blocks(case.buffer if src is None else src, case.keys if keys is None else keys,
                             case.values if values is None else values, case.block_ids() if ids is None else ids,
                             src_layout=case.buffer_layout, cache_layout=case.cache_layout, head_splits=case.splits)


def expected_gather(case: TransferCase, ids: list[int]) -> torch.Tensor:
    out = case.buffer.clone()
    reference.gather_blocks(case.keys, case.values, torch.tensor(ids), out, cache_layout=case.cache_layout,
                            out_layout=case.buffer_layout, head_splits=case.splits)
    return out


def expected_scatter(case: TransferCase, ids: list[int]) -> list[torch.Tensor]:
    keys, values = [k.clone() for k in case.keys], [v.clone() for v in case.values]
    reference.scatter_blocks(case.buffer, keys, values, torch.tensor(ids), src_layout=case.buffer_layout,
                             cache_layout=case.cache_layout, head_splits=case.splits)
    return [*keys, *values]


@given(case=transfer_cases(distinct=False))
def test_gather_matches_the_reference(case: TransferCase) -> None:
    expected, caches = expected_gather(case, case.ids), [c.clone() for c in case.caches()]
    assert gather(case) is case.buffer
    assert bits_equal(case.buffer, expected)
    assert all(bits_equal(a, b) for a, b in zip(case.caches(), caches))  # the caches are only read


@given(case=transfer_cases(distinct=True))
def test_scatter_matches_the_reference_and_other_blocks_keep_their_bytes(case: TransferCase) -> None:
    expected = expected_scatter(case, case.ids)
    before = [c.clone() for c in case.caches()]
    scatter(case)
    kept = [b for b in range(before[0].shape[0]) if b not in case.ids]
    for cache, want, old in zip(case.caches(), expected, before):
        assert bits_equal(cache, want)
        assert bits_equal(cache[kept], old[kept])


@pytest.mark.parametrize(("cache_layout", "buffer_layout", "splits"),
                         [("nd", "nd", 1), ("nd", "nz", 1), ("nz", "nd", 2), ("hnd", "nd", 4), ("nz", "hnd", 1)])
def test_gather_then_scatter_round_trips_over_32_layers_of_one_buffer(cache_layout: str, buffer_layout: str,
                                                                      splits: int) -> None:
    case = make_case(cache_layout, buffer_layout, layers=32, num_blocks=9, splits=splits, ids=[8, 3, 0, 5],
                     one_buffer=True, index_dtype=torch.int32)
    before = [c.clone() for c in case.caches()]
    before_runs = OPS._runs()[HOST_PATHS]
    gather(case)
    assert bits_equal(case.buffer, expected_gather(case, case.ids))
    for cache in case.caches():
        cache.zero_()
    scatter(case)
    assert OPS._runs()[HOST_PATHS] == before_runs + 2  # one operator call each, for every layer, K and V
    for cache, old in zip(case.caches(), before):
        assert bits_equal(cache[case.ids], old[case.ids])


def test_key_only_mla_column_slices() -> None:
    buf = random_bits((6, 16, 1, 576), torch.bfloat16, 3)  # MLA: 512 + 64 columns of one buffer per layer
    layers = [buf.clone() for _ in range(3)]
    for part in (slice(0, 512), slice(512, 576)):
        keys = [layer[..., part] for layer in layers]
        out = torch.zeros(1, 3, 2, 16, 1, part.stop - part.start, dtype=torch.bfloat16)
        ascend_kv.gather_blocks(keys, [], torch.tensor([4, 1]), out)
        assert bits_equal(out, torch.stack([k[[4, 1]] for k in keys])[None])


# ----------------------------------------------------------------------------- the device fallback


def on_the_device(call: Callable[..., Any], case: TransferCase, ids: torch.Tensor, staged: bool = False) -> None:
    """``call(case with its tensors on the fake NPU, ids there)``: no value read back, one fallback run;
    the device memory is copied back over the host tensors. ``staged``: the buffer stays on the host."""
    tensors = [*case.caches(), ids] + ([] if staged else [case.buffer])
    mirror = fake_npu.same_layout(tensors)
    keys, rest = mirror.values[:len(case.keys)], mirror.values[len(case.keys):]
    values, rest = rest[:len(case.values)], rest[len(case.values):]
    moved = TransferCase(keys, values, case.ids, case.buffer if staged else rest[1], case.cache_layout,
                         case.buffer_layout, case.splits, case.index_dtype)
    before = OPS._runs()[DEVICE_FALLBACK]
    with ascend_kv.use_backend("fallback"), fake_npu.counting() as seen:
        call(moved, ids=rest[0])
    assert seen.transfers == 0 and seen.blocking_uploads == 0
    assert OPS._runs()[DEVICE_FALLBACK] == before + 1
    mirror.copy_back()


@pytest.mark.parametrize(("cache_layout", "buffer_layout", "splits"), [("nd", "nz", 1), ("nz", "nd", 2), ("hnd", "nd", 1)])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_the_device_fallback_skips_out_of_range_ids(cache_layout: str, buffer_layout: str, splits: int,
                                                    index_dtype: torch.dtype) -> None:
    ids = [5, -1, 6, 0, 2**31 - 1 if index_dtype == torch.int32 else 2**40]
    case = make_case(cache_layout, buffer_layout, num_blocks=6, splits=splits, ids=ids, index_dtype=index_dtype)
    expected = expected_gather(case, ids)
    on_the_device(gather, case, case.block_ids())
    assert bits_equal(case.buffer, expected)  # skipped rows untouched
    expected_caches = expected_scatter(case, ids)
    on_the_device(scatter, case, case.block_ids())
    assert all(bits_equal(a, b) for a, b in zip(case.caches(), expected_caches))


def test_the_device_fallback_with_no_id_in_range_writes_nothing() -> None:
    case = make_case("nd", "nz", ids=[6, -3])
    before, buffer = [c.clone() for c in case.caches()], case.buffer.clone()
    on_the_device(scatter, case, case.block_ids())
    on_the_device(gather, case, case.block_ids())
    assert all(bits_equal(a, b) for a, b in zip(case.caches(), before)) and bits_equal(case.buffer, buffer)


@pytest.mark.parametrize("pinned", [False, True])
@pytest.mark.parametrize("ids_on_device", [False, True])
def test_a_host_buffer_with_device_caches_goes_through_one_staging_copy(pinned: bool, ids_on_device: bool) -> None:
    case = make_case("nd", "nz", ids=[3, 1])
    mirror = fake_npu.same_layout(case.caches())
    keys, values = mirror.values[:2], mirror.values[2:]
    buffer = case.buffer.pin_memory() if pinned else case.buffer.clone()
    ids = case.block_ids().to("npu:0") if ids_on_device else case.block_ids()
    expected = expected_gather(case, case.ids)
    with ascend_kv.use_backend("fallback"), fake_npu.counting() as seen, fake_npu.recording("aten::_copy_from") as copies:
        ascend_kv.gather_blocks(keys, values, ids, buffer, out_layout="nz")
    assert bits_equal(buffer, expected)
    downloads = [c for c in copies if c.devices[:2] == ["npu:0", "cpu"]]
    assert seen.transfers == 1 and len(downloads) == 1 and downloads[0].args[2] == pinned  # the result, once
    assert seen.blocking_uploads == (0 if pinned else int(ids_on_device))  # unchecked ids: the buffer goes up first
    buffer.copy_(random_bits(tuple(buffer.shape), buffer.dtype, 9))
    expected_caches = expected_scatter(TransferCase(case.keys, case.values, case.ids, buffer, "nd", "nz", 1,
                                                    case.index_dtype), case.ids)
    with ascend_kv.use_backend("fallback"), fake_npu.counting() as seen:
        ascend_kv.scatter_blocks(buffer, keys, values, ids, src_layout="nz")
    assert seen.transfers == 0 and seen.blocking_uploads == (0 if pinned else 1)
    mirror.copy_back()
    assert all(bits_equal(a, b) for a, b in zip(case.caches(), expected_caches))


# ----------------------------------------------------------------------------- rules at their boundaries


def rejected_gather(case: TransferCase, message: str | None, error: type[Exception] = ValueError, **changes: Any) -> None:
    arguments = {"key_caches": case.keys, "value_caches": case.values, "block_ids": case.block_ids(),
                 "out": case.buffer, "cache_layout": case.cache_layout, "out_layout": case.buffer_layout,
                 "head_splits": case.splits, **changes}
    judge(lambda: ascend_kv.gather_blocks(**arguments), [arguments["out"]], message, error)


def rejected_scatter(case: TransferCase, message: str | None, error: type[Exception] = ValueError,
                     **changes: Any) -> None:
    arguments = {"src": case.buffer, "key_caches": case.keys, "value_caches": case.values,
                 "block_ids": case.block_ids(), "src_layout": case.buffer_layout, "cache_layout": case.cache_layout,
                 "head_splits": case.splits, **changes}
    judge(lambda: ascend_kv.scatter_blocks(**arguments), [*arguments["key_caches"], *arguments["value_caches"]],
          message, error)


@pytest.mark.parametrize(("ids", "message"), [
    ([7, 0], None),
    ([7, 8], r"block_ids\[1\] = 8 is out of range: the caches hold 8 blocks"),
    ([-1], r"block_ids\[0\] = -1 is out of range: the caches hold 8 blocks"),
])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_block_ids_in_range(ids: list[int], message: str | None, index_dtype: torch.dtype) -> None:
    case = make_case("nd", "hnd", num_blocks=8, ids=ids, index_dtype=index_dtype)
    rejected_gather(case, message)
    rejected_scatter(case, message)


def test_scatter_ids_are_distinct_and_gather_takes_repeats() -> None:
    case = make_case("nd", "nd", num_blocks=8, ids=[4, 1, 4])
    rejected_scatter(case, r"block_ids\[2\] = 4 repeats block_ids\[0\]")
    rejected_gather(case, None)
    assert bits_equal(case.buffer[:, :, 0], case.buffer[:, :, 2])


def test_layout_names() -> None:
    case = make_case("nd", "nd")
    rejected_gather(case, r"cache_layout must be 'nd', 'hnd' or 'nz', got 'ND'", cache_layout="ND")
    rejected_gather(case, r"out_layout must be 'nd', 'hnd' or 'nz', got 'zn'", out_layout="zn")
    rejected_scatter(case, r"src_layout must be 'nd', 'hnd' or 'nz', got 'x'", src_layout="x")
    rejected_scatter(case, r"cache_layout must be a str", TypeError, cache_layout=1)


def test_head_splits_before_the_buffer_shape() -> None:
    case = make_case("nd", "nd", heads=4, splits=4)
    rejected_gather(case, None)
    rejected_gather(case, r"head_splits must be a positive int, got 0", head_splits=0)
    rejected_gather(case, r"head_splits = 3 must divide the caches' H = 4", head_splits=3)
    rejected_gather(case, r"head_splits = 2 needs the buffer in layout 'nd'.*out_layout = 'hnd'", head_splits=2,
                    out_layout="hnd")
    rejected_scatter(case, r"src must have shape \(2, 2, 2, 2, 16, 2, 16\)", head_splits=2)
    rejected_scatter(case, r"head_splits must be an int", TypeError, head_splits=2.0)


def test_nz_constraints() -> None:
    rejected_gather(make_case("nd", "nz", bs=16), None)
    rejected_gather(make_case("nd", "nd", bs=8), r"out_layout = 'nz' needs block_size a multiple of 16, got 8",
                    out=torch.zeros(2, 2, 2, 4, 8, 16, dtype=torch.float16), out_layout="nz")
    rejected_gather(make_case("nd", "nd", heads=1, head_size=8), r"out_layout = 'nz' needs H \* D a multiple of E = 16",
                    out=torch.zeros(2, 2, 2, 0, 16, 16, dtype=torch.float16), out_layout="nz")
    case = make_case("nz", "nd", heads=4, head_size=16)
    rejected_scatter(case, r"cache_layout = 'nz' needs block_size a multiple of 16",
                     key_caches=[torch.zeros(6, 4, 8, 16, dtype=torch.float16)] * 2,
                     value_caches=[torch.zeros(6, 4, 8, 16, dtype=torch.float16)] * 2)
    rejected_gather(case, r"in cache_layout 'nz' must be \[num_blocks, T // E, block_size, E\] with E = 32 // itemsize = 16",
                    key_caches=[torch.zeros(6, 8, 16, 8, dtype=torch.float16)] * 2,
                    value_caches=[torch.zeros(6, 8, 16, 8, dtype=torch.float16)] * 2)
    rejected_gather(case, r"out holds blocks of H \* D = 32 elements per token, but the NZ caches hold T = 64",
                    out=torch.zeros(2, 2, 2, 16, 2, 16, dtype=torch.float16))


def test_buffer_and_cache_structure() -> None:
    case = make_case("nd", "nd", num_blocks=8)
    rejected_gather(case, r"out must have shape \(2, 2, 2, 16, 4, 16\)", out=case.buffer[:, :, :1])
    rejected_gather(case, r"out.dtype must equal key_caches\[0\].dtype = torch.float16, got torch.bfloat16", TypeError,
                    out=case.buffer.view(torch.bfloat16))
    rejected_scatter(case, r"src.dtype must equal", TypeError, src=case.buffer.view(torch.int16))
    rejected_gather(case, r"value_caches\[1\].shape = \(5, 16, 4, 16\) must equal key_caches\[0\].shape",
                    value_caches=[case.values[0], case.values[1][:5]])
    rejected_gather(case, r"value_caches\[1\].dtype must equal key_caches\[0\].dtype", TypeError,
                    value_caches=[case.values[0], case.values[1].view(torch.bfloat16)])
    rejected_gather(case, r"value_caches must have one cache per layer \(2, as key_caches\) or none",
                    value_caches=case.values[:1])
    rejected_gather(case, r"block_ids must have dtype", TypeError, block_ids=torch.tensor([1.0, 2.0]))
    rejected_gather(case, r"out shares memory with key_caches\[1\]",
                    out=case.keys[1].reshape(2, 2, 2, 16, 4, 16))
    rejected_scatter(case, r"key_caches\[0\] shares memory with src", src=case.keys[0].reshape(2, 2, 2, 16, 4, 16))
    rejected_scatter(case, r"value_caches\[0\] shares memory with key_caches\[0\]", value_caches=[case.keys[0], case.values[1]])
    rejected_gather(case, None, value_caches=[case.keys[0], case.keys[1]])  # read twice: fine


# ----------------------------------------------------------------------------- graph tools


def transfer_step(keys: torch.Tensor, values: torch.Tensor, ids: torch.Tensor, nz: torch.Tensor,
                  staging: torch.Tensor) -> torch.Tensor:
    """A Mooncake-style step: gather ND caches into an NZ buffer, scatter a 2-way split buffer back."""
    k, v = list(keys.unbind(0)), list(values.unbind(0))
    ascend_kv.gather_blocks(k, v, ids, nz, out_layout="nz")
    ascend_kv.scatter_blocks(staging, k, v, ids, head_splits=2)
    return nz[1, 0].flip(0)


def step_inputs() -> list[torch.Tensor]:
    return [random_bits((3, 6, 16, 4, 16), torch.float16, 1), random_bits((3, 6, 16, 4, 16), torch.float16, 2),
            torch.tensor([4, 0], dtype=torch.int32), torch.zeros(2, 3, 2, 4, 16, 16, dtype=torch.float16),
            random_bits((2, 3, 2, 2, 16, 2, 16), torch.float16, 3)]


@pytest.mark.slow
def test_compiled_step_matches_eager() -> None:
    require_compiled_as_eager(transfer_step, step_inputs)
