"""The demo's block-management scenarios: a beam-search fork (``block_copy``), a fork over every
layer (``copy_blocks``), a Mooncake-style KV receive (``scatter_blocks``: a TP-split ND staging
buffer into the NZ caches of 32 layers in one call) and a KV offload round trip (``swap_blocks``),
checked like the others."""

from __future__ import annotations

import torch

from ..api.block_ops import block_copy, copy_blocks, swap_blocks
from ..api.layout import nd_to_nz
from ..api.transfer_ops import scatter_blocks
from ..dispatch import policy
from . import reference
from .demo import Builder, Scenario, _payload, lazily

#: The blocks of the received request: 32 layers of K and V at 256 KiB a block, staged and cached
#: (with the reference's copy), under 1 GB in all, so the demo fits a laptop (docs/benchmarks.md).
RECEIVED_BLOCKS = 16


def fork_scenario(name: str, sequences: int, beams: int, *, block_size: int, heads: int = 8, head_size: int = 128,
                  layout: str = "nd", dtype: torch.dtype = torch.float16, g: torch.Generator) -> Scenario:
    """Each sequence's last block copied to ``beams - 1`` fresh blocks (copy-on-write before the beams write)."""
    num_blocks = sequences * beams + 4
    order = torch.randperm(num_blocks, generator=g)
    src = order[:sequences].to(torch.int32)
    dst = order[sequences: sequences * beams].to(torch.int32)
    cum_sum = torch.arange(1, sequences + 1, dtype=torch.int32) * (beams - 1)

    def cache() -> torch.Tensor:
        nd = _payload((num_blocks, block_size, heads, head_size), dtype, g)
        return nd if layout == "nd" else nd_to_nz(nd)

    key_cache, value_cache = cache(), cache()
    args = (key_cache, value_cache, src, dst, cum_sum)
    expected = (key_cache.clone(), value_cache.clone(), src, dst, cum_sum)

    def run() -> tuple[torch.Tensor, ...]:
        block_copy(*args)
        return key_cache, value_cache

    def check() -> tuple[torch.Tensor, ...]:
        reference.block_copy(*expected)
        return expected[0], expected[1]

    return Scenario(name, "BlockCopyOperation", run=run, reference=check, device=key_cache.device,
                    bytes_moved=2 * dst.numel() * (key_cache[0].nbytes + value_cache[0].nbytes))


def layers_scenario(name: str, layers: int, pairs: int, *, block_size: int, heads: int = 8, head_size: int = 128,
                    dtype: torch.dtype = torch.bfloat16, g: torch.Generator) -> Scenario:
    """``pairs`` (src, dst) copies in every layer of vLLM's ``[layers, 2, num_blocks, ...]`` buffer, one call."""
    num_blocks = 2 * pairs + 2
    buf = _payload((layers, 2, num_blocks, block_size, heads, head_size), dtype, g)
    order = torch.randperm(num_blocks, generator=g)
    mapping = torch.stack([order[:pairs], order[pairs: 2 * pairs]], dim=1)
    keys, values = [buf[i, 0] for i in range(layers)], [buf[i, 1] for i in range(layers)]
    expected = buf.clone()

    def run() -> tuple[torch.Tensor, ...]:
        copy_blocks(keys, values, mapping)
        return (buf,)

    def check() -> tuple[torch.Tensor, ...]:
        reference.copy_blocks([expected[i, 0] for i in range(layers)], [expected[i, 1] for i in range(layers)],
                              mapping)
        return (expected,)

    return Scenario(name, "BlockCopyOperation", run=run, reference=check, device=buf.device,
                    bytes_moved=2 * pairs * 2 * layers * buf[0, 0, 0].nbytes)


