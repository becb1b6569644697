"""Host metadata of a validated call as runs: stretches of rows contiguous in source and destination.

A run is the unit every fast path copies at once. In ``kv_cache`` a run is one batch entry's
new tokens; in ``paged_cache_load`` it is the tokens one batch entry takes from one cache block
(always from slot 0: ``seq_starts`` only selects the first block-table column), and its block
is the call's ``blocks`` entry, as the checks validated it. Runs are lists of host ints, built
with Python work per batch entry and C-speed list operations per run (no numpy, whose first
calls are slow on cold caches: docs/benchmarks.md, "How the fallback chooses"); the per-token row numbers that
the indexed paths need are numpy arrays, built without a loop over tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from ascend_kv.rules.forms import KvCachePlan, PagedLoadPlan


class KvRuns(NamedTuple):
    """The non-empty batch entries of a ``kv_cache`` call, each ``[runs]``."""

    entry: list[int]         #: batch entry ``b`` (the ``past[layer_id]`` row block written)
    read_start: list[int]    #: first ``new_kv`` row
    write_start: list[int]   #: first ``past[layer_id, b]`` position
    rows: list[int]          #: rows in the run (``seq_len[b] > 0``)


class BlockRuns(NamedTuple):
    """The (batch entry, cache block) pieces of a ``paged_cache_load`` call, each ``[runs]``."""

    block: list[int]         #: cache block read, from slot 0 (the call's ``blocks``, checked)
    out_start: list[int]     #: first output row written
    rows: list[int]          #: tokens in the run, ``1 .. block_size``


def kv_runs(plan: KvCachePlan) -> KvRuns:
    """The runs of a ``kv_cache`` call, in batch order."""
    entry = [b for b, n in enumerate(plan.seq_len) if n]
    if len(entry) == len(plan.seq_len):                                          # no empty entry (decode)
        return KvRuns(entry, plan.read_start, plan.write_start, plan.seq_len)
    return KvRuns(entry, *([values[b] for b in entry] for values in (plan.read_start, plan.write_start, plan.seq_len)))


def block_runs(plan: PagedLoadPlan) -> BlockRuns:
    """The runs of a ``paged_cache_load`` call, in output-row order: one per block in ``plan.blocks``."""
    size = plan.args.geometry.block_size
    if max(plan.lens, default=0) <= size:                                        # one block per entry (decode)
        if 0 not in plan.lens:
            return BlockRuns(plan.blocks, plan.out_start, plan.lens)
        kept = [b for b, n in enumerate(plan.lens) if n]
        return BlockRuns(plan.blocks, [plan.out_start[b] for b in kept], [plan.lens[b] for b in kept])
    runs = BlockRuns(plan.blocks, [], [])
    for start, n in zip(plan.out_start, plan.lens):
        if n == 0:
            continue
        full_blocks, rest = divmod(n, size)
        runs.out_start.extend(range(start, start + n, size))
        runs.rows.extend([size] * full_blocks)
        if rest:
            runs.rows.append(rest)                                               # the last block may be partial
    return runs


def within_run(rows: Sequence[int]) -> np.ndarray:
    """``0 .. rows[r] - 1`` for every run ``r``, concatenated ``[sum(rows)]`` int64."""
    counts = np.asarray(rows, dtype=np.int64)
    return np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)


def token_rows(runs: BlockRuns, block_size: int) -> np.ndarray:
    """``block * block_size + slot`` of every gathered token, in output-row order ``[num_tokens]`` int64."""
    return np.repeat(np.asarray(runs.block, dtype=np.int64) * block_size, runs.rows) + within_run(runs.rows)
