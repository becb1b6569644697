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
    past, new_kv = plan.args.past, plan.args.new_kv
    if (
        native.usable(new_kv, past)
        and new_kv.stride(1) == 1                                                # rows contiguous
        and past.stride(3) == 1                                                  # rows contiguous (checks: elements apart)
    ):
        return "native"
    if plan.ntokens >= SLICE_MIN_ROWS * (len(plan.seq_len) - plan.seq_len.count(0)):
        return "slices"
    if merged_rows(past[plan.layer_id]) is not None:
        return "rows"
    return "scatter"


def kv_cache(plan: KvCachePlan) -> None:
    """Write ``new_kv`` ``[ntokens, hidden]`` into ``past[layer_id]`` in place.

    Token ``t`` of batch entry ``b`` lands at
    ``past[layer_id, b, write_start[b] + t - read_start[b]]``; every path honours the
    strides of ``new_kv`` and ``past``.
    """
    if plan.ntokens == 0:
        return
    args = bit_views(plan.args)
    way = path(plan)
    if way == "native":
        _native(plan, args)
        return
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


def _native(plan: KvCachePlan, args: KvCacheArgs) -> None:
    """One run per batch entry, empty ones included (the copier skips them): the metadata as it is."""
    past, new_kv = args.past, args.new_kv
    size = past.element_size()
    layer_step, entry_step, row_step, _ = (stride * size for stride in past.stride())
    src_step = new_kv.stride(0) * size
    native.copy_runs(
        new_kv.data_ptr(), past.data_ptr() + plan.layer_id * layer_step, plan.read_start, plan.write_start,
        plan.seq_len, index_steps=(src_step, row_step), run_step=entry_step, item_bytes=past.shape[3] * size,
        steps=(src_step, row_step), stream_min_bytes=STREAM_MIN_BYTES,
    )


def _destination_rows(runs: KvRuns, row_block: int) -> np.ndarray:
    """``entry * row_block + position`` of every new row, in ``new_kv`` order ``[ntokens]`` int64."""
    first_rows = np.asarray(runs.entry, dtype=np.int64) * row_block + np.asarray(runs.write_start, dtype=np.int64)
    return np.repeat(first_rows, runs.rows) + within_run(runs.rows)