def offload_scenario(name: str, blocks: int, *, block_size: int, heads: int = 8, head_size: int = 128,
                     dtype: torch.dtype = torch.float16, g: torch.Generator) -> Scenario:
    """A sequence's ``blocks`` blocks out to host memory and back into other blocks of the cache."""
    num_blocks = 2 * blocks + 2
    cache = _payload((num_blocks, block_size, heads, head_size), dtype, g)
    host = torch.empty((blocks, block_size, heads, head_size), dtype=dtype)
    order = torch.randperm(num_blocks, generator=g)
    out = torch.stack([order[:blocks], torch.arange(blocks)], dim=1)
    back = torch.stack([torch.arange(blocks), order[blocks: 2 * blocks]], dim=1)
    expected_cache, expected_host = cache.clone(), host.clone()

    def run() -> tuple[torch.Tensor, ...]:
        swap_blocks(cache, host, out)
        swap_blocks(host, cache, back)
        return cache, host

    def check() -> tuple[torch.Tensor, ...]:
        reference.swap_blocks(expected_cache, expected_host, out)
        reference.swap_blocks(expected_host, expected_cache, back)
        return expected_cache, expected_host

    def decide() -> policy.Decision:
        """swap_blocks has no kernel, so no backend choice (and explain() does not know it)."""
        on_host = cache.device.type == "cpu" and host.device.type == "cpu"
        return policy.Decision(
            "swap_blocks", policy.requested_backend(), "host paths" if on_host else "device copies",
            "swap_blocks has no kernel on any backend: between host tensors the host paths copy its blocks "
            "(over torch's threads); on or between devices, the runtime's copies (a gather, one copy, a scatter)",
            str(cache.device))

    return Scenario(name, "swap_blocks", run=run, reference=check, device=cache.device, decide=decide,
                    bytes_moved=2 * 2 * blocks * cache[0].nbytes)


def receive_scenario(name: str, layers: int, blocks: int, *, splits: int, block_size: int, heads: int = 8,
                     head_size: int = 128, dtype: torch.dtype = torch.float16, g: torch.Generator) -> Scenario:
    """``blocks`` blocks of ``splits`` prefill ranks' heads (staging ``[2, L, n, S, bs, H/S, D]``) into
    shuffled blocks of ``layers`` layers' NZ K and V caches, in one call."""
    num_blocks = blocks + 4
    t, e = heads * head_size, 32 // dtype.itemsize
    caches = _payload((layers, 2, num_blocks, t // e, block_size, e), dtype, g)   # per-layer views of one buffer
    keys, values = [caches[layer, 0] for layer in range(layers)], [caches[layer, 1] for layer in range(layers)]
    staging = _payload((2, layers, blocks, splits, block_size, heads // splits, head_size), dtype, g)
    ids = torch.randperm(num_blocks, generator=g)[:blocks].to(torch.int32)
    expected = caches.clone()

    def run() -> tuple[torch.Tensor, ...]:
        scatter_blocks(staging, keys, values, ids, src_layout="nd", head_splits=splits, cache_layout="nz")
        return (caches,)

    def check() -> tuple[torch.Tensor, ...]:
        reference.scatter_blocks(staging, [expected[layer, 0] for layer in range(layers)],
                                 [expected[layer, 1] for layer in range(layers)], ids, src_layout="nd",
                                 head_splits=splits, cache_layout="nz")
        return (expected,)

    return Scenario(name, "scatter_blocks", run=run, reference=check, device=caches.device,
                    bytes_moved=2 * staging.nbytes)


def scenarios(scale: int, g: torch.Generator) -> list[Builder]:
    """The block scenarios, each built when reached; ``scale`` divides the block size (1 = realistic shapes)."""
    block_size = max(1, 128 // scale)
    return [
        lazily(fork_scenario, f"block_copy beam-search fork: 8 sequences' last blocks to 3 more beams each, block "
               f"{block_size}, 8x128 heads, float16", 8, 4, block_size=block_size, g=g),
        lazily(fork_scenario, f"block_copy NZ fork: 4 sequences to 2 beams, block {max(16, block_size)}, bfloat16",
               4, 2, block_size=max(16, block_size), layout="nz", dtype=torch.bfloat16, g=g),
        lazily(layers_scenario, f"copy_blocks 32 layers x 16 pairs in one call (views of one buffer), block "
               f"{block_size}", 32, 16, block_size=block_size, head_size=128 // scale or 1, g=g),
        lazily(receive_scenario, f"scatter_blocks Mooncake receive: TP-split (S=2) ND staging of "
               f"{max(2, RECEIVED_BLOCKS // scale)} blocks into NZ caches of 32 layers in one call, block 128, 8x128 "
               "heads, float16", 32, max(2, RECEIVED_BLOCKS // scale), splits=2, block_size=128, g=g),
        lazily(offload_scenario, f"swap_blocks offload round trip: 16 blocks to host memory and back, block "
               f"{block_size}", 16, block_size=block_size, g=g),
    ]
