"""The demo's KV-transfer scenario: a Mooncake-style receive, one ``scatter_blocks`` call that writes
a TP-split ND staging buffer into the NZ caches of every layer, checked like the others."""

from __future__ import annotations

import torch

from ..api.transfer_ops import scatter_blocks
from ..dispatch import policy
from . import reference
from .demo import Scenario, _payload


def receive_scenario(name: str, layers: int, blocks: int, *, splits: int, block_size: int, heads: int = 8,
                     head_size: int = 128, dtype: torch.dtype = torch.float16, g: torch.Generator) -> Scenario:
    """``blocks`` blocks of ``splits`` prefill ranks' heads (staging ``[2, L, n, S, bs, H/S, D]``) into
    shuffled blocks of ``layers`` layers' NZ K and V caches, in one call."""
    num_blocks = 2 * blocks
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

    def decide() -> policy.Decision:
        """scatter_blocks has no kernel yet, so no backend choice (and explain() does not know it)."""
        on_host = caches.device.type == "cpu"
        return policy.Decision(
            "scatter_blocks", policy.requested_backend(), "host paths" if on_host else "device fallback",
            "scatter_blocks has no kernel yet: on the host the host paths copy its blocks (over torch's threads); "
            "on a device, the device fallback (ATen, one temporary of n blocks per cache)", str(caches.device))

    return Scenario(name, "scatter_blocks", run=run, reference=check, device=caches.device, decide=decide,
                    bytes_moved=2 * staging.nbytes)


def scenarios(scale: int, g: torch.Generator) -> list[Scenario]:
    """The transfer scenarios; ``scale`` divides the block count (1 = realistic shapes)."""
    blocks = max(2, 64 // scale)
    return [receive_scenario(f"scatter_blocks Mooncake receive: TP-split (S=2) ND staging of {blocks} blocks into "
                             "NZ caches of 32 layers in one call, block 128, 8x128 heads, float16", 32, blocks,
                             splits=2, block_size=128, g=g)]
