"""A request's block address lists (docs/semantics.md §17.2): ``block_address_lists`` between two
descriptors and its operator ``block_ranges``, against a Python loop over (row, block) as the
connectors build them; every rule at its boundary, and nothing returned on an error."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_kv.transfer import CacheDescriptor, allocate_transfer_caches, block_address_lists

OPS = torch.ops.ascend_kv


def loop_reference(rows: list[tuple[int, int, int, int, int]], src_ids: list[int], dst_ids: list[int]
                   ) -> list[tuple[int, int, int]]:
    """One range per (row, block) (``rows``: src base, src stride, dst base, dst stride, bytes), then
    runs that continue on both sides merged, sorted by destination."""
    pieces = sorted(((sb + s * ss, db + d * ds, n) for sb, ss, db, ds, n in rows for s, d in zip(src_ids, dst_ids)),
                    key=lambda p: p[1])
    merged: list[tuple[int, int, int]] = []
    for src, dst, n in pieces:
        if merged and merged[-1][0] + merged[-1][2] == src and merged[-1][1] + merged[-1][2] == dst:
            merged[-1] = (merged[-1][0], merged[-1][1], merged[-1][2] + n)
        else:
            merged.append((src, dst, n))
    return merged


def rows_of(a: CacheDescriptor, b: CacheDescriptor) -> list[tuple[int, int, int, int, int]]:
    return [(x, sa.block_stride, y, sb.block_stride, sa.block_bytes)
            for sa, sb in zip(a.segments, b.segments) for x, y in zip(sa.bases, sb.bases)]


@settings(max_examples=40, deadline=None)
@given(data=st.data(), layers=st.integers(1, 3), key_only=st.booleans(), scales=st.booleans())
def test_lists_equal_the_per_block_loop_merged(data: st.DataObject, layers: int, key_only: bool, scales: bool) -> None:
    make = lambda blocks: allocate_transfer_caches(layers, blocks, 16, 2, 16, torch.int8 if scales else torch.float16,
                                                   key_only=key_only, alignment=64,
                                                   scale_dtype=torch.float32 if scales else None).descriptor
    src, dst = make(12), make(9)
    n = data.draw(st.integers(0, 9))
    src_ids = data.draw(st.lists(st.integers(0, 11), min_size=n, max_size=n))
    dst_ids = data.draw(st.permutations(range(9)))[:n]
    dtype = data.draw(st.sampled_from([torch.int32, torch.int64]))
    got = block_address_lists(src, dst, torch.tensor(src_ids, dtype=dtype), torch.tensor(dst_ids, dtype=dtype))
    assert all(t.dtype == torch.int64 and t.dim() == 1 for t in got)
    assert list(zip(*(t.tolist() for t in got))) == loop_reference(rows_of(src, dst), src_ids, dst_ids)


def test_a_run_of_consecutive_blocks_is_one_range_per_layer_and_segment() -> None:
    src = allocate_transfer_caches(4, 64, 16, 2, 16, alignment=64).descriptor
    dst = allocate_transfer_caches(4, 64, 16, 2, 16, alignment=64).descriptor
    _, _, lengths = block_address_lists(src, dst, torch.arange(10, 50), torch.arange(0, 40))
    assert lengths.tolist() == [40 * 1024] * 8


def operator_tables(rows: int = 2, blocks: int = 4, length: int = 64, stride: int = 64) -> dict:
    """Two host memories' tables for block_ranges: rows apart, ``blocks`` blocks per row."""
    base = lambda start: torch.arange(rows, dtype=torch.int64) * blocks * stride + start
    full = lambda value: torch.full((rows,), value, dtype=torch.int64)
    return {"src_bases": base(1 << 20), "src_strides": full(stride), "src_lengths": full(length),
                "src_block_ids": torch.tensor([0, 1]), "src_blocks": blocks, "dst_bases": base(1 << 30),
                "dst_strides": full(stride), "dst_lengths": full(length), "dst_block_ids": torch.tensor([2, 3]),
                "dst_blocks": blocks}


