"""Host metadata of a validated call as runs: stretches of rows contiguous in source and destination.

A run is the unit every fast path copies at once. In ``kv_cache`` a run is one batch entry's
new tokens; in ``paged_cache_load`` it is the tokens one batch entry takes from one cache block
(always from slot 0: ``seq_starts`` only selects the first block-table column). Every array
is host ``int64`` numpy, computed with vectorized numpy (no loop over tokens or runs).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ascend_kv.calls import KvCacheCall, PagedLoadCall
from ascend_kv.checks import exclusive_prefix_sum


class KvRuns(NamedTuple):
    """The non-empty batch entries of a ``kv_cache`` call, each ``[runs]`` int64."""

    entry: np.ndarray        #: batch entry ``b`` (the ``past[layer_id]`` row block written)
    read_start: np.ndarray   #: first ``new_kv`` row
    write_start: np.ndarray  #: first ``past[layer_id, b]`` position
    rows: np.ndarray         #: rows in the run (``seq_len[b] > 0``)


class BlockRuns(NamedTuple):
    """The (batch entry, cache block) pieces of a ``paged_cache_load`` call, each ``[runs]`` int64."""

    block: np.ndarray        #: cache block read, from slot 0
    out_start: np.ndarray    #: first output row written
    rows: np.ndarray         #: tokens in the run, ``1 .. block_size``


def kv_runs(call: KvCacheCall) -> KvRuns:
    """The runs of a ``kv_cache`` call, in batch order."""
    entry = np.flatnonzero(call.seq_len)
    if len(entry) == len(call.seq_len):                                          # no empty entry (decode)
        return KvRuns(entry, call.read_start, call.write_start, call.seq_len)
    return KvRuns(entry, call.read_start[entry], call.write_start[entry], call.seq_len[entry])


def block_runs(call: PagedLoadCall) -> BlockRuns:
    """The runs of a ``paged_cache_load`` call, in output-row order."""
    size = call.block_size
    blocks = -(-call.lens // size)                                               # [batch] blocks touched
    entry = np.repeat(np.arange(len(blocks), dtype=np.int64), blocks)            # [runs]
    k = within_run(blocks)                                                       # block number within the entry
    block = call.block_table[entry, call.first_column[entry] + k]
    rows = np.minimum(size, call.lens[entry] - k * size)
    return BlockRuns(block, call.out_start[entry] + k * size, rows)


def within_run(rows: np.ndarray) -> np.ndarray:
    """``0 .. rows[r] - 1`` for every run ``r``, concatenated ``[sum(rows)]``."""
    return np.arange(int(rows.sum()), dtype=np.int64) - np.repeat(exclusive_prefix_sum(rows), rows)


def token_rows(runs: BlockRuns, block_size: int) -> np.ndarray:
    """``block * block_size + slot`` of every gathered token, in output-row order ``[num_tokens]``."""
    return np.repeat(runs.block * block_size, runs.rows) + within_run(runs.rows)
