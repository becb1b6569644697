"""``ascend-kv bench``: every operation on named workloads, against ``Tensor.copy_`` of the same bytes.

For every workload, dtype, thread count and backend: the time per call over a model's layers
(one call per layer, each on its own layer's tensors, as a serving step makes them), the GB/s of
bytes moved (read + write), the ratio to ``copy_`` of the same number of bytes (a contiguous
tensor into a preallocated one, over as many distinct buffers) timed in the same rounds with the
same threads, and the speed-up over the literal reference (:mod:`ascend_kv.tools.reference`). A
loop over the layers moves at least :data:`LOOP_BYTES`, so each call finds its data out of the
CPU caches, while its code stays in them after the first layer. Also one call on its own
(``single``): the latency of a call whose code and data are all out of the caches. The op,
``copy_`` and the reference run interleaved, round by round, so a busy machine slows all of them
alike, and each timed loop or call starts after a sweep buffer is written, as in a serving step,
where the model's weights stream through the caches between two layers' cache operations.

Each row says where the operators ran the calls (``torch.ops.ascend_kv._runs()``: host paths,
sim, kernels or device fallback) and with how many intra-op threads: the host paths and
``copy_`` both run over torch's threads. Every workload is measured with each count of
``--threads``, by default torch's default count (the :data:`TARGETS`: bulk workloads >= 0.9x
``copy_``, goal 1.0x) and 1 (single-threaded: to be no slower than before; ``--baseline`` puts an
earlier run's JSON beside each row).

Usage: ``ascend-kv bench [--warmup N] [--repeats N] [--threads default,1] [--sweep-mb N]
[--backends fallback,sim] [--dtypes float16,int8] [--only SUBSTRING] [--reference-repeats N]
[--tiny] [--baseline PATH] [--json PATH] [--plot PATH]``; docs/benchmarks.md shows a run and
explains the numbers. ``ascend-kv bench --overhead [options]`` measures the host cost of a call
instead (:mod:`ascend_kv.tools.overhead`, with its own options). Each row is printed as soon as
it is measured, and stderr says what is being measured.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch

from ..api.block_ops import block_copy, copy_blocks, swap_blocks
from ..api.errors import BackendUnavailableError
from ..api.ops import kv_cache, paged_cache_load, reshape_and_cache
from ..api.params import KvCacheCfg
from ..api.sparse_ops import scatter_nd_update
from ..api.state_ops import copy_state_slots
from ..api.swap_batch import batch_memcpy
from ..api.transfer_ops import gather_blocks, scatter_blocks
from ..dispatch.policy import BACKEND_CHOICES, use_backend
from . import overhead as host_cost
from . import reference, runs
from .overhead import sweeper

ND, NZ = KvCacheCfg.K_CACHE_V_CACHE_ND, KvCacheCfg.K_CACHE_V_CACHE_NZ
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "int8": torch.int8}

#: Targets, as a fraction of ``copy_`` throughput with torch's default thread count, by workload kind
#: (the issue: prefill kv_cache, paged load ND and NZ, paged write prefill >= 0.9x; the block copies
#: keep the 0.8x they had).
TARGETS = {"prefill": 0.9, "paged-nd": 0.9, "paged-nz": 0.9, "write-prefill": 0.9, "block-copy": 0.8,
           "copy-blocks": 0.8, "copy-blocks-simultaneous": 0.9, "swap-bytes": 0.9, "gather-blocks": 0.9,
           "scatter-blocks": 0.9}
#: Goals, likewise.
GOALS = {"prefill": 1.0, "paged-nd": 1.0, "paged-nz": 1.0, "write-prefill": 1.0, "gather-blocks": 1.0,
         "scatter-blocks": 1.0}
#: The workload kinds that move bulk data (the others are decode steps: a few rows per sequence).
BULK = ("prefill", "paged-nd", "paged-nz", "write-prefill", "block-copy", "copy-blocks", "copy-blocks-simultaneous",
        "swap-bytes", "gather-blocks", "scatter-blocks", "state-slots", "batch-memcpy", "scatter-nd-prefill")
#: ``--threads``' word for torch's default intra-op thread count (the count when the run starts).
DEFAULT_THREADS = "default"

#: Bytes a loop over the layers moves at least: twice the 32 MB L3 of the machine measured, so
#: the data of each call is out of the CPU caches when it runs.
LOOP_BYTES = 64 << 20
#: The most layers in a loop (a model of 32 layers), and the most memory their tensors may take.
MAX_LAYERS = 32
LOOP_MEMORY_BYTES = 1 << 30


@dataclass(frozen=True)
class Workload:
    """A named call shape: ``kv_cache`` writes ``tokens`` rows of ``heads * head_size_k`` values per
    sequence; ``paged_cache_load`` gathers ``tokens`` cached tokens per sequence (see :func:`build`)."""

    name: str
    kind: str                 #: decode, prefill, paged-nd, paged-nz, write-decode, write-prefill, block-copy,
    #:                           copy-blocks, copy-blocks-simultaneous, swap-bytes, gather-blocks, scatter-blocks
    batch: int                #: sequences, or blocks copied (block-copy, copy-blocks)
    tokens: int               #: new tokens (kv_cache) or cached tokens (paged) per sequence
    heads: int = 8
    head_size_k: int = 128
    head_size_v: int = 128
    block_size: int = 128
    layout: str = "nd"        #: gather-blocks: the buffer's layout; scatter-blocks: the caches' (the other side ND)
    layers: int = 0           #: state-slots: layers of (conv, SSM) states, all in one call

    @property
    def op(self) -> str:
        if self.kind == "state-slots":
            return "copy_state_slots"
        if self.kind.startswith("scatter-nd"):
            return "scatter_nd_update"
        if self.kind in ("block-copy", "copy-blocks", "gather-blocks", "scatter-blocks", "batch-memcpy"):
            return self.kind.replace("-", "_")
        if self.kind == "copy-blocks-simultaneous":
            return "copy_blocks"
        if self.kind == "swap-bytes":
            return "swap_blocks"
        if self.kind.startswith("write"):
            return "reshape_and_cache"
        return "kv_cache" if self.kind in ("decode", "prefill") else "paged_cache_load"


def workloads(tiny: bool = False) -> list[Workload]:
    """The fixed workload list; ``tiny`` shrinks every shape (same names) for smoke tests."""
    full = [
        Workload("decode 64x1 h1024", "decode", 64, 1, 8, 128),
        Workload("decode 64x1 h4096", "decode", 64, 1, 32, 128),
        Workload("decode 256x1 h1024", "decode", 256, 1, 8, 128),
        Workload("decode 256x1 h4096", "decode", 256, 1, 32, 128),
        Workload("prefill 8x512 h1024", "prefill", 8, 512, 8, 128),
        Workload("prefill 8x512 h4096", "prefill", 8, 512, 32, 128),
        Workload("prefill 1x4096 h1024", "prefill", 1, 4096, 8, 128),
        Workload("prefill 1x4096 h4096", "prefill", 1, 4096, 32, 128),
        Workload("paged ND 8x2048 8x128", "paged-nd", 8, 2048, 8, 128, 128),
        Workload("paged ND 8x2048 MLA 512+64", "paged-nd", 8, 2048, 1, 512, 64),
        Workload("paged NZ 8x2048 8x128", "paged-nz", 8, 2048, 8, 128, 128),
        Workload("paged NZ 8x2048 MLA 512+64", "paged-nz", 8, 2048, 1, 512, 64),
        Workload("write decode 64x1 8x128", "write-decode", 64, 1, 8, 128, 128),
        Workload("write prefill 8x512 8x128", "write-prefill", 8, 512, 8, 128, 128),
        Workload("block_copy 64 blocks 8x128", "block-copy", 64, 1, 8, 128, 128),
        Workload("copy_blocks 64 blocks x 32 layers 8x128", "copy-blocks", 64, 1, 8, 128, 128),
        Workload("copy_blocks simultaneous 64 blocks x 32 layers 8x128", "copy-blocks-simultaneous", 64, 1, 8, 128,
                 128),
        Workload("swap_blocks 4-arg host to host 64 blocks 8x128", "swap-bytes", 64, 1, 8, 128, 128),

        Workload("gather_blocks ND->ND 64 blocks x 32 layers 8x128", "gather-blocks", 64, 1, 8, 128, 128),
        Workload("gather_blocks ND->NZ 64 blocks x 32 layers 8x128", "gather-blocks", 64, 1, 8, 128, 128, layout="nz"),
        Workload("scatter_blocks ND->ND 64 blocks x 32 layers 8x128", "scatter-blocks", 64, 1, 8, 128, 128),
        Workload("scatter_blocks ND->NZ 64 blocks x 32 layers 8x128", "scatter-blocks", 64, 1, 8, 128, 128,
                 layout="nz"),
        # Qwen3-Next-80B's linear-attention states at TP 8 (4 value heads of 128 x 128, conv kernel 4): per layer a
        # conv state [slots, 3, 1024] and an SSM state [slots, 4, 128, 128], views into vLLM's padded pages.
        Workload("copy_state_slots 64 pairs x 48 layers Qwen3-Next TP8", "state-slots", 64, 1, 4, 128, 128,
                 layers=48),
        # 1,024 ranges of block_size * head_size_k = 16 KiB.
        Workload("batch_memcpy 1024 x 16 KiB", "batch-memcpy", 1024, 1, 1, 128, 128),
        # DeepSeek's compressed KV (512 latent + 64 rope, bfloat16): the latent column of each row, by pairs.
        Workload("scatter_nd_update decode 64 pairs DSA 512 of 576", "scatter-nd-decode", 64, 1, 1, 512, 64),
        Workload("scatter_nd_update prefill 8x512 pairs DSA 512 of 576", "scatter-nd-prefill", 8, 512, 1, 512, 64),
    ]
    if not tiny:
        return full
    return [
        Workload(w.name, w.kind, min(w.batch, 4), max(1, w.tokens // 128), max(1, w.heads // 8),
                 w.head_size_k // 2, w.head_size_v // 2, 16, w.layout, min(w.layers, 2))
        for w in full
    ]


@dataclass
class Call:
    """One workload built for one dtype over ``layers`` layers: the calls to time and the bytes moved."""

    layers: int               #: layers in a loop, each with its own tensors
    loop: Callable[[], object]       #: the public call once per layer, in layer order
    single: Callable[[], object]     #: the public call on layer 0
    reference: Callable[[], object]  #: the literal reference on layer 0
    bytes_moved: int          #: bytes read + bytes written by one call
    #: The callers' own route to the same result, timed beside it: (what it is, the loop done that way).
    alternative: tuple[str, Callable[[], object]] | None = None


def _payload(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    if dtype == torch.int8:
        return torch.randint(-128, 128, shape, generator=g, dtype=torch.int8)
    return torch.randn(shape, generator=g).to(dtype)


def layers_for(bytes_moved: int, layer_bytes: int) -> int:
    """Layers in a loop: enough to move :data:`LOOP_BYTES`, within :data:`LOOP_MEMORY_BYTES`, 2 to :data:`MAX_LAYERS`.

    ``bytes_moved`` is what one call moves, ``layer_bytes`` what one layer's tensors hold.
    """
    return max(2, min(MAX_LAYERS, -(-LOOP_BYTES // bytes_moved), LOOP_MEMORY_BYTES // layer_bytes))


def build(w: Workload, dtype: torch.dtype, seed: int = 0) -> Call:
    """Tensors for workload ``w`` in ``dtype``, one set per layer (see :func:`layers_for`)."""
    g = torch.Generator().manual_seed(seed)
    builders = {"kv_cache": _kv_call, "paged_cache_load": _paged_call, "reshape_and_cache": _write_call,
                "block_copy": _block_call, "copy_blocks": _block_call, "swap_blocks": _swap_bytes_call,
                "gather_blocks": _transfer_call, "scatter_blocks": _transfer_call,
                "copy_state_slots": _state_slots_call, "batch_memcpy": _batch_memcpy_call,
                "scatter_nd_update": _scatter_nd_call}
    return builders[w.op](w, dtype, g)


def _kv_call(w: Workload, dtype: torch.dtype, g: torch.Generator) -> Call:
    """``past [layers, batch, max_seq_len, hidden]``, and each layer's own ``new_kv``."""
    hidden = w.heads * w.head_size_k
    max_seq_len = w.tokens if w.kind == "prefill" else 64
    row_bytes = hidden * dtype.itemsize
    bytes_moved = 2 * w.batch * w.tokens * row_bytes
    layers = layers_for(bytes_moved, (w.batch * max_seq_len + w.batch * w.tokens) * row_bytes)
    past = torch.zeros((layers, w.batch, max_seq_len, hidden), dtype=dtype)   # written: no page faults timed
    new_kv = [_payload((w.batch * w.tokens, hidden), dtype, g) for _ in range(layers)]
    seq_len = torch.full((w.batch,), w.tokens, dtype=torch.int32)
    if w.kind == "prefill":
        offset = torch.full((w.batch,), w.tokens, dtype=torch.int32)
    else:
        offset = torch.randint(1, max_seq_len + 1, (w.batch,), generator=g, dtype=torch.int32)

    def loop() -> None:
        for layer, rows in enumerate(new_kv):
            kv_cache(rows, layer, past, offset, seq_len)

    return Call(
        layers=layers,
        loop=loop,
        single=lambda: kv_cache(new_kv[0], 0, past, offset, seq_len),
        reference=lambda: reference.kv_cache(new_kv[0], 0, past, offset, seq_len),
        bytes_moved=bytes_moved,
    )


