"""ascend_kv.compat.vllm_ascend: vllm-ascend's ``torch.ops._C_ascend`` ops on a CPU, under vllm-ascend's
schemas, at vllm-ascend-style call sites (DSA's sliding-window and compressed writes, the indexer's
quantize then scatter), bit for bit against plain references; compiled equal to eager; the refusal
when vllm-ascend's own library is loaded.
"""

from __future__ import annotations

import pytest
import torch
from cases import bits_equal, random_bits

import ascend_kv
from ascend_kv.compat import torch_npu, vllm_ascend
from ascend_kv.tools import reference

vllm_ascend.register()
C_ASCEND = torch.ops._C_ascend


def test_the_schemas_are_vllm_ascends() -> None:
    assert str(C_ASCEND.npu_scatter_nd_update_v2.default._schema) == (
        "_C_ascend::npu_scatter_nd_update_v2(Tensor(a!) var, Tensor indices, Tensor update) -> ()")
    assert str(C_ASCEND.swap_blocks_batch.default._schema) == (
        "_C_ascend::swap_blocks_batch(Tensor x, Tensor y, Tensor z, int direction) -> ()")
    vllm_ascend.register()  # a second call does nothing


def test_dsa_sliding_window_and_compressed_writes() -> None:
    """Per layer, a sliding-window cache written by flat slots and a compressed cache (a column slice of
    one [nb, bs, 1, 512 + 64] buffer) written by (block, offset) pairs, with padding."""
    swa = random_bits((6, 16, 1, 64), torch.bfloat16, 1)
    both = random_bits((6, 16, 1, 576), torch.bfloat16, 2)
    compressed = both[..., :512]
    rows = random_bits((5, 1, 64), torch.bfloat16, 3)
    latent = random_bits((5, 1, 512), torch.bfloat16, 4)
    flat = torch.tensor([17, 95, -1, 3, 40], dtype=torch.int32)
    pairs = torch.tensor([[0, 3], [5, 15], [-1, -1], [2, 0], [1, 9]], dtype=torch.int64)
    want_swa, want_both = swa.clone(), both.clone()
    reference.scatter_nd_update(want_swa.view(-1, 1, 64), flat, rows)
    reference.scatter_nd_update(want_both[..., :512], pairs, latent)
    C_ASCEND.npu_scatter_nd_update_v2(swa.view(-1, 1, 64), flat.view(-1, 1), rows)
    C_ASCEND.npu_scatter_nd_update_v2(compressed, pairs, latent)
    assert bits_equal(swa, want_swa) and bits_equal(both, want_both)


def test_the_indexer_quantize_then_scatter_equals_one_reshape_and_cache() -> None:
    """vllm-ascend's A2/A3 indexer write (npu_dynamic_quant, then two scatters by pairs) and the one call."""
    n, d = 7, 128
    k = (torch.randn(n, d, generator=torch.Generator().manual_seed(5)) * 3).to(torch.bfloat16)
    pairs = torch.tensor([[1, 2], [0, 0], [-1, -1], [3, 15], [2, 7], [1, 3], [0, 15]], dtype=torch.int32)
    k_cache = random_bits((4, 16, 1, d), torch.int8, 6)
    scales = torch.full((4, 16, 1, 1), -7.0, dtype=torch.float16)
    one_cache, one_scales = k_cache.clone(), scales.clone()
    q, s = torch_npu.npu_dynamic_quant(k)
    C_ASCEND.npu_scatter_nd_update_v2(k_cache, pairs, q.view(n, 1, d))
    C_ASCEND.npu_scatter_nd_update_v2(scales, pairs, s.to(torch.float16).view(n, 1, 1))
    ascend_kv.reshape_and_cache(k.view(n, 1, d), None, one_cache, None, pairs, k_scale_cache=one_scales)
    assert bits_equal(k_cache, one_cache) and bits_equal(scales, one_scales)


def test_swap_blocks_batch_copies_host_tables() -> None:
    src = torch.arange(64, dtype=torch.uint8)
    dst = torch.zeros(64, dtype=torch.uint8)
    addresses = lambda t, offsets: torch.tensor([t.data_ptr() + o for o in offsets], dtype=torch.int64)
    C_ASCEND.swap_blocks_batch(addresses(src, [0, 32]), addresses(dst, [8, 40]), torch.tensor([8, 4]), 1)
    assert dst[8:16].tolist() == list(range(8)) and dst[40:44].tolist() == [32, 33, 34, 35]
    assert int(dst.sum()) == sum(range(8)) + 32 + 33 + 34 + 35


def test_rules_name_the_argument_and_write_nothing() -> None:
    cache = torch.zeros(3, 4, 8)
    with pytest.raises(ValueError, match=r"indices\[1\] = \(3, 0\) is out of range: var.shape\[:2\] = \(3, 4\)"):
        C_ASCEND.npu_scatter_nd_update_v2(cache, torch.tensor([[0, 0], [3, 0]]), torch.ones(2, 8))
    assert cache.count_nonzero() == 0



def _write(cache: torch.Tensor, pairs: torch.Tensor, rows: torch.Tensor) -> None:
    C_ASCEND.npu_scatter_nd_update_v2(cache[..., 2:], pairs, rows)


def test_compiled_equals_eager(fresh_compile: None) -> None:
    compiled = torch.compile(_write, backend="inductor", fullgraph=True)
    for n in (2, 3):
        cache = torch.randn(4, 8, 6)
        pairs = torch.stack([torch.arange(n) % 4, torch.arange(n) + 1], dim=1)
        pairs[0, 0] = -1
        rows = torch.randn(n, 4)
        eager, ran = cache.clone(), cache.clone()
        _write(eager, pairs, rows)
        compiled(ran, pairs, rows)
        assert bits_equal(ran, eager)


def test_register_refuses_when_vllm_ascends_library_is_loaded() -> None:
    """Another _C_ascend operator in the process (as vllm-ascend's library defines dozens): a RuntimeError naming it."""
    theirs = torch.library.Library("_C_ascend", "FRAGMENT")
    try:
        theirs.define("npu_sparse_flash_attention_stand_in(Tensor x) -> Tensor")
        with pytest.raises(RuntimeError, match=r"vllm-ascend's own library is loaded "
                                               r"\(torch.ops._C_ascend.npu_sparse_flash_attention_stand_in exists\)"):
            vllm_ascend.register()
    finally:
        theirs._destroy()
    vllm_ascend.register()


def test_the_docstring_example_runs() -> None:
    import doctest

    results = doctest.testmod(vllm_ascend, extraglobs={"torch": torch})
    assert results.failed == 0 and results.attempted > 0
