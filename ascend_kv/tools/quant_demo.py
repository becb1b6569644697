"""The demo's quantized-cache scenarios: a decode step writing vllm-ascend's C8 caches (bfloat16 tokens
to int8, per-channel inverse scale and offset) and a read of them dequantized to bfloat16."""

from __future__ import annotations

import torch

from ..api.ops import paged_cache_load, reshape_and_cache
from ..dispatch import policy
from . import reference
from .demo import Builder, Scenario

HEADS, HEAD_SIZE, BLOCK_SIZE = 8, 128, 128


def scenarios(scale: int, g: torch.Generator) -> list[Builder]:
    """The C8 decode step as one group, built when the demo reaches it."""
    return [lambda: _c8_step(scale, g)]


def _c8_step(scale: int, g: torch.Generator) -> list[Scenario]:
    """A C8 decode write of 64 tokens and a dequantized read of 8 sequences; ``scale`` divides the read's length."""
    tokens, read = 64, max(1, 1024 // scale)
    caches = 8 * -(-read // BLOCK_SIZE)
    num_blocks = caches + 1
    shape = (num_blocks, BLOCK_SIZE, HEADS, HEAD_SIZE)
    key_cache = torch.randint(-128, 128, shape, generator=g, dtype=torch.int8)
    value_cache = torch.randint(-128, 128, shape, generator=g, dtype=torch.int8)
    inv = (torch.rand(1, HEADS, HEAD_SIZE, generator=g) * 20 + 5).to(torch.bfloat16)   # C8's prepared [1, H, D] form
    offset = torch.randint(-8, 8, (1, HEADS, HEAD_SIZE), generator=g).to(torch.bfloat16)
    dequant_scale = (1 / inv.float()).to(torch.bfloat16)
    key = torch.randn(tokens, HEADS, HEAD_SIZE, generator=g).to(torch.bfloat16)
    value = torch.randn(tokens, HEADS, HEAD_SIZE, generator=g).to(torch.bfloat16)
    slots = torch.randperm(num_blocks * BLOCK_SIZE, generator=g)[:tokens].to(torch.int32)
    expected = (key_cache.clone(), value_cache.clone())

    def run_write() -> tuple[torch.Tensor, ...]:
        reshape_and_cache(key, value, key_cache, value_cache, slots, k_inv_scale=inv, k_offset=offset,
                          v_inv_scale=inv, v_offset=offset)
        return key_cache, value_cache

    def reference_write() -> tuple[torch.Tensor, ...]:
        reference.reshape_and_cache_quant(key, value, *expected, slots, k_inv_scale=inv, k_offset=offset,
                                          v_inv_scale=inv, v_offset=offset)
        return expected

    def run_read() -> tuple[torch.Tensor, ...]:
        return paged_cache_load(key_cache, value_cache, table, lens, kv_cache_cfg="nd", k_scale=dequant_scale,
                                k_offset=offset, v_scale=dequant_scale, v_offset=offset, out_dtype=torch.bfloat16)

    def reference_read() -> tuple[torch.Tensor, ...]:
        return reference.paged_cache_load_dequant(key_cache, value_cache, table, lens, kv_cache_cfg=1, k_scale=dequant_scale,
                                                  k_offset=offset, v_scale=dequant_scale, v_offset=offset,
                                                  out_dtype=torch.bfloat16)

    table = torch.randperm(num_blocks, generator=g)[:caches].reshape(8, -1).to(torch.int32)
    lens = torch.full((8,), read, dtype=torch.int32)
    write = Scenario(
        f"paged write C8 decode {tokens} x 1 token, 8x128 heads, bfloat16 -> int8 per-channel scale + offset",
        "ReshapeAndCacheOperation",
        run=run_write, reference=reference_write,
        device=key_cache.device, bytes_moved=tokens * HEADS * HEAD_SIZE * 2 * (2 + 1),
        decide=lambda: policy.explain("ReshapeAndCacheOperation", key_cache.device))
    gather = Scenario(
        f"paged C8 read 8 x {read} tokens, int8 -> bfloat16 dequantized", "PagedCacheLoadOperation",
        run=run_read, reference=reference_read,
        device=key_cache.device, bytes_moved=8 * read * HEADS * HEAD_SIZE * 2 * (1 + 2),
        decide=lambda: policy.explain("PagedCacheLoadOperation", key_cache.device))
    return [write, gather]
