"""``ascend-kv bench --quant``: quantized caches against what callers do today.

Quantize-on-write (bfloat16 tokens to int8 per channel, vllm-ascend's C8: a bfloat16 inverse scale and
offset, 8 heads x 128) as one ``reshape_and_cache`` call, against the two-op composition in plain
torch on the same inputs (quantize, then ``reshape_and_cache`` of the int8 bytes): a prefill of
8 x 512 tokens and a decode step of 64 tokens (target: <= 0.6x the composition's time).
Dequantize-on-load of 8 x 2048 tokens (int8 to bfloat16, per-channel scale and offset) against
``Tensor.copy_`` of the output's bytes (target: >= 0.8x its throughput). Medians of interleaved
rounds, with torch's default threads."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence

import torch

from ..api.ops import paged_cache_load, reshape_and_cache
from . import reference

HEADS, HEAD_SIZE, BLOCK_SIZE = 8, 128, 128


def _medians(calls: dict[str, Callable[[], object]], warmup: int, repeats: int) -> dict[str, float]:
    """The median seconds of each call, rounds interleaved (so a slow spell of the machine hits each alike)."""
    for call in calls.values():
        for _ in range(warmup):
            call()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def write_rows(tokens: int, g: torch.Generator, warmup: int, repeats: int) -> dict[str, float]:
    """One quantizing write of ``tokens`` tokens against the two-op composition; seconds of each."""
    num_blocks = -(-tokens // BLOCK_SIZE) + 1
    shape = (num_blocks, BLOCK_SIZE, HEADS, HEAD_SIZE)
    key_cache, value_cache = torch.zeros(shape, dtype=torch.int8), torch.zeros(shape, dtype=torch.int8)
    key = torch.randn(tokens, HEADS, HEAD_SIZE, generator=g).to(torch.bfloat16)
    value = torch.randn(tokens, HEADS, HEAD_SIZE, generator=g).to(torch.bfloat16)
    inv = (torch.rand(1, HEADS, HEAD_SIZE, generator=g) * 20 + 5).to(torch.bfloat16)
    offset = torch.randint(-8, 8, (1, HEADS, HEAD_SIZE), generator=g).to(torch.bfloat16)
    slots = torch.randperm(num_blocks * BLOCK_SIZE, generator=g)[:tokens].to(torch.int32)

    def one_call() -> None:
        reshape_and_cache(key, value, key_cache, value_cache, slots, k_inv_scale=inv, k_offset=offset,
                          v_inv_scale=inv, v_offset=offset)

    def two_ops() -> None:
        reshape_and_cache(reference.quantize_static(key, torch.int8, inv_scale=inv, offset=offset),
                          reference.quantize_static(value, torch.int8, inv_scale=inv, offset=offset),
                          key_cache, value_cache, slots)

    return _medians({"one call": one_call, "two ops": two_ops}, warmup, repeats)


def load_rows(tokens: int, g: torch.Generator, warmup: int, repeats: int) -> dict[str, float]:
    """A dequantizing load of 8 sequences of ``tokens`` against copy_ of its output's bytes; seconds of each."""
    per_seq = -(-tokens // BLOCK_SIZE)
    num_blocks = 8 * per_seq + 1
    shape = (num_blocks, BLOCK_SIZE, HEADS, HEAD_SIZE)
    key_cache = torch.randint(-128, 128, shape, generator=g, dtype=torch.int8)
    value_cache = torch.randint(-128, 128, shape, generator=g, dtype=torch.int8)
    scale = (torch.rand(HEADS, HEAD_SIZE, generator=g) * 0.1).to(torch.bfloat16)
    offset = torch.randint(-8, 8, (HEADS, HEAD_SIZE), generator=g).to(torch.bfloat16)
    table = torch.randperm(num_blocks, generator=g)[:8 * per_seq].reshape(8, per_seq).to(torch.int32)
    lens = torch.full((8,), tokens, dtype=torch.int32)
    key = torch.empty(8 * tokens, HEADS, HEAD_SIZE, dtype=torch.bfloat16)
    value = torch.empty_like(key)
    source, target = torch.empty(2 * key.nbytes, dtype=torch.uint8), torch.empty(2 * key.nbytes, dtype=torch.uint8)

    def one_call() -> None:
        paged_cache_load(key_cache, value_cache, table, lens, kv_cache_cfg="nd", key=key, value=value,
                         k_scale=scale, k_offset=offset, v_scale=scale, v_offset=offset)

    return _medians({"one call": one_call, "copy_": lambda: target.copy_(source)}, warmup, repeats)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ascend-kv bench --quant", description=__doc__.splitlines()[0])
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--tiny", action="store_true", help="shrink every workload (smoke test, not a measurement)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    g = torch.Generator().manual_seed(0)
    scale = 64 if args.tiny else 1
    print(f"ascend-kv bench --quant: torch threads {torch.get_num_threads()}, median of {args.repeats} rounds")
    for name, tokens in ((f"quantize-on-write prefill 8 x {512 // scale} tokens", 8 * 512 // scale),
                         ("quantize-on-write decode 64 tokens", 64)):
        t = write_rows(tokens, g, args.warmup, args.repeats)
        print(f"{name}, 8x128 bf16 -> int8 per-channel: one call {t['one call'] * 1e3:.3f} ms, two ops "
              f"{t['two ops'] * 1e3:.3f} ms, ratio {t['one call'] / t['two ops']:.2f}x (target <= 0.6x)")
    tokens = 2048 // scale
    t = load_rows(tokens, g, args.warmup, args.repeats)
    print(f"dequantize-on-load 8 x {tokens} tokens, int8 -> bf16 per-channel: one call {t['one call'] * 1e3:.3f} ms, "
          f"copy_ of the output bytes {t['copy_'] * 1e3:.3f} ms, throughput ratio "
          f"{t['copy_'] / t['one call']:.2f}x (target >= 0.8x)")
    return 0
