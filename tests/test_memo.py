"""A repeated call is checked afresh, through the public functions.

The Python rules once remembered each call signature's structure rules (ascend_kv/rules/memo.py);
the C++ rules (csrc/rules/) remember nothing per signature and run on every call. Either way the
promise is the same, and these tests hold it: a call the rules accepted never lets through a
later call whose structure differs in anything the rules read (dtype, shape, strides,
requires_grad, inference-ness, index ranks), the aliasing rules run on every call, and what the
host paths derive from a call's strides follows each call's own tensors."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch
from cases import bits_equal, random_bits

import ascend_kv
from ascend_kv.tools import reference

F16 = torch.float16


def kv_call(past: torch.Tensor | None = None, new_kv: torch.Tensor | None = None, layer: int = 1,
            seq_len: torch.Tensor | None = None) -> Callable[[], object]:
    past = torch.zeros(2, 2, 8, 16, dtype=F16) if past is None else past
    new_kv = random_bits((2, 16), F16, 0) if new_kv is None else new_kv
    seq_len = torch.tensor([1, 1]) if seq_len is None else seq_len

    def call() -> object:
        return ascend_kv.kv_cache(new_kv, layer, past, torch.tensor([3, 4]), seq_len)

    call.past = past  # type: ignore[attr-defined]  (what the call writes)
    return call


def test_calls_of_one_signature_each_write_their_own_tensors() -> None:
    """Two calls with the same shapes, dtypes and strides on other tensors: each writes its own
    past, exactly the reference's bytes (nothing of the first call is reused for the second)."""
    for seed in range(2):
        past, new_kv = random_bits((2, 2, 8, 16), F16, 10 + seed), random_bits((2, 16), F16, 20 + seed)
        expected = reference.kv_cache(new_kv, 1, past.clone(), torch.tensor([3, 4]), torch.tensor([1, 1]))
        kv_call(past=past, new_kv=new_kv)()
        assert bits_equal(past, expected)


# Each pair: a call the rules accept, then one whose signature differs from it in one thing the
# rules read; the second must raise as it does on its own, and write nothing.
STRUCTURAL_CHANGES: dict[str, tuple[Callable[[], object], Callable[[], object], type, str]] = {
    "dtype": (kv_call(), kv_call(new_kv=random_bits((2, 16), torch.bfloat16, 0)), TypeError, "new_kv.dtype"),
    "shape": (kv_call(), kv_call(new_kv=random_bits((2, 32), F16, 0)), ValueError, "new_kv.shape[1]"),
    "strides": (kv_call(), kv_call(past=torch.zeros(2, 2, 1, 16, dtype=F16).expand(2, 2, 8, 16)), ValueError,
                "maps several elements to one place"),
    "requires_grad": (kv_call(), kv_call(past=torch.zeros(2, 2, 8, 16, dtype=F16, requires_grad=True)),
                      ValueError, "past requires grad"),
    "layer": (kv_call(layer=1), kv_call(layer=2), ValueError, "layer_id = 2 must be in [0, 2)"),
    "index rank": (kv_call(), kv_call(seq_len=torch.tensor([[1, 1]])), ValueError, "seq_len must be a 1-D tensor"),
}


@pytest.mark.parametrize("change", STRUCTURAL_CHANGES)
def test_a_remembered_call_lets_no_structurally_different_call_through(change: str) -> None:
    accepted, rejected, error, fragment = STRUCTURAL_CHANGES[change]
    accepted()
    accepted()                                                   # the same call again: accepted again
    before = rejected.past.detach().clone()  # type: ignore[attr-defined]
    with pytest.raises(error, match=re.escape(fragment)):
        rejected()
    assert bits_equal(rejected.past, before)                     # type: ignore[attr-defined]


def test_an_inference_tensor_written_outside_inference_mode_is_refused_after_the_same_call_inside() -> None:
    """Accepted inside inference mode, the same call on the same inference tensor is refused outside it."""
    with torch.inference_mode():
        past = torch.zeros(2, 2, 8, 16, dtype=F16)
        kv_call(past=past)()                                     # accepted inside
    with pytest.raises(ValueError, match="under torch.inference_mode"):
        kv_call(past=past)()


def test_the_aliasing_rule_runs_on_every_call_of_a_remembered_signature() -> None:
    """The same shapes, dtypes and strides with new_kv inside past are refused after a valid call."""
    past = torch.zeros(2, 2, 8, 16, dtype=F16)
    kv_call(past=past, new_kv=random_bits((2, 16), F16, 0))()
    inside = past[0, 0, :2]                                      # [2, 16], the signature of the call above
    before = past.clone()
    with pytest.raises(ValueError, match="past shares memory with new_kv"):
        kv_call(past=past, new_kv=inside)()
    assert bits_equal(past, before)


def test_paged_outputs_overlapping_a_cache_are_refused_after_separate_ones() -> None:
    cache = random_bits((4, 16, 1, 16), F16, 1)
    table, lens = torch.tensor([[0], [1]]), torch.tensor([3, 2])

    def load(key: torch.Tensor, value: torch.Tensor) -> object:
        return ascend_kv.paged_cache_load(cache, cache, table, lens, kv_cache_cfg="nd", key=key, value=value)

    load(torch.zeros(5, 1, 16, dtype=F16), torch.zeros(5, 1, 16, dtype=F16))
    load(torch.zeros(5, 1, 16, dtype=F16), torch.zeros(5, 1, 16, dtype=F16))
    with pytest.raises(ValueError, match="key shares memory with key_cache"):
        load(cache[3, :5], torch.zeros(5, 1, 16, dtype=F16))     # the same signature, inside a cache


def test_reshape_caches_sharing_bytes_are_refused_after_separate_ones() -> None:
    key = random_bits((2, 1, 16), F16, 2)
    buffer = torch.zeros(8, 16, 1, 16, dtype=F16)

    def write(key_cache: torch.Tensor, value_cache: torch.Tensor) -> object:
        return ascend_kv.reshape_and_cache(key, key.clone(), key_cache, value_cache, torch.tensor([0, 17]))

    write(buffer[:4], buffer[4:])
    with pytest.raises(ValueError, match="value_cache shares memory with key_cache"):
        write(buffer[:4], buffer[:4])


def test_the_host_copier_route_follows_the_strides_of_each_signature() -> None:
    """Two calls of one shape, one with past's rows contiguous and one with them strided apart: each
    writes exactly the reference's bytes (a route kept for one would write the other wrongly)."""
    new_kv = random_bits((2, 16), F16, 3)
    for past in (torch.zeros(2, 2, 8, 16, dtype=F16), torch.zeros(2, 2, 8, 32, dtype=F16)[..., ::2]):
        expected = past.clone()
        reference.kv_cache(new_kv, 1, expected, torch.tensor([3, 4]), torch.tensor([1, 1]))
        for _ in range(2):
            kv_call(past=past, new_kv=new_kv)()
            assert bits_equal(past, expected)
