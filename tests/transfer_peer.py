"""The prefill side of the two-process transfer tests (tests/test_mooncake_transfer.py), and what
both sides share: the cache geometries, the KV a prefill writes, and the blocks read back as ND.

Run as a script it is the prefill process: it allocates one set of transfer-ready caches per case,
writes a batch's KV into each with ``reshape_and_cache``, serves each with a TransferAgent, prints
``{case: descriptor JSON}`` as one line, and exits when its stdin closes.
"""

from __future__ import annotations

import json
import sys

import torch

import ascend_kv
from ascend_kv.transfer import TransferAgent, TransferCaches, allocate_transfer_caches

LAYERS, BLOCKS, BLOCK_SIZE, HEADS, HEAD_SIZE = 3, 32, 16, 4, 16
#: What starts the line of descriptors on the prefill's stdout (the engine may log there too).
READY = "descriptors:"
#: case -> (layout, dtype, scale dtype): the prefill's caches (TP 1, every head).
CASES = {"nd": ("nd", torch.float16, None), "hnd": ("hnd", torch.float16, None),
         "q8": ("nd", torch.int8, torch.float32)}


def prefill_caches(case: str, **options: object) -> TransferCaches:
    """A prefill's caches of ``case``, with every block written (the same bytes in every process)."""
    layout, dtype, scale_dtype = CASES[case]
    caches = allocate_transfer_caches(LAYERS, BLOCKS, BLOCK_SIZE, HEADS, HEAD_SIZE, dtype, layout=layout,
                                      scale_dtype=scale_dtype, alignment=1 << 16, **options)  # type: ignore[arg-type]
    fill(caches, seed=sorted(CASES).index(case))
    return caches


def fill(caches: TransferCaches, seed: int) -> None:
    """Every slot of every layer written by reshape_and_cache from seeded random KV (HND by its own layout)."""
    d = caches.descriptor
    generator = torch.Generator().manual_seed(seed)
    tokens = d.num_blocks * d.block_size
    slots = torch.arange(tokens)
    for layer in range(d.num_layers):
        key, value = (torch.randn(tokens, d.num_heads, d.head_size, generator=generator).half() for _ in range(2))
        k, v = caches.key_caches[layer], caches.value_caches[layer]
        if d.layout == "hnd":  # no writer takes HND: the ND blocks, transposed
            k.copy_(key.view(d.num_blocks, d.block_size, d.num_heads, d.head_size).transpose(1, 2))
            v.copy_(value.view(d.num_blocks, d.block_size, d.num_heads, d.head_size).transpose(1, 2))
        elif caches.key_scale_caches:
            ascend_kv.reshape_and_cache(key, value, k, v, slots, k_scale_cache=caches.key_scale_caches[layer],
                                        v_scale_cache=caches.value_scale_caches[layer])
        else:
            ascend_kv.reshape_and_cache(key, value, k, v, slots, kv_cache_cfg=d.layout)


def blocks_nd(cache: torch.Tensor, layout: str, ids: torch.Tensor) -> torch.Tensor:
    """Blocks ``ids`` of a data cache as ND rows ``[n, bs, H*D]`` (each layout's permutation, plainly)."""
    blocks = cache[ids]
    if layout == "hnd":
        blocks = blocks.transpose(1, 2)
    elif layout == "nz":  # [n, H*D // E, bs, E] -> [n, bs, H*D // E, E]
        blocks = blocks.permute(0, 2, 1, 3)
    return blocks.reshape(blocks.shape[0], blocks.shape[1], -1)


def main() -> None:
    agents = {case: TransferAgent(prefill_caches(case), timeout=10.0) for case in CASES}
    print(READY, json.dumps({case: agent.descriptor.to_json() for case, agent in agents.items()}), flush=True)
    sys.stdin.read()  # serve until the test closes the pipe


if __name__ == "__main__":
    main()
