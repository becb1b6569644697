"""ND <-> NZ helpers: exact inverses, and the element offsets docs/semantics.md gives."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from cases import bits_equal, random_bits
from hypothesis import given
from hypothesis import strategies as st

import ascend_kv
from ascend_kv import nd_to_nz, nz_to_nd
from ascend_kv.api.arguments import nz_elements
from ascend_kv.operators.library import cache_dtypes

CACHE_DTYPES = cache_dtypes()


@given(dtype=st.sampled_from(CACHE_DTYPES), blocks=st.integers(0, 3), block_size=st.integers(1, 20),
       heads=st.sampled_from([1, 2, 4]), pieces=st.integers(1, 3), seed=st.integers(0, 2**31))
def test_nd_nz_round_trip(dtype, blocks, block_size, heads, pieces, seed) -> None:
    e = nz_elements(dtype)
    nd = random_bits((blocks, block_size, heads, pieces * e), dtype, seed)
    nz = nd_to_nz(nd)
    assert nz.shape == (blocks, heads * pieces, block_size, e) and nz.is_contiguous()
    assert bits_equal(nz_to_nd(nz, heads), nd)
    assert bits_equal(nd_to_nz(nz_to_nd(nz, heads)), nz)


def test_nz_element_offsets() -> None:
    """Element (blk, slot, c) sits at blk*bs*T + (c // E)*bs*E + slot*E + c % E."""
    nb, bs, heads, hs = 2, 16, 2, 16
    e, t = 16, heads * hs
    nd = torch.arange(nb * bs * t).reshape(nb, bs, heads, hs)
    nz = nd_to_nz(nd.to(torch.int16).view(torch.float16)).view(torch.int16).reshape(-1)
    for blk, slot, c in [(0, 0, 0), (1, 5, 17), (1, 15, 31), (0, 3, 16)]:
        offset = blk * bs * t + (c // e) * bs * e + slot * e + c % e
        assert int(nz[offset]) == int(nd[blk, slot].reshape(-1)[c])


def test_layout_errors_name_the_argument() -> None:
    with pytest.raises(ValueError, match="multiple of E = 16"):
        nd_to_nz(torch.zeros(1, 16, 1, 8, dtype=torch.float16))
    with pytest.raises(ValueError, match="4-D ND cache"):
        nd_to_nz(torch.zeros(16, 16, dtype=torch.float16))
    with pytest.raises(ValueError, match="E = 32"):
        nz_to_nd(torch.zeros(1, 1, 16, 16, dtype=torch.int8), 1)
    with pytest.raises(ValueError, match="num_heads = 3"):
        nz_to_nd(torch.zeros(1, 2, 16, 16, dtype=torch.float16), 3)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: ascend_kv.nd_to_nz(None), TypeError, "cache must be a torch.Tensor, got NoneType"),
        (lambda: ascend_kv.nd_to_nz([[1.0]]), TypeError, "cache must be a torch.Tensor, got a list"),
        (lambda: ascend_kv.nz_to_nd(torch.zeros(1, 2, 16, 16, dtype=torch.float16), "2"), TypeError,
         "num_heads must be an int"),
        (lambda: ascend_kv.nz_to_nd(torch.zeros(1, 2, 16, 16, dtype=torch.float16), 2.0), TypeError,
         "num_heads must be an int"),
        (lambda: ascend_kv.nz_to_nd(torch.zeros(1, 2, 16, 16, dtype=torch.float16).to("meta"), 2), TypeError,
         "cache must hold data"),
    ],
)
def test_layout_helpers_reject_what_is_not_a_cache(call: Callable[[], object], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        call()
