"""Stride tests and views the fast paths need before they may treat a tensor as plain rows.

That no two elements of an output share memory is not tested here: ``ascend_kv.rules.checks``
guarantees it for every validated call (``require_writable``)."""

from __future__ import annotations

import math

import torch


def rows_contiguous(t: torch.Tensor) -> bool:
    """Whether every ``t[i]`` is one contiguous row (any stride between rows)."""
    expected = 1
    for size, stride in zip(reversed(t.shape[1:]), reversed(t.stride()[1:])):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True



def merged_rows(t: torch.Tensor) -> torch.Tensor | None:
    """``t`` ``[a, b, ...]`` as a ``[a * b, row]`` view (``past[layer]``: every position of every
    entry; an ND cache: every slot of every block), or None when its strides allow no such view."""
    try:
        return t.view(t.shape[0] * t.shape[1], math.prod(t.shape[2:]))
    except RuntimeError:
        return None


def block_rows(t: torch.Tensor) -> torch.Tensor | None:
    """``t`` ``[num_blocks, ...]`` as a ``[num_blocks, rows, row]`` view whose rows are contiguous, the
    longest such rows (a dense block is one row), or None when no view of ``t`` has contiguous rows.

    The form in which the block copies (host copier, kernels) see a cache: a block is ``rows``
    rows of ``row`` elements, ``stride(1)`` apart (a column slice of a wider buffer, a K or V half
    held block by block), blocks ``stride(0)`` apart.
    """
    num_blocks = t.shape[0]
    if t.is_contiguous() and num_blocks:                                         # the usual case, at once
        return t.view(num_blocks, 1, t.numel() // num_blocks)
    for first in range(1, t.dim()):
        row = math.prod(t.shape[first:])
        try:
            view = t.view(num_blocks, math.prod(t.shape[1:first]), row)
        except RuntimeError:
            continue
        if row == 1 or view.stride(2) == 1:
            return view
    return None
