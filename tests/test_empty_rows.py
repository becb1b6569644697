"""``reshape_and_cache`` with token rows of no bytes (a head size or a head count of 0): every route takes
the call and writes what the reference writes, through the public function, on the host paths, the sim,
the kernels and the device fallback (both on the fake NPU, nothing read back). No codes or bytes move for
an empty side; the other side is written as usual, and a dynamic side's scale cache gets the scale of an
empty head, 0 (its amax)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import fake_npu
import pytest
import torch
from cases import bits_equal, random_bits
from test_sim import DEVICE_FALLBACK, HOST_PATHS, KERNELS, SIM, kernels_on_the_fake_npu, ran_on

import ascend_kv
from ascend_kv.tools import reference

ROUTES = {"host paths": HOST_PATHS, "sim": SIM, "kernels": KERNELS, "device fallback": DEVICE_FALLBACK}
SLOTS = [0, 5, -1, 17, 40]  # block 0 twice, padding, blocks 1 and 2


def _call(key_row: tuple[int, int], value_row: tuple[int, int] | None, codes: bool = False) -> list[Any]:
    """key, value, key_cache, value_cache, slot_mapping: 5 tokens into 3 blocks of 16 slots, ND, caches
    holding random bits (so a write shows)."""
    cache_dtype = torch.int8 if codes else torch.float16
    key = random_bits((5, *key_row), torch.float16, 1)
    key_cache = random_bits((3, 16, *key_row), cache_dtype, 2)
    value = None if value_row is None else random_bits((5, *value_row), torch.float16, 3)
    value_cache = None if value_row is None else random_bits((3, 16, *value_row), cache_dtype, 4)
    return [key, value, key_cache, value_cache, torch.tensor(SLOTS, dtype=torch.int32)]


def _run(route: str, call: Callable[..., Any], tensors: list[Any]) -> None:
    """``call(*tensors)`` on ``route``, asserting where it ran; on the fake NPU every tensor is on the device
    with its host layout and the device memory is copied back over the host tensors afterwards."""
    if route in ("host paths", "sim"):
        with ran_on(ROUTES[route]), ascend_kv.use_backend("fallback" if route == "host paths" else "sim"):
            call(*tensors)
        return
    with kernels_on_the_fake_npu(), ascend_kv.use_backend("npu" if route == "kernels" else "fallback"):
        mirror = fake_npu.same_layout(tensors)
        with ran_on(ROUTES[route]), fake_npu.counting() as seen:
            call(*mirror.values)
        assert seen.transfers == 0
        mirror.copy_back()


CASES = {
    "key of head size 0": ((2, 0), (2, 8)),
    "key of 0 heads": ((0, 8), (0, 5)),
    "value of head size 0": ((2, 8), (2, 0)),
    "both of head size 0": ((2, 0), (2, 0)),
    "key only, head size 0": ((2, 0), None),
}


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("case", CASES)
def test_rows_of_no_bytes_are_taken_on_every_route(route: str, case: str) -> None:
    tensors = _call(*CASES[case])
    expected = [t.clone() if isinstance(t, torch.Tensor) else t for t in tensors]
    reference.reshape_and_cache(*expected)
    _run(route, ascend_kv.reshape_and_cache, tensors)
    assert all(bits_equal(got, want) for got, want in zip(tensors[2:4], expected[2:4]) if got is not None)


QUANT = {
    "static, key of head size 0": (((2, 0), (2, 8)), "static"),
    "dynamic, key of head size 0": (((2, 0), (2, 8)), "dynamic"),
    "dynamic, 0 heads": (((0, 8), (0, 5)), "dynamic"),
}


def _expected_side(rows: torch.Tensor, cache: torch.Tensor, parameter: torch.Tensor, slots: torch.Tensor,
                   static: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """One side's cache and parameter after the call: the reference's (a key-only call) for rows with bytes;
    for empty rows the cache as it was and, when dynamic, scale 0 at every written slot."""
    cache, parameter = cache.clone(), parameter.clone()
    if rows.numel() == 0:
        if not static:
            kept = slots[slots >= 0].long()
            parameter[kept // cache.shape[1], kept % cache.shape[1]] = 0.0
        return cache, parameter
    name = "k_scale" if static else "k_scale_cache"
    reference.reshape_and_cache_quant(rows, None, cache, None, slots, **{name: parameter})
    return cache, parameter


# The device fallback's dynamic quantization cannot take heads of size 0 yet (an amax over an empty dim
# raises there; issue 33 item 5, left for csrc): its calls are not among these.
QUANT_ROUTES = [(case, route) for case in QUANT for route in ROUTES
                if not (QUANT[case][1] == "dynamic" and route == "device fallback")]


@pytest.mark.parametrize(("case", "route"), QUANT_ROUTES)
def test_quantized_rows_of_no_bytes_are_taken_on_every_route(route: str, case: str) -> None:
    rows, scheme = QUANT[case]
    key, value, key_cache, value_cache, slots = _call(*rows, codes=True)
    static = scheme == "static"
    if static:
        parameters = [torch.tensor(0.5), torch.tensor(0.25)]
    else:  # scale caches [num_blocks, block_size, heads], random bits
        parameters = [random_bits(tuple(c.shape[:3]), torch.float32, 10 + i) for i, c in enumerate((key_cache, value_cache))]
    expected = [_expected_side(r, c, p, slots, static) for r, c, p in zip((key, value), (key_cache, value_cache), parameters)]
    names = ["k_scale", "v_scale"] if static else ["k_scale_cache", "v_scale_cache"]

    def call(k: Any, v: Any, kc: Any, vc: Any, s: Any, kp: Any, vp: Any) -> None:
        ascend_kv.reshape_and_cache(k, v, kc, vc, s, **dict(zip(names, (kp, vp))))

    tensors = [key, value, key_cache, value_cache, slots, *parameters]
    _run(route, call, tensors)
    got = [(tensors[2], tensors[5]), (tensors[3], tensors[6])]
    assert all(bits_equal(g, w) for pair, want in zip(got, expected) for g, w in zip(pair, want))
