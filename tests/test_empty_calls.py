"""Calls with nothing to move are no-ops on every host backend, whatever the strides of their empty
tensors (strides that would put a non-empty tensor outside the kernels' domain address no byte of
an empty one): every tensor ends up with the reference's bits."""

from __future__ import annotations

import pytest
import torch
from cases import bits_equal, empty_calls

import ascend_kv
from ascend_kv.tools import reference


def rows_strided(t: torch.Tensor) -> bool:
    """Whether the last two dims of ``t`` are not one contiguous row (a column slice or a step)."""
    return t.stride(-1) != 1 or t.stride(-2) != t.shape[-1]


@pytest.mark.parametrize("name", sorted(empty_calls()))
def test_an_empty_call_is_a_no_op(backend: str, name: str) -> None:
    operation, case = empty_calls()[name]
    assert any(t.numel() == 0 and rows_strided(t) for t in case.tensors())  # the case is what it claims
    expected = case.cloned()
    getattr(reference, operation)(*expected.args, **expected.kwargs)
    getattr(ascend_kv, operation)(*case.args, **case.kwargs)
    assert all(bits_equal(got, want) for got, want in zip(case.tensors(), expected.tensors()))