def call(tables: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return OPS.block_ranges(*tables.values())


@pytest.mark.parametrize(("change", "error", "message"), [
    ({"src_block_ids": torch.tensor([0, 4])}, ValueError, r"src_block_ids\[1\] = 4 is out of range: the src side holds 4 blocks"),
    ({"src_block_ids": torch.tensor([-1, 0])}, ValueError, r"src_block_ids\[0\] = -1 is out of range"),
    ({"dst_block_ids": torch.tensor([2, 4])}, ValueError, r"dst_block_ids\[1\] = 4 is out of range: the dst side holds 4 blocks"),
    ({"dst_block_ids": torch.tensor([3, 3])}, ValueError, r"dst_block_ids\[1\] = 3 repeats dst_block_ids\[0\]"),
    ({"dst_lengths": torch.tensor([64, 32])}, ValueError, r"dst_lengths\[1\] = 32 differs from src_lengths\[1\] = 64"),
    ({"src_strides": torch.tensor([64, 63])}, ValueError, r"src_strides\[1\] = 63 must be at least the block's 64 bytes"),
    ({"dst_bases": torch.tensor([1 << 30, (1 << 30) + 64])}, ValueError,
     r"dst_bases\[1\] \(block dst_block_ids\[0\] = 2 .* overlaps the destination of row 0's block dst_block_ids\[1\] = 3"),
    ({"dst_block_ids": torch.tensor([2])}, ValueError, r"dst_block_ids must have 2 entries \(one per block, as src_block_ids\), got 1"),
    ({"dst_bases": torch.tensor([1 << 30])}, ValueError, r"dst_bases must have 2 entries \(one per row, as src_bases\), got 1"),
    ({"src_bases": torch.tensor([-64, 0])}, ValueError, r"src_bases\[0\] = -64 must be an address"),
    ({"src_blocks": -1, "src_block_ids": torch.tensor([], dtype=torch.int64), "dst_block_ids": torch.tensor([], dtype=torch.int64)},
     ValueError, "src_blocks must be >= 0, got -1"),
    ({"src_lengths": torch.tensor([64, 64], dtype=torch.int32)}, TypeError, "src_lengths"),
    ({"src_block_ids": torch.tensor([0.0, 1.0])}, TypeError, "src_block_ids"),
    ({"dst_bases": torch.zeros(2, 1, dtype=torch.int64)}, ValueError, "dst_bases must be a 1-D tensor"),
])
def test_each_rule_names_the_table_and_entry(change: dict, error: type, message: str) -> None:
    tables = operator_tables()
    tables.update(change)
    with pytest.raises(error, match=message):
        call(tables)


@pytest.mark.parametrize("change", [{"src_block_ids": torch.tensor([0, 3])}, {"dst_block_ids": torch.tensor([0, 3])},
                                    {"src_strides": torch.tensor([64, 64])},
                                    {"dst_bases": torch.tensor([1 << 30, (1 << 30) + 4 * 64])}])
def test_the_last_accepted_values(change: dict) -> None:
    """The highest ids, a stride equal to the block, destination rows that just touch."""
    tables = operator_tables()
    tables.update(change)
    assert call(tables)[2].sum() == 2 * 2 * 64


def test_rows_that_touch_merge_across_rows() -> None:
    tables = operator_tables()
    tables.update(dst_block_ids=torch.tensor([0, 1]), src_block_ids=torch.tensor([0, 1]))
    _src, _dst, lengths = call(tables)
    assert lengths.tolist() == [2 * 64, 2 * 64]  # row 1 starts 4 blocks on: apart from row 0's block 1
    tables.update(src_blocks=2, dst_blocks=2, src_bases=torch.tensor([1 << 20, (1 << 20) + 128]),
                  dst_bases=torch.tensor([1 << 30, (1 << 30) + 128]))
    assert call(tables)[2].tolist() == [4 * 64]  # rows back to back: one range


def test_the_descriptors_geometry_must_agree() -> None:
    base = allocate_transfer_caches(2, 8, 16, 2, 16, alignment=64).descriptor
    for other, message in [
        (allocate_transfer_caches(2, 8, 16, 2, 16, layout="hnd", alignment=64), "dst.layout = 'hnd' differs from src.layout = 'nd'"),
        (allocate_transfer_caches(3, 8, 16, 2, 16, alignment=64), "dst.num_layers = 3 differs from src.num_layers = 2"),
        (allocate_transfer_caches(2, 8, 16, 2, 16, key_only=True, alignment=64), r"dst.segments \['key'\] differ"),
        (allocate_transfer_caches(2, 8, 16, 2, 16, torch.bfloat16, alignment=64), "dst.dtype = 'bfloat16' differs"),
    ]:
        with pytest.raises(ValueError, match=message):
            block_address_lists(base, other.descriptor, torch.tensor([0]), torch.tensor([0]))
    with pytest.raises(TypeError, match="dst must be a CacheDescriptor"):
        block_address_lists(base, "{}", torch.tensor([0]), torch.tensor([0]))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="src_block_ids must be a torch.Tensor"):
        block_address_lists(base, base, [0], torch.tensor([0]))  # type: ignore[arg-type]


def test_opcheck_block_ranges() -> None:
    torch.library.opcheck(OPS.block_ranges.default, tuple(operator_tables().values()))