def _paged_call(w: Workload, dtype: torch.dtype, g: torch.Generator) -> Call:
    """One block table (a serving step shares it across layers); each layer's own caches and outputs."""
    layout = ND if w.kind == "paged-nd" else NZ
    per_seq = -(-w.tokens // w.block_size)
    num_blocks = w.batch * per_seq
    table = torch.randperm(num_blocks, generator=g).view(w.batch, per_seq).to(torch.int32)
    lens = torch.full((w.batch,), w.tokens, dtype=torch.int32)
    e = 32 // dtype.itemsize
    token_bytes = w.heads * (w.head_size_k + w.head_size_v) * dtype.itemsize  # key + value
    out_bytes = w.batch * w.tokens * token_bytes
    layers = layers_for(2 * out_bytes, out_bytes + num_blocks * w.block_size * token_bytes)
    sets = []                                               # per layer: (key_cache, value_cache, key, value)
    for _ in range(layers):
        caches, outputs = [], []
        for head_size in (w.head_size_k, w.head_size_v):
            row = w.heads * head_size
            shape = (num_blocks, w.block_size, w.heads, head_size) if layout == ND else (num_blocks, row // e, w.block_size, e)
            caches.append(_payload(shape, dtype, g))
            outputs.append(torch.zeros((w.batch * w.tokens, w.heads, head_size) if layout == ND
                                       else (w.batch * w.tokens, row), dtype=dtype))
        sets.append((*caches, *outputs))
    key_cache, value_cache, key, value = sets[0]

    def load(key_cache: torch.Tensor, value_cache: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
        paged_cache_load(key_cache, value_cache, table, lens, kv_cache_cfg=layout, key=key, value=value)

    def loop() -> None:
        for tensors in sets:
            load(*tensors)

    return Call(
        layers=layers,
        loop=loop,
        single=lambda: load(*sets[0]),
        reference=lambda: reference.paged_cache_load(
            key_cache, value_cache, table, lens, kv_cache_cfg=layout, key=key, value=value),
        bytes_moved=2 * out_bytes,
    )


def _write_slots(w: Workload, g: torch.Generator) -> tuple[int, torch.Tensor]:
    """``(num_blocks, slot_mapping)``: each sequence's tokens into its own blocks, dealt at random
    (decode: one token at a random position of the sequence's last block)."""
    per_seq = -(-w.tokens // w.block_size)
    num_blocks = w.batch * per_seq
    blocks = torch.randperm(num_blocks, generator=g).view(w.batch, per_seq)
    if w.kind == "write-decode":
        position = torch.randint(0, w.block_size, (w.batch,), generator=g)
        return num_blocks, (blocks[:, -1] * w.block_size + position).to(torch.int32)
    token = torch.arange(w.tokens)
    slots = blocks[:, token // w.block_size] * w.block_size + token % w.block_size     # [batch, tokens]
    return num_blocks, slots.reshape(-1).to(torch.int32)


def _write_call(w: Workload, dtype: torch.dtype, g: torch.Generator) -> Call:
    """One slot mapping (shared by the layers of a step); each layer's own caches and new tokens."""
    num_blocks, slots = _write_slots(w, g)
    tokens = w.batch * w.tokens
    token_bytes = w.heads * (w.head_size_k + w.head_size_v) * dtype.itemsize   # key + value
    bytes_moved = 2 * tokens * token_bytes
    layers = layers_for(bytes_moved, (num_blocks * w.block_size + tokens) * token_bytes)
    sets = []                                                   # per layer: (key, value, key_cache, value_cache)
    for _ in range(layers):
        key, value = (_payload((tokens, w.heads, size), dtype, g) for size in (w.head_size_k, w.head_size_v))
        key_cache, value_cache = (torch.zeros((num_blocks, w.block_size, w.heads, size), dtype=dtype)  # written
                                  for size in (w.head_size_k, w.head_size_v))                          # (no page faults)
        sets.append((key, value, key_cache, value_cache))
    key, value, key_cache, value_cache = sets[0]

    def loop() -> None:
        for k, v, k_cache, v_cache in sets:
            reshape_and_cache(k, v, k_cache, v_cache, slots)

    return Call(
        layers=layers,
        loop=loop,
        single=lambda: reshape_and_cache(key, value, key_cache, value_cache, slots),
        reference=lambda: reference.reshape_and_cache(key, value, key_cache, value_cache, slots),
        bytes_moved=bytes_moved,
    )


def _block_call(w: Workload, dtype: torch.dtype, g: torch.Generator) -> Call:
    """``w.batch`` blocks copied to as many others in each layer's K and V caches; ``block_copy`` one
    call per layer, ``copy_blocks`` one call for all :data:`MAX_LAYERS` layers (vLLM's form)."""
    simultaneous = w.kind == "copy-blocks-simultaneous"
    pairs, num_blocks = w.batch, 2 * w.batch + (4 if simultaneous else 0)
    block_bytes = w.block_size * w.heads * (w.head_size_k + w.head_size_v) * dtype.itemsize   # key + value
    bytes_moved = 2 * pairs * block_bytes
    layers = MAX_LAYERS if w.kind != "block-copy" else layers_for(bytes_moved, num_blocks * block_bytes)
    sets = [(torch.zeros((num_blocks, w.block_size, w.heads, w.head_size_k), dtype=dtype),   # written: no page faults
             torch.zeros((num_blocks, w.block_size, w.heads, w.head_size_v), dtype=dtype)) for _ in range(layers)]
    order = torch.randperm(num_blocks, generator=g)
    src, dst = order[:pairs].to(torch.int32), order[pairs:2 * pairs].to(torch.int32)
    cum_sum = torch.arange(1, pairs + 1, dtype=torch.int32)
    if simultaneous:  # the last 4 pairs: two swaps (a <-> b, c <-> d), which stage 4 source blocks
        a, b, c, d = order[2 * pairs:].tolist()
        src[-4:], dst[-4:] = torch.tensor([a, b, c, d]), torch.tensor([b, a, d, c])
    mapping = torch.stack([src, dst], dim=1)
    keys, values = [k for k, _ in sets], [v for _, v in sets]
    first_key, first_value = sets[0]

    def loop() -> None:
        if w.kind != "block-copy":
            copy_blocks(keys, values, mapping, simultaneous=simultaneous)
            return
        for key_cache, value_cache in sets:
            block_copy(key_cache, value_cache, src, dst, cum_sum)

    return Call(
        layers=layers,
        loop=loop,
        single=lambda: block_copy(first_key, first_value, src, dst, cum_sum) if w.kind == "block-copy"
        else copy_blocks(keys[:1], values[:1], mapping, simultaneous=simultaneous),
        reference=lambda: reference.simultaneous_copy([first_key, first_value], mapping.tolist()) if simultaneous
        else reference.block_copy(first_key, first_value, src, dst, cum_sum),
        bytes_moved=bytes_moved,
    )


def _swap_bytes_call(w: Workload, dtype: torch.dtype, g: torch.Generator) -> Call:
    """vLLM's 4-argument ``swap_blocks`` between host tensors: ``w.batch`` blocks of a key cache
    (``block_size_in_bytes`` one block) into a host buffer of as many blocks, one call per layer."""
    block_bytes = w.block_size * w.heads * w.head_size_k * dtype.itemsize
    bytes_moved = 2 * w.batch * block_bytes
    num_blocks = 2 * w.batch
    layers = layers_for(bytes_moved, 3 * w.batch * block_bytes)
    sets = [(_payload((num_blocks, w.block_size, w.heads, w.head_size_k), dtype, g),
             torch.zeros((w.batch, w.block_size, w.heads, w.head_size_k), dtype=dtype)) for _ in range(layers)]
    order = torch.randperm(num_blocks, generator=g)[: w.batch]
    mapping = torch.stack([order, torch.randperm(w.batch, generator=g)], dim=1)
    first_src, first_dst = sets[0]

    def loop() -> None:
        for src, dst in sets:
            swap_blocks(src, dst, block_bytes, mapping)

    return Call(
        layers=layers,
        loop=loop,
        single=lambda: swap_blocks(first_src, first_dst, block_bytes, mapping),
        reference=lambda: reference.swap_blocks_bytes(first_src, first_dst, block_bytes, mapping),
        bytes_moved=bytes_moved,
    )


def _transfer_call(w: Workload, dtype: torch.dtype, g: torch.Generator) -> Call:
    """``w.batch`` blocks of :data:`MAX_LAYERS` layers' K and V caches gathered into one buffer, or
    scattered from one, in one call; the side ``w.layout`` names is relaid out (ND caches to an NZ
    buffer, an ND buffer to NZ caches)."""
    layers, blocks, e = MAX_LAYERS, w.batch, 32 // dtype.itemsize
    nd_block = (w.block_size, w.heads, w.head_size_k)
    nz_block = (w.heads * w.head_size_k // e, w.block_size, e)
    gather = w.kind == "gather-blocks"
    cache_block = nz_block if w.layout == "nz" and not gather else nd_block
    buffer_block = nz_block if w.layout == "nz" and gather else nd_block
    keys = [torch.zeros((blocks, *cache_block), dtype=dtype) for _ in range(layers)]   # written: no page faults
    values = [torch.zeros((blocks, *cache_block), dtype=dtype) for _ in range(layers)]
    buffer = _payload((2, layers, blocks, *buffer_block), dtype, g)
    ids = torch.randperm(blocks, generator=g).to(torch.int32)
    reference_buffer = buffer[:, :1].clone()

    def call(count: int, out: torch.Tensor) -> None:
        if gather:
            gather_blocks(keys[:count], values[:count], ids, out, out_layout=w.layout)
        else:
            scatter_blocks(out, keys[:count], values[:count], ids, cache_layout=w.layout)

    def check() -> None:
        if gather:
            reference.gather_blocks(keys[:1], values[:1], ids, reference_buffer, out_layout=w.layout)
        else:
            reference.scatter_blocks(reference_buffer, keys[:1], values[:1], ids, cache_layout=w.layout)

    return Call(
        layers=layers,
        loop=lambda: call(layers, buffer),
        single=lambda: call(1, buffer[:, :1]),
        reference=check,
        bytes_moved=2 * 2 * blocks * keys[0][0].nbytes,                      # per layer: K and V, read + write
    )


def _state_slots_call(w: Workload, dtype: torch.dtype, g: torch.Generator) -> Call:
    """``w.batch`` slot pairs over ``w.layers`` layers' conv states ``[slots, 3, H * (K + V)]`` and SSM
    states ``[slots, H, K, V]`` (``H = w.heads``, ``K, V = w.head_size_k, w.head_size_v``), each layer's
    two states views into one page per slot (vLLM's hybrid pages, 64 bytes of padding after each state),
    in one call; the alternative is the temporary route, ``index_select`` then ``index_copy_`` per state."""
    conv_shape = (3, w.heads * (w.head_size_k + w.head_size_v))
    ssm_shape = (w.heads, w.head_size_k, w.head_size_v)
    item = dtype.itemsize
    conv_bytes, ssm_bytes = 3 * conv_shape[1] * item, w.heads * w.head_size_k * w.head_size_v * item
    page = conv_bytes + 64 + ssm_bytes + 64
    slots = 2 * w.batch + 1
    layers = max(2, w.layers)
    pages = [torch.zeros((slots, page), dtype=torch.uint8) for _ in range(layers)]   # written: no page faults
    for p in pages:
        p.copy_(torch.randint(0, 256, p.shape, generator=g, dtype=torch.uint8))
    states = [view for p in pages for view in (
        p[:, :conv_bytes].view(dtype).view(slots, *conv_shape),
        p[:, conv_bytes + 64:conv_bytes + 64 + ssm_bytes].view(dtype).view(slots, *ssm_shape))]
    order = torch.randperm(slots, generator=g)
    src, dst = order[:w.batch], order[w.batch:2 * w.batch]

    def temporaries() -> None:
        for state in states:
            state.index_copy_(0, dst, state.index_select(0, src))

    return Call(
        layers=layers,
        loop=lambda: copy_state_slots(states, src, dst),
        single=lambda: copy_state_slots(states[:2], src, dst),
        reference=lambda: reference.copy_state_slots(states[:2], src, dst),
        bytes_moved=2 * w.batch * (conv_bytes + ssm_bytes),              # per layer: read + write
        alternative=("index_select + index_copy_", temporaries),
    )


def _scatter_nd_call(w: Workload, dtype: torch.dtype, g: torch.Generator) -> Call:
    """DSA's compressed-KV write: per layer a cache ``[num_blocks, block_size, 1, K + V]`` of which rows
    ``[..., :K]`` (``K, V = w.head_size_k, w.head_size_v``; a column slice, strided) take ``w.batch *
    w.tokens`` rows at ``(block, offset)`` pairs (each sequence in its own blocks, as reshape_and_cache's
    workloads); the alternative is ``index_copy_`` of the same rows into the flat ``[slots, 1, K]`` view."""
    num_blocks, slots = _write_slots(replace(w, kind="write-decode" if w.tokens == 1 else "write"), g)
    rows = slots.numel()
    pairs = torch.stack([slots // w.block_size, slots % w.block_size], dim=1)
    row_bytes = w.head_size_k * dtype.itemsize
    bytes_moved = 2 * rows * row_bytes
    layer_bytes = num_blocks * w.block_size * (w.head_size_k + w.head_size_v) * dtype.itemsize + rows * row_bytes
    layers = layers_for(bytes_moved, layer_bytes)
    sets = []                                                   # per layer: (cache view, rows)
    for _ in range(layers):
        both = torch.zeros((num_blocks, w.block_size, 1, w.head_size_k + w.head_size_v), dtype=dtype)  # written
        sets.append((both[..., :w.head_size_k], _payload((rows, 1, w.head_size_k), dtype, g)))
    flat = slots.to(torch.int64)

    def loop() -> None:
        for cache, new in sets:
            scatter_nd_update(cache, pairs, new)

    def index_copies() -> None:
        for cache, new in sets:
            cache.view(-1, 1, w.head_size_k).index_copy_(0, flat, new)

    return Call(
        layers=layers,
        loop=loop,
        single=lambda: scatter_nd_update(sets[0][0], pairs, sets[0][1]),
        reference=lambda: reference.scatter_nd_update(sets[0][0], pairs, sets[0][1]),
        bytes_moved=bytes_moved,
        alternative=("index_copy_", index_copies),
    )


def _batch_memcpy_call(w: Workload, dtype: torch.dtype, g: torch.Generator) -> Call:
    """``w.batch`` ranges of ``w.block_size * w.head_size_k`` bytes between two host buffers, the
    destinations a permutation of the buffer's ranges, one call per set of buffers; the alternative
    is vLLM's loop without the kernel, one ``copy_`` per range."""
    size, n = w.block_size * w.head_size_k, w.batch
    bytes_moved = 2 * n * size
    layers = layers_for(bytes_moved, bytes_moved)
    sets = []
    for _ in range(layers):
        src = torch.randint(0, 256, (n, size), generator=g, dtype=torch.uint8)
        dst = torch.zeros((n, size), dtype=torch.uint8)                         # written: no page faults
        targets = torch.randperm(n, generator=g)
        tables = (torch.tensor([src[i].data_ptr() for i in range(n)]),
                  torch.tensor([dst[int(t)].data_ptr() for t in targets]), torch.full((n,), size, dtype=torch.int32))
        sets.append((tables, [(src[i], dst[int(t)]) for i, t in enumerate(targets)]))

    def loop() -> None:
        for tables, _ in sets:
            batch_memcpy(*tables)

    def copies() -> None:
        for _, pairs in sets:
            for source, target in pairs:
                target.copy_(source)

    return Call(
        layers=layers,
        loop=loop,
        single=lambda: batch_memcpy(*sets[0][0]),
        reference=lambda: reference.batch_memcpy(*sets[0][0]),
        bytes_moved=bytes_moved,
        alternative=("a loop of copy_", copies),
    )


def interleaved(
    fns: Mapping[str, Callable[[], object]], warmup: int, repeats: Mapping[str, int],
    sweep: Callable[[], object] | None = None,
) -> dict[str, list[float]]:
    """Seconds per call of each function, timed round by round (function ``k`` in ``repeats[k]`` rounds),
    each timed call after ``sweep()`` when given."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for round_ in range(max(repeats.values())):
        for name, fn in fns.items():
            if round_ < repeats[name]:
                if sweep is not None:
                    sweep()
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    return times


def _copies_of(nbytes: int, count: int) -> Callable[[], object]:
    """``copy_`` of ``count`` contiguous tensors, each moving ``nbytes`` (read + write), into preallocated ones."""
    pairs = [(torch.ones(nbytes // 2, dtype=torch.uint8), torch.zeros(nbytes // 2, dtype=torch.uint8))
             for _ in range(count)]                                              # touched: no page faults timed

    def copies() -> None:
        for src, dst in pairs:
            dst.copy_(src)

    return copies


def measure(w: Workload, dtype: torch.dtype, backends: Sequence[str], warmup: int, repeats: int,
            reference_repeats: int, sweep: Callable[[], object] | None = None, call: Call | None = None,
            default_threads: int | None = None, baseline: Mapping[tuple[str, str, str, int], float] | None = None,
            ) -> list[dict[str, Any]]:
    """One result row per backend for workload ``w`` in ``dtype`` with torch's current thread count
    (each timed loop or call after ``sweep()``; ``call``: ``build(w, dtype)`` made already).

    Per backend, the loop over the layers (``median_s`` is per call) and the single call, with
    ``copy_`` of the same bytes timed in the same rounds with the same threads, and where the
    operators counted the calls (:mod:`ascend_kv.tools.runs`). The targets apply with
    ``default_threads`` (default: the current count); ``baseline`` maps (workload, dtype, backend,
    threads) to an earlier run's ``median_s`` (:func:`load_baseline`).
    """
    call = build(w, dtype) if call is None else call
    threads = torch.get_num_threads()
    fns: dict[str, Callable[[], object]] = {"copy_": _copies_of(call.bytes_moved, call.layers),
                                            "single copy_": _copies_of(call.bytes_moved, 1)}
    unavailable: dict[str, str] = {}
    ran: dict[str, str] = {}
    for name in backends:
        fns[name] = _on_backend(name, call.loop)
        try:
            _, ran[name] = runs.ran(fns[name])
        except BackendUnavailableError as error:
            unavailable[name] = str(error)
            del fns[name]
            continue
        fns[f"single {name}"] = _on_backend(name, call.single)
    if call.alternative is not None:
        fns["alternative"] = call.alternative[1]
    counts = {name: repeats for name in fns}
    if reference_repeats:
        fns["reference"] = call.reference
        counts["reference"] = reference_repeats
    times = interleaved(fns, warmup, counts, sweep)
    copy_s = statistics.median(times["copy_"]) / call.layers
    single_copy_s = statistics.median(times["single copy_"])
    ref_s = statistics.median(times["reference"]) if reference_repeats else None
    alternative_s = statistics.median(times["alternative"]) / call.layers if call.alternative else None
    dtype_name = str(dtype).removeprefix("torch.")
    at_default = threads == (threads if default_threads is None else default_threads)
    rows: list[dict[str, Any]] = [
        {"workload": w.name, "dtype": dtype_name, "backend": name, "threads": threads, "unavailable": why}
        for name, why in unavailable.items()
    ]
    for name in (n for n in backends if n in fns):
        median = statistics.median(times[name]) / call.layers
        single = statistics.median(times[f"single {name}"])
        base = None if baseline is None else baseline.get((w.name, dtype_name, name, threads))
        rows.append({
            "workload": w.name, "kind": w.kind, "op": w.op, "bulk": w.kind in BULK, "dtype": dtype_name,
            "backend": name, "threads": threads, "ran": ran[name],
            "bytes_moved": call.bytes_moved, "layers": call.layers,
            "median_s": median, "min_s": min(times[name]) / call.layers, "gb_per_s": call.bytes_moved / median / 1e9,
            "copy_median_s": copy_s, "copy_gb_per_s": call.bytes_moved / copy_s / 1e9,
            "ratio_to_copy": copy_s / median,
            "target_ratio_to_copy": TARGETS.get(w.kind) if at_default else None,
            "goal_ratio_to_copy": GOALS.get(w.kind) if at_default else None,
            "single_median_s": single, "single_copy_median_s": single_copy_s,
            "single_ratio_to_copy": single_copy_s / single,
            "reference_median_s": ref_s, "reference_repeats": reference_repeats,
            "speedup_over_reference": None if ref_s is None else ref_s / single,
            "baseline_median_s": base, "speedup_over_baseline": None if base is None else base / median,
            "alternative": call.alternative[0] if call.alternative else None, "alternative_median_s": alternative_s,
            "ratio_to_alternative": None if alternative_s is None else alternative_s / median,
        })
    return rows


def load_baseline(path: str) -> dict[tuple[str, str, str, int], float]:
    """An earlier run's ``--json`` (this bench's, or an older tree's): (workload, dtype, backend, threads)
    to its ``median_s`` (rows without ``threads`` ran with the run's ``settings.threads``)."""
    with open(path, encoding="utf-8") as file:
        data = json.load(file)
    run_threads = data.get("settings", {}).get("threads")
    base: dict[tuple[str, str, str, int], float] = {}
    for row in data["results"]:
        if "unavailable" in row:
            continue
        threads = row.get("threads", run_threads)
        if isinstance(threads, int):
            base[row["workload"], row["dtype"], row["backend"], threads] = row["median_s"]
    return base


def _on_backend(name: str, run: Callable[[], object]) -> Callable[[], object]:
    def on_backend() -> object:
        with use_backend(name):
            return run()
    return on_backend


def machine() -> dict[str, Any]:
    """What the numbers were measured on, and torch's intra-op parallelism."""
    parallel = torch.__config__.parallel_info().splitlines()
    backend = next((line.split(":", 1)[1].strip() for line in parallel if line.startswith("ATen parallel backend")),
                   None)
    return {**host_cost.machine(), "intra_op_threads": torch.get_num_threads(), "parallel_backend": backend}


_HEAD = f"{'workload':28} {'dtype':8} {'backend':9} {'threads':>7} {'ran':15} {'layers':>6} {'ms/call':>8} " \
        f"{'GB/s':>6} {'x copy_':>7} {'target':>6} {'single x copy_':>14} {'x ref':>7} {'x base':>6} {'x alt':>6}"
#: The table's header lines, printed before the first row is measured.
TABLE_HEAD = [_HEAD, "-" * len(_HEAD)]
TABLE_NOTE = ("threads: torch's intra-op threads, for the op and copy_ alike; ran: where the operators counted the "
              "calls (host paths, sim, kernels, device fallback); ms/call, GB/s, x copy_: per call in a loop over "
              "the layers, each layer's tensors its own, against copy_ of the same bytes in the same rounds; target: "
              "x copy_ at torch's default thread count (goal 1.0 in the JSON); single: one call on its own; x ref: "
              "single, over the literal reference; x base: ms/call of --baseline's row over this one (> 1: faster); x alt: "
              "ms/call of the callers' own route (the JSON's alternative: index_select + index_copy_ for state slots, a "
              "loop of copy_ for batch_memcpy, index_copy_ for scatter_nd_update), in the same rounds, over this one (> 1: faster)")


def format_row(r: dict[str, Any]) -> str:
    """One result row of :func:`measure` as a line of the table under :data:`TABLE_HEAD`."""
    if "unavailable" in r:
        return f"{r['workload']:28} {r['dtype']:8} {r['backend']:9} {r['threads']:7} unavailable: {r['unavailable']}"
    target = f"{r['target_ratio_to_copy']:.1f}" if r["target_ratio_to_copy"] else "-"
    speedup = f"{r['speedup_over_reference']:.1f}" if r["speedup_over_reference"] is not None else "-"
    base = f"{r['speedup_over_baseline']:.2f}" if r["speedup_over_baseline"] is not None else "-"
    alternative = f"{r['ratio_to_alternative']:.2f}" if r["ratio_to_alternative"] is not None else "-"
    return (
        f"{r['workload']:28} {r['dtype']:8} {r['backend']:9} {r['threads']:7} {r['ran']:15} {r['layers']:6} "
        f"{r['median_s'] * 1e3:8.3f} {r['gb_per_s']:6.2f} {r['ratio_to_copy']:7.2f} {target:>6} "
        f"{r['single_ratio_to_copy']:14.2f} {speedup:>7} {base:>6} {alternative:>6}"
    )


def plot(rows: list[dict[str, Any]], path: str) -> None:
    """A bar chart of the ratio to ``copy_`` per workload and dtype, on a log axis, each bar labelled with its
    value, with the targets."""
    rows = [r for r in rows if "unavailable" not in r]
    import matplotlib  # main() checked that it is installed before measuring

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = list(dict.fromkeys(f"{r['workload']} {r['dtype']}" for r in rows))
    series: dict[str, dict[str, float]] = {}                                     # bar label -> row label -> ratio
    for r in rows:
        label = f"{r['workload']} {r['dtype']}"
        threads = f"{r['threads']} thread{'s' if r['threads'] != 1 else ''}"
        series.setdefault(f"{r['backend']}, {threads}, over the layers", {})[label] = r["ratio_to_copy"]
        series.setdefault(f"{r['backend']}, {threads}, one call on its own", {})[label] = r["single_ratio_to_copy"]
    values = [value for ratio in series.values() for value in ratio.values()]
    left, right = min(0.1, min(values) / 2), max(2.0, max(values) * 2)   # log axis: no outlier squashes the rest
    fig, ax = plt.subplots(figsize=(10, 0.22 * len(labels) * len(series) + 1.5))
    height = 0.8 / len(series)
    for i, (name, ratio) in enumerate(series.items()):
        bars = [(j + i * height, ratio[label]) for j, label in enumerate(labels) if label in ratio]
        drawn = ax.barh([y for y, _ in bars], [value - left for _, value in bars], left=left, height=height, label=name)
        ax.bar_label(drawn, labels=[f"{value:.2g}" for _, value in bars], fontsize=6, padding=2)
    ax.set_xscale("log")
    ax.set_xlim(left, right)
    for value, style in ((0.9, "--"), (0.8, ":"), (1.0, "-")):
        ax.axvline(value, color="gray", linestyle=style, linewidth=1)
    ax.set_yticks([j + 0.4 - height / 2 for j in range(len(labels))], labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("throughput / Tensor.copy_ of the same bytes, same run, same threads (log scale; targets at "
                  "torch's default threads: 0.9 bulk, 0.8 block copies; goal 1.0)")
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _progress(step: str) -> None:
    """Say on stderr what is measured next (the table rows go to stdout as each is measured)."""
    print(f"ascend-kv bench: measuring {step} ...", file=sys.stderr, flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ascend-kv bench", description=__doc__.splitlines()[0])
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first (default 2)")
    parser.add_argument("--repeats", type=int, default=15, help="timed rounds; the median is reported (default 15)")
    parser.add_argument("--threads", default=f"{DEFAULT_THREADS},1",
                        help="comma-separated torch.set_num_threads counts, each workload measured with each, the op "
                             f"and copy_ alike; '{DEFAULT_THREADS}' is torch's default count (the count when the run "
                             f"starts); default '{DEFAULT_THREADS},1'")
    parser.add_argument("--sweep-mb", type=int, default=64,
                        help="MB written before every timed loop or call to start it with cold CPU caches, as in a "
                             "serving step; 0 times back to back (default 64)")
    parser.add_argument("--backends", default="fallback",
                        help="comma-separated: fallback, sim (slow: a simulator), npu (default fallback)")
    parser.add_argument("--dtypes", default="float16,int8", help="comma-separated (default float16,int8)")
    parser.add_argument("--only", default="", help="run only workloads whose name contains this text")
    parser.add_argument("--reference-repeats", type=int, default=3,
                        help="timed rounds of the (slow, literal) reference per workload; 0 skips it (default 3)")
    parser.add_argument("--tiny", action="store_true", help="shrink every workload (smoke test, not a measurement)")
    parser.add_argument("--baseline", metavar="PATH",
                        help="an earlier run's --json (this tree's or an older one's): each row's ms/call against the "
                             "row of the same workload, dtype, backend and threads there (column x base)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--plot", metavar="PATH", help="also write a PNG bar chart (needs matplotlib)")
    parser.add_argument("--quant", action="store_true",
                        help="instead: quantized caches against the callers' two-op composition and copy_; its own "
                             "options: ascend-kv bench --quant --help")
    parser.add_argument("--transfer", action="store_true",
                        help="instead: a prefill-to-decode pull between two processes on Mooncake (the mooncake "
                             "extra) against Mooncake alone; its own options: ascend-kv bench --transfer --help")
    parser.add_argument("--overhead", action="store_true",
                        help="instead: the host cost of one call on tiny calls, against a bare index_copy_, on the "
                             "CPU and the fake NPU; its own options: ascend-kv bench --overhead --help")
    return parser


def thread_counts(text: str, default: int) -> list[int]:
    """``--threads``: the counts in order, ``default`` for :data:`DEFAULT_THREADS`, each once; ValueError if bad."""
    counts = []
    for item in (part.strip() for part in text.split(",")):
        count = default if item == DEFAULT_THREADS else int(item)
        if count < 1:
            raise ValueError(item)
        counts.append(count)
    if not counts:
        raise ValueError(text)
    return list(dict.fromkeys(counts))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--overhead" in argv:
        return host_cost.main([arg for arg in argv if arg != "--overhead"])
    if "--quant" in argv:
        from . import quant_bench

        return quant_bench.main([arg for arg in argv if arg != "--quant"])
    if "--transfer" in argv:
        from . import transfer_bench

        return transfer_bench.main([arg for arg in argv if arg != "--transfer"])
    args = build_parser().parse_args(argv)
    default_threads = torch.get_num_threads()
    try:
        threads = thread_counts(args.threads, default_threads)
    except ValueError:
        print(f"ascend-kv bench: --threads takes a comma-separated list of '{DEFAULT_THREADS}' and counts >= 1, "
              f"got {args.threads!r}", file=sys.stderr)
        return 2
    if min(args.warmup, args.reference_repeats, args.sweep_mb) < 0 or args.repeats < 1:
        print("ascend-kv bench: --repeats must be >= 1, --warmup, --reference-repeats and --sweep-mb >= 0",
              file=sys.stderr)
        return 2
    try:
        dtypes = [DTYPES[name.strip()] for name in args.dtypes.split(",")]
    except KeyError as error:
        print(f"ascend-kv bench: --dtypes takes {', '.join(DTYPES)}, got {error.args[0]!r}", file=sys.stderr)
        return 2
    backends = [name.strip() for name in args.backends.split(",") if name.strip()]
    unknown = [name for name in backends if name not in BACKEND_CHOICES or name == "auto"]
    if unknown or not backends:
        print(f"ascend-kv bench: --backends takes fallback, sim or npu, got {args.backends!r}", file=sys.stderr)
        return 2
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        print("ascend-kv bench: --plot needs matplotlib: pip install 'ascend_kv[bench]'", file=sys.stderr)
        return 2
    baseline = load_baseline(args.baseline) if args.baseline else None
    chosen = [w for w in workloads(args.tiny) if args.only in w.name]
    print(f"ascend-kv bench: {len(chosen)} workloads x {len(dtypes)} dtypes x threads "
          f"{', '.join(map(str, threads))} (torch's default: {default_threads}), backends {', '.join(backends)}, "
          f"warmup {args.warmup}, repeats {args.repeats} (median), "
          f"sweep {args.sweep_mb} MB before each timed loop or call, "
          f"reference {args.reference_repeats} rounds" + (" (tiny shapes)" if args.tiny else ""), flush=True)
    before = machine()
    sweep = sweeper(args.sweep_mb) if args.sweep_mb else None
    rows: list[dict[str, Any]] = []
    print(*TABLE_HEAD, sep="\n", flush=True)
    steps = len(chosen) * len(dtypes) * len(threads)
    step = 0
    try:
        for w in chosen:
            for dtype in dtypes:
                call = build(w, dtype)
                for count in threads:
                    step += 1
                    torch.set_num_threads(count)
                    _progress(f"[{step}/{steps}] {w.name}, {str(dtype).removeprefix('torch.')}, {count} thread{'s' * (count != 1)}")
                    measured = measure(w, dtype, backends, args.warmup, args.repeats, args.reference_repeats, sweep,
                                       call, default_threads, baseline)
                    print(*map(format_row, measured), sep="\n", flush=True)
                    rows.extend(measured)
                del call
    finally:
        torch.set_num_threads(default_threads)
    print(TABLE_NOTE)
    print("the host cost of one small call: ascend-kv bench --overhead", flush=True)
    result = {
        "machine": before, "load_average_after": machine()["load_average"],
        "settings": {"warmup": args.warmup, "repeats": args.repeats, "threads": threads,
                     "default_threads": default_threads, "reference_repeats": args.reference_repeats,
                     "sweep_mb": args.sweep_mb, "backends": backends, "tiny": args.tiny, "baseline": args.baseline,
                     "statistic": "median"},
        "workloads": [asdict(w) for w in chosen], "results": rows,
    }
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(result, out, indent=1)
    if args.plot:
        plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
