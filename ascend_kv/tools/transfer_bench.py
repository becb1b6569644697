"""``ascend-kv bench --transfer``: a prefill-to-decode pull through TransferAgent against Mooncake alone.

A prefill process (this module with ``--serve``) holds transfer-ready caches; this process, the
decode side, pulls one request's blocks (64 blocks x 32 layers x K/V of 128 tokens x 8 heads x 128
fp16, 1 GiB; and a long-context request of 1024 blocks x 2 layers, also 1 GiB) over Mooncake's
TCP transport on loopback: ``TransferAgent.pull`` (address lists built, checked, then one
``batch_transfer_sync_read``) against Mooncake's own ``batch_transfer_sync_read`` of the same merged
ranges (target >= 0.9x), and against one range per (layer, K/V, block) as connectors move them
without merging (in batches of 1,024: Mooncake's TCP transport refuses 4,096). Also: the host time to build a request's address lists against a Python loop
building the same per-block list, and the regions a 64-layer model registers (target: a handful).
Medians of interleaved rounds; needs the ``mooncake`` extra.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence

import torch

from ..transfer import CacheDescriptor, TransferAgent, allocate_transfer_caches, block_address_lists
from ..transfer.agent import MAX_BATCH
from .quant_bench import _medians

HEADS, HEAD_SIZE, BLOCK_SIZE = 8, 128, 128
READY = "descriptor:"


#: Blocks each side holds beyond the request's: a request is never a whole cache (whose layers would merge).
SPARE = 8


def _caches(layers: int, blocks: int) -> TransferAgent:
    caches = allocate_transfer_caches(layers, blocks + SPARE, BLOCK_SIZE, HEADS, HEAD_SIZE, torch.float16)
    caches.buffer.random_(0, 256)
    return TransferAgent(caches, timeout=120.0)


def serve(layers: int, blocks: int) -> None:
    """The prefill side: print the descriptor, serve until stdin closes."""
    agent = _caches(layers, blocks)
    print(READY, agent.descriptor.to_json(), flush=True)
    sys.stdin.read()


def per_block_loop(src: CacheDescriptor, dst: CacheDescriptor, src_ids: list[int], dst_ids: list[int]
                   ) -> tuple[list[int], list[int], list[int]]:
    """The address lists as the connectors build them: a Python loop, one range per (segment, layer, block)."""
    src_addrs, dst_addrs, lengths = [], [], []
    for a, b in zip(src.segments, dst.segments):
        for src_base, dst_base in zip(a.bases, b.bases):
            for s, d in zip(src_ids, dst_ids):
                src_addrs.append(src_base + s * a.block_stride)
                dst_addrs.append(dst_base + d * b.block_stride)
                lengths.append(a.block_bytes)
    return src_addrs, dst_addrs, lengths


def request_rows(layers: int, blocks: int, warmup: int, repeats: int) -> dict[str, float]:
    """Seconds per pull of ``blocks`` blocks of every layer, each way, and per address-list build."""
    server = subprocess.Popen([sys.executable, "-m", "ascend_kv.tools.transfer_bench", "--serve",
                               f"{layers},{blocks}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = ""
        while not line.startswith(READY):
            line = server.stdout.readline()  # type: ignore[union-attr]
            if not line:
                raise RuntimeError("the prefill process exited before its descriptor")
        remote = CacheDescriptor.from_json(line[len(READY):])
        agent = _caches(layers, blocks)
        ids, remote_ids = torch.arange(blocks), torch.arange(SPARE, SPARE + blocks)  # the prefill's last blocks
        merged = [t.tolist() for t in block_address_lists(remote, agent.descriptor, remote_ids, ids)]
        unmerged = per_block_loop(remote, agent.descriptor, remote_ids.tolist(), ids.tolist())
        engine = agent._engine

        def raw(lists: list[list[int]] | tuple[list[int], ...]) -> None:
            for start in range(0, len(lists[2]), MAX_BATCH):  # TCP refuses batches of 4,096 ranges
                part = slice(start, start + MAX_BATCH)
                if engine.batch_transfer_sync_read(remote.session, lists[1][part], lists[0][part], lists[2][part]):
                    raise RuntimeError("Mooncake's batch_transfer_sync_read failed")

        times = _medians({"agent": lambda: agent.pull(remote, remote_ids, ids), "mooncake": lambda: raw(merged),
                          "unmerged": lambda: raw(unmerged)}, warmup, repeats)
        times.update(_medians({"lists": lambda: block_address_lists(remote, agent.descriptor, remote_ids, ids),
                               "loop": lambda: per_block_loop(remote, agent.descriptor, remote_ids.tolist(),
                                                              ids.tolist())}, warmup, repeats))
        times["bytes"] = float(sum(merged[2]))
        times["ranges"], times["per-block ranges"] = float(len(merged[2])), float(len(unmerged[2]))
        agent.close()
        return times
    finally:
        server.stdin.close()  # type: ignore[union-attr]
        server.wait(30)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ascend-kv bench --transfer", description=__doc__.splitlines()[0])
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tiny", action="store_true", help="shrink every workload (smoke test, not a measurement)")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.serve:
        serve(*(int(x) for x in args.serve.split(",")))
        return 0
    print(f"ascend-kv bench --transfer: Mooncake TCP on loopback, median of {args.repeats} rounds")
    workloads = (("request", 2, 4), ("long context", 2, 16)) if args.tiny else (("request", 32, 64),
                                                                                 ("long context", 2, 1024))
    for name, layers, blocks in workloads:
        t = request_rows(layers, blocks, args.warmup, args.repeats)
        mb = t["bytes"] / 1e6
        print(f"{name}: {blocks} blocks x {layers} layers x K/V of {BLOCK_SIZE}x{HEADS}x{HEAD_SIZE} fp16 ({mb:.0f} MB): "
              f"agent {mb / t['agent']:.0f} MB/s, Mooncake alone {mb / t['mooncake']:.0f} MB/s "
              f"({t['ranges']:.0f} ranges), ratio {t['mooncake'] / t['agent']:.2f}x (target >= 0.9x); one range per "
              f"block {mb / t['unmerged']:.0f} MB/s ({t['per-block ranges']:.0f} ranges); address lists "
              f"{t['lists'] * 1e6:.0f} us, Python loop {t['loop'] * 1e6:.0f} us")
    model = allocate_transfer_caches(64, 4, BLOCK_SIZE, HEADS, HEAD_SIZE, torch.float16, scale_dtype=torch.float32)
    print(f"registered regions, 64 layers with K/V and scale caches: {len(model.descriptor.regions)} (HCCL allows 256)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
