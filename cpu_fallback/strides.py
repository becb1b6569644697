"""Stride tests the fast paths need before they may treat a tensor as plain rows."""

from __future__ import annotations

import torch


def rows_contiguous(t: torch.Tensor) -> bool:
    """Whether every ``t[i]`` is one contiguous row (any stride between rows)."""
    expected = 1
    for size, stride in zip(reversed(t.shape[1:]), reversed(t.stride()[1:])):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def non_overlapping(t: torch.Tensor) -> bool:
    """Whether no two indices of ``t`` share an element, so a write to every index is well defined.

    Sufficient test: with the dims of size > 1 sorted by stride, each stride is at least
    the extent of the dims below it.
    """
    extent = 1
    for size, stride in sorted(((n, s) for n, s in zip(t.shape, t.stride()) if n > 1), key=lambda d: d[1]):
        if stride < extent:
            return False
        extent = stride * size
    return True
