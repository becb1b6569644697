"""Stride tests and views the fast paths need before they may treat a tensor as plain rows.

That no two elements of an output share memory is not tested here: ``ascend_kv.checks``
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
