"""KV cache write: each batch entry's new rows into ``past[layer_id]``, by the fastest way that applies.

Paths, chosen in this order (the fastest first; docs/benchmarks.md has the measurements):

``native``
    Host tensors, the compiled copier built, rows contiguous and ``past`` rows not
    overlapping: one C call copies every batch entry's rows (:mod:`.native`).
``slices``
    Runs of at least :data:`SLICE_MIN_ROWS` rows on average: one ``copy_`` per batch entry.
``rows``
    ``past[layer_id]`` viewable as ``[batch * max_seq_len, hidden]``: one ``index_copy_`` with
    precomputed row numbers (on 8-byte elements when the rows allow it).
``scatter``
    Anything else: one ``index_put_`` of whole rows, which honours any strides.
"""

from __future__ import annotations

import numpy as np
import torch

from ascend_kv.rules.forms import KvCacheArgs, KvCachePlan

from . import native
from .runs import KvRuns, kv_runs, within_run
from .strides import merged_rows
from .wide import bit_views, same_width_views

#: Bytes written from which the copier streams them past the CPU caches (:func:`.native.copy_runs`):
#: the rows land in a cache far larger than the CPU caches and are read only by a later step
#: (the threshold is measured: docs/benchmarks.md, "How the fallback chooses").
STREAM_MIN_BYTES = 1 << 20

#: Mean rows per batch entry from which a ``copy_`` per entry beats one ``index_copy_`` (measured:
#: docs/benchmarks.md, "How the fallback chooses").
SLICE_MIN_ROWS = 20


def path(plan: KvCachePlan) -> str:
    """The name of the path :func:`kv_cache` takes for ``plan``."""
    if _native_steps(plan.args) is not None:
        return "native"
    if plan.ntokens >= SLICE_MIN_ROWS * (len(plan.seq_len) - plan.seq_len.count(0)):
        return "slices"
    if merged_rows(plan.args.past[plan.layer_id]) is not None:
        return "rows"
    return "scatter"


def _native_steps(args: KvCacheArgs) -> native.Steps | None:
    """The copier's steps when it can take the call (host tensors, the copier built, rows contiguous;
    checks: ``past``'s elements apart), else None; what the structure decides is kept per call signature (``args.derived``)."""
    if not native.AVAILABLE:
        return None
    if "native" not in args.derived:
        args.derived["native"] = _derive_native_steps(args)
    steps: native.Steps | None = args.derived["native"]
    return steps


def _derive_native_steps(args: KvCacheArgs) -> native.Steps | None:
    past, new_kv = args.past, args.new_kv
    if not (native.usable(new_kv, past) and new_kv.stride(1) == 1 and past.stride(3) == 1):
        return None
    size = past.element_size()
    entry, row = past.stride(1) * size, past.stride(2) * size
    src = new_kv.stride(0) * size
    return native.Steps(src, row, entry, past.shape[3] * size, src, row, 1, 0, 0)


def kv_cache(plan: KvCachePlan) -> None:
    """Write ``new_kv`` ``[ntokens, hidden]`` into ``past[layer_id]`` in place.

    Token ``t`` of batch entry ``b`` lands at
    ``past[layer_id, b, write_start[b] + t - read_start[b]]``; every path honours the
    strides of ``new_kv`` and ``past``.
    """
    if plan.ntokens == 0:
        return
    steps = _native_steps(plan.args)
    if steps is not None:
        _native(plan, steps)
        return
    args = bit_views(plan.args)
    way = path(plan)
    layer = args.past[plan.layer_id]                                             # [batch, max_seq_len, hidden]
    runs = kv_runs(plan)
    if way == "slices":
        for b, first, start, rows in zip(*runs):
            layer[b, start : start + rows].copy_(args.new_kv[first : first + rows])
    elif way == "rows":
        flat = merged_rows(layer)
        assert flat is not None  # path() checked
        dst, src = same_width_views(flat, args.new_kv)
        index = torch.from_numpy(_destination_rows(runs, layer.shape[1])).to(layer.device)
        dst.index_copy_(0, index, src)
    else:
        entry = np.repeat(np.asarray(runs.entry, dtype=np.int64), runs.rows)
        position = _destination_rows(runs, 0)
        device = layer.device
        layer.index_put_((torch.from_numpy(entry).to(device), torch.from_numpy(position).to(device)), args.new_kv)


def _native(plan: KvCachePlan, steps: native.Steps) -> None:
    """One run per batch entry, empty ones included (the copier skips them): the metadata as it is."""
    past = plan.args.past
    layer = plan.layer_id * past.stride(0) * past.element_size()
    native.copy_with(steps, plan.args.new_kv.data_ptr(), past.data_ptr() + layer, plan.read_start, plan.write_start,
                     plan.seq_len, STREAM_MIN_BYTES)


def _destination_rows(runs: KvRuns, row_block: int) -> np.ndarray:
    """``entry * row_block + position`` of every new row, in ``new_kv`` order ``[ntokens]`` int64."""
    first_rows = np.asarray(runs.entry, dtype=np.int64) * row_block + np.asarray(runs.write_start, dtype=np.int64)
    return np.repeat(first_rows, runs.rows) + within_run(runs.rows)
