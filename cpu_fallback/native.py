"""The optional compiled run copier (``_rowcopy.c``) and when it may be used.

``pip install`` compiles ``_rowcopy.c`` with the system C compiler when there is one; without
it the import fails, :data:`AVAILABLE` is False and the fallback keeps its pure-torch paths.
The copier works on host memory through raw addresses and byte strides, so it takes only CPU
tensors whose copied items are contiguous and whose destination rows do not overlap.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

try:
    # copy_with(steps, src, dst, src_index, dst_index, items, stream_min_bytes) -> bool: copy_runs() with
    # its byte steps given as one Steps, the compiled function itself (a host path calls it per call).
    from ._rowcopy import copy_runs as copy_with
except ImportError:  # no compiler at install time: the pure-torch paths run instead
    copy_with = None

#: Whether the compiled copier was built and imported.
AVAILABLE: bool = copy_with is not None


def usable(src: torch.Tensor, dst: torch.Tensor) -> bool:
    """Whether the copier may read ``src`` and write ``dst``: built, and both on the host."""
    return AVAILABLE and src.is_cpu and dst.is_cpu


def copy_runs(
    src: int,
    dst: int,
    src_index: Sequence[int] | None,
    dst_index: Sequence[int],
    items: Sequence[int] | None,
    *,
    index_steps: tuple[int, int],
    item_bytes: int,
    steps: tuple[int, int],
    run_step: int = 0,
    pieces: int = 1,
    piece_steps: tuple[int, int] = (0, 0),
    stream_min_bytes: int,
) -> bool:
    """Copy runs of ``items[r]`` items of ``item_bytes`` bytes from address ``src`` to address ``dst``.

    Run ``r`` starts at byte ``src_index[r] * index_steps[0]`` of ``src`` and byte
    ``dst_index[r] * index_steps[1] + r * run_step`` of ``dst``; from there, piece ``p`` of item
    ``i`` is ``p * piece_steps[k] + i * steps[k]`` bytes further (``k`` 0 for ``src``, 1 for
    ``dst``). The caller guarantees that every byte touched is inside its tensor and that no
    two items are written to the same place. A run with 0 items or a negative ``dst_index``
    copies nothing (its addresses are never formed).

    Parameters
    ----------
    src, dst : int
        Host addresses (``tensor.data_ptr()`` plus any byte offset); ``dst`` is written.
    src_index, dst_index, items : sequence of int
        ``[runs]`` integers. ``src_index`` None reads run ``r`` from index ``r``; ``items`` None
        gives every run one item.
    index_steps : tuple of int
        Bytes per unit of ``src_index`` and of ``dst_index``.
    item_bytes : int
        Bytes in one item (a row, or one 32-byte NZ fractal row): a positive multiple of 32.
    steps : tuple of int
        Byte step between consecutive items in ``src`` and in ``dst``.
    run_step : int, optional
        Extra byte step of ``dst`` per run (``kv_cache``: one batch entry of ``past``).
    pieces : int, optional
        Pieces per item (NZ: fractal rows per token).
    piece_steps : tuple of int, optional
        Byte step between consecutive pieces in ``src`` and in ``dst``.
    stream_min_bytes : int
        Stream the bytes past the CPU caches (non-temporal stores, x86-64 only) when the call
        writes at least this many and the destination and its steps are 16-byte aligned. Each
        operation sets its own threshold from where its written bytes are read next (the
        measurements: docs/benchmarks.md, "How the fallback chooses").

    Returns
    -------
    bool
        Whether the bytes were streamed past the caches.
    """
    fixed = Steps(index_steps[0], index_steps[1], run_step, item_bytes, steps[0], steps[1], pieces, *piece_steps)
    streamed: bool = copy_with(fixed, src, dst, src_index, dst_index, items, stream_min_bytes)
    return streamed


class Steps(NamedTuple):
    """The byte steps of :func:`copy_runs`, fixed by a call's structure: a host path works them out
    once per call signature and passes them with each call's runs to ``copy_with``."""

    src_index: int    #: bytes per unit of ``src_index``
    dst_index: int    #: bytes per unit of ``dst_index``
    run: int          #: extra ``dst`` bytes per run
    item: int         #: bytes in one item
    src: int          #: between consecutive items in ``src``
    dst: int          #: between consecutive items in ``dst``
    pieces: int       #: pieces per item
    src_piece: int    #: between consecutive pieces in ``src``
    dst_piece: int    #: between consecutive pieces in ``dst``
