"""Transfer-ready caches (docs/semantics.md §17.1): one aligned allocation, block-indexed per-layer
views that the operators take, and a descriptor that survives JSON."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import ascend_kv
from ascend_kv.transfer import CacheDescriptor, allocate_transfer_caches


def views(caches: ascend_kv.transfer.TransferCaches) -> list[torch.Tensor]:
    return [*caches.key_caches, *caches.value_caches, *caches.key_scale_caches, *caches.value_scale_caches]


@settings(max_examples=20, deadline=None)
@given(layout=st.sampled_from(["nd", "hnd", "nz"]), layers=st.integers(1, 3), blocks=st.integers(1, 5),
       key_only=st.booleans(), scales=st.booleans(), alignment=st.sampled_from([64, 4096, 1 << 21]))
def test_one_aligned_allocation_of_contiguous_blocks(layout: str, layers: int, blocks: int, key_only: bool,
                                                     scales: bool, alignment: int) -> None:
    caches = allocate_transfer_caches(layers, blocks, 16, 2, 16, torch.int8 if scales else torch.float16,
                                      layout=layout, key_only=key_only,
                                      scale_dtype=torch.float32 if scales else None, alignment=alignment)
    d = caches.descriptor
    ((start, size),) = d.regions
    assert start % alignment == 0 and size % alignment == 0 and size == caches.buffer.numel()
    expected = {"nd": (16, 2, 16), "hnd": (2, 16, 16), "nz": (1 if scales else 2, 16, 32 if scales else 16)}[layout]
    assert all(k.shape == (blocks, *expected) for k in caches.key_caches)
    assert len(caches.value_caches) == (0 if key_only else layers)
    assert len(caches.key_scale_caches) == (layers if scales else 0)
    names = ["key"] + ["value"] * (not key_only) + ["key_scale"] * scales + ["value_scale"] * (scales and not key_only)
    assert [s.name for s in d.segments] == names
    spans = []
    for segment in d.segments:
        assert segment.block_stride == segment.block_bytes  # block after block: a run of blocks is one range
        for layer, view in enumerate(caches.caches(segment.name)):
            assert view.is_contiguous() and view.data_ptr() == segment.bases[layer]
            assert view.untyped_storage().data_ptr() == caches.buffer.untyped_storage().data_ptr()
            spans.append((view.data_ptr(), view.data_ptr() + view.nbytes))
        assert segment.bases[0] % alignment == 0  # each segment starts aligned
    spans.sort()
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # no two caches share a byte
    assert spans[0][0] >= start and spans[-1][1] <= start + size
    assert CacheDescriptor.from_json(d.to_json()) == d


def test_the_views_are_what_the_operators_take() -> None:
    """reshape_and_cache writes into the views, paged_cache_load reads the same tokens back."""
    caches = allocate_transfer_caches(2, 4, 16, 2, 16, layout="nz", alignment=256)
    key, value = torch.randn(40, 2, 16).half(), torch.randn(40, 2, 16).half()
    slots = torch.arange(40, dtype=torch.int32) + 16
    for layer in range(2):
        ascend_kv.reshape_and_cache(key, value, caches.key_caches[layer], caches.value_caches[layer], slots,
                                    kv_cache_cfg="nz")
    k, v = ascend_kv.paged_cache_load(caches.key_caches[1], caches.value_caches[1],
                                      torch.tensor([[1, 2, 3]], dtype=torch.int32), torch.tensor([40], dtype=torch.int32),
                                      kv_cache_cfg="nz")
    assert torch.equal(k.reshape(40, 2, 16).view(torch.int16), key.view(torch.int16))  # NZ loads [tokens, H*D]
    assert torch.equal(v.reshape(40, 2, 16).view(torch.int16), value.view(torch.int16))


def test_the_descriptor_says_the_tp_rank_and_its_heads() -> None:
    d = allocate_transfer_caches(1, 2, 16, 4, 8, tp_rank=1, tp_size=2, alignment=64).descriptor
    assert (d.head_start, d.num_heads, d.total_heads, d.tp_rank, d.tp_size) == (4, 4, 8, 1, 2)
    d = allocate_transfer_caches(1, 2, 16, 2, 8, tp_rank=3, tp_size=4, head_start=0, total_heads=2,
                                 alignment=64).descriptor  # replicated heads (more ranks than KV heads)
    assert (d.head_start, d.total_heads) == (0, 2)


@pytest.mark.parametrize(("options", "message"), [
    ({"num_layers": 0}, "num_layers must be >= 1, got 0"),
    ({"tp_rank": 2, "tp_size": 2}, r"tp_rank must be in \[0, tp_size = 2\), got 2"),
    ({"head_start": 7, "total_heads": 8}, "head_start = 7 with num_heads = 2 must lie in the model's total_heads = 8"),
    ({"alignment": 48}, "alignment must be a power of two, got 48"),
    ({"layout": "nz", "block_size": 8}, r"block_size \(8\) a multiple of 16"),
    ({"layout": "nhd"}, "layout must be one of"),
])
def test_bad_arguments_name_themselves(options: dict, message: str) -> None:
    arguments = {"num_layers": 1, "num_blocks": 2, "block_size": 16, "num_heads": 2, "head_size": 16}
    arguments.update(options)
    with pytest.raises(ValueError, match=message):
        allocate_transfer_caches(**arguments)


def _torch_can_pin() -> bool:
    """Whether this process's torch has a runtime that pins host memory (an NPU's, or the fake NPU's)."""
    try:
        torch.empty(1, pin_memory=True)
    except RuntimeError:
        return False
    return True


def test_pinned_caches_are_pinned_or_refused_by_name() -> None:
    arguments = {"num_layers": 1, "num_blocks": 2, "block_size": 16, "num_heads": 2, "head_size": 16}
    if not _torch_can_pin():
        with pytest.raises(ValueError, match="pin_memory=True needs an accelerator runtime"):
            allocate_transfer_caches(**arguments, pin_memory=True)
        return
    caches = allocate_transfer_caches(**arguments, pin_memory=True)
    assert caches.key_caches[0].is_pinned()


@pytest.mark.parametrize("options", [{"num_layers": 1}, {"tp_rank": 1, "tp_size": 2}, {"head_start": 6, "total_heads": 8},
                                     {"alignment": 1}, {"layout": "nz", "block_size": 16}])
def test_the_last_accepted_values(options: dict) -> None:
    arguments = {"num_layers": 1, "num_blocks": 2, "block_size": 16, "num_heads": 2, "head_size": 16}
    arguments.update(options)
    allocate_transfer_caches(**arguments)


def test_a_descriptor_from_elsewhere_is_checked() -> None:
    text = allocate_transfer_caches(2, 2, 16, 2, 16, alignment=64).descriptor.to_json()
    for bad, message in [(text.replace('"layout": "nd"', '"layout": "xy"'), "descriptor.layout must be one of"),
                         (text.replace('"tp_size": 1', '"tp_size": 0'), "descriptor.tp_size must be a positive int"),
                         (text.replace('"session": ""', '"sesion": ""'), r"missing \['session'\], unknown \['sesion'\]"),
                         ("[1]", "descriptor must be a JSON object")]:
        with pytest.raises(ValueError, match=message):
            CacheDescriptor.from_json(bad)
