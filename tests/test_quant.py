"""Quantized caches (docs/semantics.md §13): ``reshape_and_cache`` writing
int8/fp8 codes and ``paged_cache_load`` dequantizing them, through the public functions, bit for bit
against ascend_kv/tools/reference.py and against each caller's two-op composition, on the CPU paths
and the device fallback (fake NPU, no transfer), eager and compiled; every domain rule at its
boundary with nothing written."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from typing import Any

import fake_npu
import pytest
import torch
from cases import bits_equal
from hypothesis import given, settings
from hypothesis import strategies as st
from test_sim import DEVICE_FALLBACK, HOST_PATHS, ran_on

import ascend_kv
from ascend_kv.compat import torch_npu, vllm
from ascend_kv.tools import reference

fake_npu.install()
CODES = (torch.int8, torch.float8_e4m3fn, torch.float8_e5m2)
FLOATS = (torch.float16, torch.bfloat16, torch.float32)
SCHEMES = ("divide", "divide_offset", "multiply", "multiply_offset", "dynamic")
H, D, NB, BS = 2, 32, 3, 16


# ----------------------------------------------------------------------------- building calls


def special_tokens(n: int, dtype: torch.dtype, seed: int, heads: int = H, head_size: int = D) -> torch.Tensor:
    """``[n, heads, head_size]`` tokens with what the arithmetic must get right: values tying at .5
    under a unit scale, saturating ones, NaN, +-inf and an all-zero row."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, heads, head_size, generator=g) * 6
    x[0, 0, :8] = torch.tensor([0.5, 1.5, 2.5, -0.5, -2.5, 126.5, 127.5, -128.5])
    x[0, -1, :4] = torch.tensor([1e4, -1e4, 7e4, -7e4])
    if n > 1:
        x[1] = 0
    if n > 2:
        x[2, 0, 3] = float("nan")
        x[2, -1, 5] = float("inf")
        x[2, -1, 6] = float("-inf")
    return x.to(dtype)


def cache(code: torch.dtype, layout: str, seed: int, heads: int = H, head_size: int = D) -> torch.Tensor:
    """A cache of random bytes (so an untouched slot shows), ND or NZ."""
    g = torch.Generator().manual_seed(seed)
    shape = (NB, BS, heads, head_size) if layout == "nd" else (NB, heads * head_size // 32, BS, 32)
    return torch.randint(-100, 100, shape, dtype=torch.int8, generator=g).view(code)


def static_scale(form: str, variant: int, dtype: torch.dtype, multiply: bool, seed: int,
                 heads: int = H, head_size: int = D) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    shape = {"tensor": [(), (1,), (1, 1), (1, 1, 1)], "head": [(heads,), (heads, 1), (1, heads, 1)],
             "channel": [(heads * head_size,), (heads, head_size), (1, heads, head_size)]}[form][variant % 3]
    base = torch.rand(shape, generator=g)
    return (base * 40 + 2 if multiply else base * 0.4 + 0.02).to(dtype)


def offset_like(scale: torch.Tensor, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-6, 6, scale.shape, generator=g).to(dtype)


def scale_cache(variant: int, heads: int = H) -> torch.Tensor:
    """A dynamic side's scale cache in one of its forms: [nb, bs, H] f32, [nb, bs, H, 1] f16, FIA's
    (nb, H, bs) bf16 transposed."""
    if variant % 3 == 0:
        return torch.full((NB, BS, heads), -7.0)
    if variant % 3 == 1:
        return torch.full((NB, BS, heads, 1), -7.0, dtype=torch.float16)
    return torch.full((NB, heads, BS), -7.0, dtype=torch.bfloat16).transpose(1, 2)


def quant_kwargs(prefix: str, scheme: str, code: torch.dtype, variant: int, seed: int) -> dict[str, torch.Tensor]:
    """One side's quantization arguments for a scheme (forms and dtypes cycling with ``variant``)."""
    if scheme == "dynamic":
        return {f"{prefix}scale_cache": scale_cache(variant)}
    form = ("tensor", "head", "channel")[variant % 3]
    multiply = scheme.startswith("multiply")
    scale = static_scale(form, variant // 3, FLOATS[(variant + seed) % 3], multiply, seed)
    kwargs = {f"{prefix}{'inv_scale' if multiply else 'scale'}": scale}
    if scheme.endswith("offset") and code == torch.int8:
        kwargs[f"{prefix}offset"] = offset_like(scale, (torch.int8, torch.int32, torch.bfloat16)[variant % 3], seed)
    return kwargs


def slots(n: int, dtype: torch.dtype) -> torch.Tensor:
    """Padding, a duplicated slot (the last token wins), slots across blocks; n <= num_tokens - 1."""
    chosen = [5, -1, 20, 5, 47, 0, 33, -3, 20, 16][:n]
    return torch.tensor(chosen, dtype=dtype)


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit, but a float NaN's payload: torch's own conversions give a NaN different bits by its
    place in a vector loop, so dequantized values and stored scales compare NaN as NaN (codes exactly)."""
    if a.dtype not in FLOATS:
        return bits_equal(a, b)
    both_nan = torch.isnan(a) & torch.isnan(b)
    return bits_equal(a.masked_fill(both_nan, 0), b.masked_fill(both_nan, 0))


def cloned(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}


def scale_caches(kwargs: dict[str, Any]) -> list[torch.Tensor]:
    return [v for k, v in kwargs.items() if k.endswith("scale_cache")]


def on_device(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``function`` on the fake NPU's device fallback, every tensor there with its host layout; asserts no
    transfer (but the allocating load's one read of its row count), then copies the device bytes back into
    the host tensors."""
    allocating = function is ascend_kv.paged_cache_load and kwargs.get("key") is None
    mirror = fake_npu.same_layout([*args, *kwargs.values()])
    moved_args, moved_kwargs = mirror.values[:len(args)], dict(zip(kwargs, mirror.values[len(args):]))
    with ascend_kv.use_backend("fallback"), ran_on(DEVICE_FALLBACK), fake_npu.counting() as seen:
        result = function(*moved_args, **moved_kwargs)
    assert seen.transfers == (1 if allocating else 0)
    mirror.copy_back()
    return result


def run(where: str, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    if where == "device":
        return on_device(function, *args, **kwargs)
    with ran_on(HOST_PATHS):
        return function(*args, **kwargs)


# ----------------------------------------------------------------------------- writes against the reference


CASES = [(code, scheme, layout, where) for code, scheme, layout, where in
         itertools.product(CODES, SCHEMES, ("nd", "nz"), ("host", "device"))
         if code == torch.int8 or not scheme.endswith("offset")]


@pytest.mark.parametrize(("code", "scheme", "layout", "where"), CASES)
def test_write_matches_the_reference(code: torch.dtype, scheme: str, layout: str, where: str) -> None:
    seed = CASES.index((code, scheme, layout, where))
    dtype = FLOATS[seed % 3]
    n = 9
    buffer = special_tokens(n + 1, dtype, seed, head_size=2 * D)
    key = buffer[:, :, :D]                                       # strided: a column slice
    value = special_tokens(n + 1, dtype, seed + 1).transpose(0, 1).contiguous().transpose(0, 1)
    key_cache, value_cache = cache(code, layout, seed), cache(code, layout, seed + 1)
    quant = {**quant_kwargs("k_", scheme, code, seed, seed), **quant_kwargs("v_", scheme, code, seed + 1, seed + 1)}
    slot_mapping = slots(n, (torch.int32, torch.int64)[seed % 2])
    expected = [key_cache.clone(), value_cache.clone()]
    expected_quant = cloned(quant)
    reference.reshape_and_cache_quant(key, value, *expected, slot_mapping, kv_cache_cfg=layout, **expected_quant)
    result = run(where, ascend_kv.reshape_and_cache, key, value, key_cache, value_cache, slot_mapping,
                 kv_cache_cfg=layout, **quant)
    if where == "host":
        assert result[0] is key_cache and result[1] is value_cache
    assert bits_equal(key_cache, expected[0]) and bits_equal(value_cache, expected[1])
    for got, want in zip(scale_caches(quant), scale_caches(expected_quant)):
        assert same(got, want)


@pytest.mark.parametrize("where", ["host", "device"])
@pytest.mark.parametrize("code", CODES)
def test_key_only_quantized_and_the_other_side_copied(where: str, code: torch.dtype) -> None:
    key = special_tokens(6, torch.bfloat16, 1)
    key_cache = cache(code, "nd", 2)
    expected = key_cache.clone()
    quant = {"k_scale_cache": scale_cache(0)}
    expected_quant = cloned(quant)
    reference.reshape_and_cache_quant(key, None, expected, None, slots(5, torch.int64), **expected_quant)
    run(where, ascend_kv.reshape_and_cache, key, None, key_cache, None, slots(5, torch.int64), **quant)
    assert bits_equal(key_cache, expected) and same(quant["k_scale_cache"], expected_quant["k_scale_cache"])
    # int8 keys with a bfloat16 value copied as it is
    value = special_tokens(6, torch.bfloat16, 3)
    key_cache, value_cache = cache(code, "nd", 4), torch.zeros(NB, BS, H, D, dtype=torch.bfloat16)
    expected_pair = [key_cache.clone(), value_cache.clone()]
    k_inv = torch.tensor(3.0)
    reference.reshape_and_cache_quant(key, value, *expected_pair, slots(5, torch.int32), k_inv_scale=k_inv)
    run(where, ascend_kv.reshape_and_cache, key, value, key_cache, value_cache, slots(5, torch.int32), k_inv_scale=k_inv)
    assert bits_equal(key_cache, expected_pair[0]) and bits_equal(value_cache, expected_pair[1])


def test_ties_saturation_and_nan_codes() -> None:
    """The rules of Q, read off the bytes: half to even, -128..127, NaN -> 0 (int8); +-max, NaN kept (fp8)."""
    x = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, 126.5, 127.5, -128.5, -129.0, 1e6, float("nan"), float("inf"),
                      float("-inf"), 0.0, -0.0, 3.0] * 2).reshape(1, 1, 32)
    one = torch.tensor(1.0)
    int8_cache = torch.zeros(1, BS, 1, 32, dtype=torch.int8)
    ascend_kv.reshape_and_cache(x, None, int8_cache, None, torch.tensor([0]), k_inv_scale=one)
    assert int8_cache[0, 0, 0, :16].tolist() == [0, 2, 2, 0, -2, 126, 127, -128, -128, 127, 0, 127, -128, 0, 0, 3]
    fp8_cache = torch.zeros(1, BS, 1, 32, dtype=torch.float8_e4m3fn)
    ascend_kv.reshape_and_cache(x, None, fp8_cache, None, torch.tensor([0]), k_scale=one)
    got = fp8_cache[0, 0, 0, :16].float()
    assert got[9] == 448 and got[11] == 448 and got[12] == -448 and torch.isnan(got[10])
    assert torch.signbit(fp8_cache[0, 0, 0, 14].float())  # -0 kept


def test_dynamic_rows_of_zeros_inf_and_nan() -> None:
    """An all-zero row: 0 codes, scale 0; a row with inf: 0 codes (int8) and an inf scale; NaN: NaN scale."""
    x = torch.zeros(3, 1, 32)
    x[1, 0, 0] = float("inf")
    x[2, 0, 1] = float("nan")
    x[1:, 0, 2] = 5.0
    for code in CODES:
        key_cache = torch.ones(1, BS, 1, 32, dtype=code)
        sc = torch.ones(1, BS, 1)
        ascend_kv.reshape_and_cache(x, None, key_cache, None, torch.tensor([0, 1, 2]), k_scale_cache=sc)
        assert sc[0, 0, 0] == 0 and torch.isinf(sc[0, 1, 0]) and torch.isnan(sc[0, 2, 0])
        codes = key_cache[0, :3].float()
        assert not torch.isnan(codes).any()
        assert (codes[0] == 0).all() and (codes[2] == 0).all()


# ----------------------------------------------------------------------------- loads against the reference


def nz_heads(scale: torch.Tensor) -> int:
    """The heads an NZ row has by a static scale's shape: one for a single element or a flat [H*D]."""
    return 1 if scale.numel() == 1 or (scale.dim() == 1 and scale.numel() == H * D) else H


LOAD_CASES = list(itertools.product(CODES, ("divide", "divide_offset", "dynamic"), ("nd", "nz"), ("host", "device")))


@pytest.mark.parametrize(("code", "scheme", "layout", "where"), LOAD_CASES)
def test_load_matches_the_reference(code: torch.dtype, scheme: str, layout: str, where: str) -> None:
    seed = LOAD_CASES.index((code, scheme, layout, where))
    key_cache, value_cache = cache(code, layout, seed), cache(code, layout, seed + 1)
    for c in (key_cache, value_cache):  # codes without NaN (their dequantization is NaN: compared as bits anyway)
        c.view(torch.int8).clamp_(-100, 100)
    quant = quant_kwargs("k_", scheme, code, seed, seed)
    quant.pop("k_inv_scale", None)
    if scheme == "dynamic":
        quant["k_scale_cache"].copy_(torch.rand(quant["k_scale_cache"].shape) * 0.1)
    quant["v_scale"] = torch.tensor([0.25, 0.125])                     # per head
    heads = (H if scheme == "dynamic" else nz_heads(quant["k_scale"]), H)
    table = torch.tensor([[2, 0, -1], [1, 2, 0]], dtype=torch.int32 if seed % 2 else torch.int64)
    lens = torch.tensor([20, 40])
    cfg = 1 if layout == "nd" else 0
    out_dtype = FLOATS[seed % 3]
    expected = reference.paged_cache_load_dequant(key_cache, value_cache, table, lens, kv_cache_cfg=cfg,
                                                  out_dtype=out_dtype, heads=heads, **quant)
    got = run(where, ascend_kv.paged_cache_load, key_cache, value_cache, table, lens, kv_cache_cfg=cfg,
              out_dtype=out_dtype, **quant)
    if where == "device":
        got = tuple(t.cpu() for t in got)
    assert same(got[0], expected[0]) and same(got[1], expected[1])
    # into given outputs: rows past the tokens untouched; out_dtype from them
    key = torch.full((70, *expected[0].shape[1:]), 9.0, dtype=out_dtype)
    value = torch.full((70, *expected[1].shape[1:]), 9.0, dtype=out_dtype)
    want = reference.paged_cache_load_dequant(key_cache, value_cache, table, lens, kv_cache_cfg=cfg, key=key.clone(),
                                              value=value.clone(), heads=heads, **quant)
    run(where, ascend_kv.paged_cache_load, key_cache, value_cache, table, lens, kv_cache_cfg=cfg, key=key, value=value,
        **quant)
    assert same(key, want[0]) and same(value, want[1])


DENSE_CASES = list(itertools.product(FLOATS, FLOATS, ("divide", "multiply")))


@pytest.mark.parametrize(("dtype", "scale_dtype", "scheme"), DENSE_CASES)
def test_dense_rows_of_every_dtype(dtype: torch.dtype, scale_dtype: torch.dtype, scheme: str) -> None:
    """Dense token rows into ND int8 slots and back (the host's row loops): each token dtype and compute
    type with ties, saturation, NaN and inf; a load with a NaN, an inf and an overflowing scale."""
    seed = DENSE_CASES.index((dtype, scale_dtype, scheme))
    key, value = special_tokens(10, dtype, seed), special_tokens(10, dtype, seed + 1)
    key_cache, value_cache = cache(torch.int8, "nd", seed), cache(torch.int8, "nd", seed + 1)
    scale = static_scale("channel", 1, scale_dtype, scheme == "multiply", seed)
    name = "inv_scale" if scheme == "multiply" else "scale"
    quant = {f"k_{name}": scale, "k_offset": offset_like(scale, torch.bfloat16, seed), f"v_{name}": scale}
    expected = [key_cache.clone(), value_cache.clone()]
    reference.reshape_and_cache_quant(key, value, *expected, slots(9, torch.int64), **quant)
    with ran_on(HOST_PATHS):
        ascend_kv.reshape_and_cache(key, value, key_cache, value_cache, slots(9, torch.int64), **quant)
    assert bits_equal(key_cache, expected[0]) and bits_equal(value_cache, expected[1])
    k_scale = (torch.rand(H, D) * 0.1).to(scale_dtype)
    k_scale[0, 3], k_scale[1, 5] = float("nan"), float("inf")
    k_scale[1, 6] = 6e4 if scale_dtype == torch.float16 else 3e38  # codes times it overflow
    v_scale_cache = torch.rand(NB, BS, H) * 0.1
    v_scale_cache[2, 0, 1], v_scale_cache[0, 3, 0] = float("nan"), 1e37
    load = {"k_scale": k_scale, "k_offset": offset_like(k_scale, torch.int8, seed), "v_scale_cache": v_scale_cache}
    table, lens = torch.tensor([[2, 0, 1], [1, 2, 0]]), torch.tensor([40, 33])
    want = reference.paged_cache_load_dequant(key_cache, value_cache, table, lens, kv_cache_cfg=1, out_dtype=dtype,
                                              heads=(H, H), **load)
    with ran_on(HOST_PATHS):
        got = ascend_kv.paged_cache_load(key_cache, value_cache, table, lens, kv_cache_cfg=1, out_dtype=dtype, **load)
    assert same(got[0], want[0]) and same(got[1], want[1])


@pytest.mark.parametrize("where", ["host", "device"])
def test_a_quantized_write_read_back(where: str) -> None:
    """Write with k_scale/k_offset and a dynamic V, read back with the same scales: the codes times the scales."""
    key, value = special_tokens(40, torch.bfloat16, 5), special_tokens(40, torch.bfloat16, 6)
    key[2] = 1.0  # no NaN: the read-back is compared to the input within a code
    value[2] = 1.0
    key_cache, value_cache = cache(torch.int8, "nd", 7), cache(torch.int8, "nd", 8)
    k_scale = torch.full((H, D), 0.05)
    k_offset = torch.full((H, D), 3, dtype=torch.int8)
    v_scales = torch.zeros(NB, BS, H)
    run(where, ascend_kv.reshape_and_cache, key, value, key_cache, value_cache, torch.arange(40), k_scale=k_scale,
        k_offset=k_offset, v_scale_cache=v_scales)
    got_k, got_v = run(where, ascend_kv.paged_cache_load, key_cache, value_cache, torch.tensor([[0, 1, 2]]),
                       torch.tensor([40]), kv_cache_cfg="nd", k_scale=k_scale, k_offset=k_offset,
                       v_scale_cache=v_scales, out_dtype=torch.float32)
    inside = key.float().abs() < 6
    assert ((got_k.cpu() - key.float()).abs()[inside] <= 0.026).all()
    assert ((got_v.cpu() - value.float()).abs() <= v_scales.reshape(-1, H)[:40, :, None] * 0.51 + 1e-6).all()


# ----------------------------------------------------------------------------- each caller's two-op composition


def test_vllm_ascend_c8_composition() -> None:
    """vllm-ascend C8: bf16 key times the bf16 inverse scale, plus the bf16 offset, rounded: one call with
    k_inv_scale and k_offset writes the same bytes."""
    key = special_tokens(12, torch.bfloat16, 11).nan_to_num(0.0, 0.0, 0.0)
    inv = static_scale("channel", 2, torch.bfloat16, True, 12)          # [1, H, D]
    off = offset_like(inv, torch.bfloat16, 13)
    slot_mapping = slots(10, torch.int32)
    two_op = cache(torch.int8, "nd", 14)
    one_call = two_op.clone()
    q = torch.round(key * inv + off).clamp(-128, 127).to(torch.int8)
    ascend_kv.reshape_and_cache(q, None, two_op, None, slot_mapping)
    ascend_kv.reshape_and_cache(key, None, one_call, None, slot_mapping, k_inv_scale=inv, k_offset=off)
    assert bits_equal(one_call, two_op)


@pytest.mark.parametrize("code", CODES)
def test_npu_dynamic_quant_then_scatter_composition(code: torch.dtype) -> None:
    """vllm-ascend's indexer caches: npu_dynamic_quant, then a scatter of the codes and of the scales."""
    key = special_tokens(12, torch.float16, 15)
    slot_mapping = torch.tensor([3, 18, -1, 40, 3, 7, 9, 11, 0, 1])
    two_op, one_call = cache(code, "nd", 16), cache(code, "nd", 16)
    sc_two, sc_one = scale_cache(1), scale_cache(1)
    q, s = torch_npu.npu_dynamic_quant(key, dst_type=code)
    assert q.shape == key.shape and s.shape == key.shape[:2] and s.dtype == torch.float32
    ascend_kv.reshape_and_cache(q, None, two_op, None, slot_mapping)
    ascend_kv.reshape_and_cache(s.to(sc_two.dtype)[..., None], None, sc_two, None, slot_mapping)
    ascend_kv.reshape_and_cache(key, None, one_call, None, slot_mapping, k_scale_cache=sc_one)
    assert bits_equal(one_call, two_op) and same(sc_one, sc_two)


def test_npu_dynamic_quant_refuses_what_it_does_not_support() -> None:
    x = torch.ones(2, 32)
    for kwargs in ({"smooth_scales": torch.ones(32)}, {"group_index": torch.zeros(1, dtype=torch.int32)},
                   {"dst_type": torch.quint4x2}):
        with pytest.raises(NotImplementedError):
            torch_npu.npu_dynamic_quant(x, **kwargs)
    with pytest.raises(TypeError, match="dst_type"):
        torch_npu.npu_dynamic_quant(x, dst_type=torch.int16)


@pytest.mark.parametrize(("kv_cache_dtype", "code"), [("fp8", torch.float8_e4m3fn), ("fp8_e4m3", torch.float8_e4m3fn),
                                                      ("fp8_e5m2", torch.float8_e5m2)])
def test_vllm_reshape_and_cache_flash(kv_cache_dtype: str, code: torch.dtype) -> None:
    """vLLM's fp8 write: x / k_scale in float32, saturated, cast; uint8 caches viewed as the fp8 type."""
    key, value = special_tokens(12, torch.bfloat16, 17), special_tokens(12, torch.bfloat16, 18)
    k_scale, v_scale = torch.tensor(0.07), torch.tensor([0.3, 0.02])
    slot_mapping = slots(10, torch.int64)
    key_cache, value_cache = cache(code, "nd", 19).view(torch.uint8), cache(code, "nd", 20).view(torch.uint8)
    expected = [key_cache.clone().view(code), value_cache.clone().view(code)]
    m = torch.finfo(code).max
    qk = (key.float() / k_scale).clamp(-m, m).to(code)
    qv = (value.float() / v_scale[:, None]).clamp(-m, m).to(code)
    ascend_kv.reshape_and_cache(qk, qv, *expected, slot_mapping)
    vllm.reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale)
    assert bits_equal(key_cache.view(code), expected[0]) and bits_equal(value_cache.view(code), expected[1])


def test_vllm_auto_copies_and_other_strings_are_refused() -> None:
    key = special_tokens(4, torch.float16, 21)
    key_cache, value_cache = torch.zeros(NB, BS, H, D, dtype=torch.float16), torch.zeros(NB, BS, H, D,
                                                                                        dtype=torch.float16)
    vllm.reshape_and_cache_flash(key, key, key_cache, value_cache, torch.tensor([1, 2]), "auto", torch.tensor(1.0),
                                 torch.tensor(1.0))
    assert bits_equal(key_cache[0, 1:3], key[:2])
    before = key_cache.clone()
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        vllm.reshape_and_cache_flash(key, key, key_cache, value_cache, torch.tensor([1, 2]), "int8",
                                     torch.tensor(1.0), torch.tensor(1.0))
    assert bits_equal(key_cache, before)


def test_mindie_fp16_scale_and_int8_offset_composition() -> None:
    """MindIE's KV int8: fp16 key / fp16 scale [H*D] + int8 offset, rounded, in fp16."""
    key = special_tokens(12, torch.float16, 22).nan_to_num(0.0, 0.0, 0.0)
    scale = static_scale("channel", 0, torch.float16, False, 23)        # [H*D]
    off = offset_like(scale, torch.int8, 24)
    two_op, one_call = cache(torch.int8, "nz", 25), cache(torch.int8, "nz", 25)
    q = torch.round(key / scale.reshape(H, D) + off.reshape(H, D)).clamp(-128, 127).to(torch.int8)
    slot_mapping = slots(10, torch.int32)
    ascend_kv.reshape_and_cache(q, q, two_op, two_op.clone(), slot_mapping, kv_cache_cfg="nz")
    value_cache = one_call.clone()
    ascend_kv.reshape_and_cache(key, key, one_call, value_cache, slot_mapping, kv_cache_cfg="nz", k_scale=scale,
                                k_offset=off, v_scale=scale, v_offset=off)
    assert bits_equal(one_call, two_op) and bits_equal(value_cache, two_op)


# ----------------------------------------------------------------------------- rules: raised first, nothing written


def write_call(**changes: Any) -> dict[str, Any]:
    """A valid quantizing write, with ``changes``."""
    call: dict[str, Any] = {
        "key": torch.ones(4, H, D, dtype=torch.bfloat16), "value": torch.ones(4, H, D, dtype=torch.bfloat16),
        "key_cache": torch.zeros(NB, BS, H, D, dtype=torch.int8), "value_cache": torch.zeros(NB, BS, H, D,
                                                                                            dtype=torch.int8),
        "slot_mapping": torch.tensor([0, 1, 2, 3]), "k_scale": torch.ones(H, D, dtype=torch.bfloat16),
        "v_scale_cache": torch.zeros(NB, BS, H)}
    call.update(changes)
    return {k: v for k, v in call.items() if v is not None}


WRITE_RULES: list[tuple[dict[str, Any], type[Exception] | None, str]] = [
    ({"k_inv_scale": torch.ones(())}, ValueError, "at most one of k_scale, k_inv_scale and k_scale_cache"),
    ({"v_scale": torch.ones(())}, ValueError, "at most one of v_scale"),
    ({"k_scale": None, "k_offset": torch.zeros((), dtype=torch.int8)}, ValueError, "k_offset needs a static scale"),
    ({"v_offset": torch.zeros((), dtype=torch.int8)}, ValueError, "v_offset needs a static scale.*dynamic"),
    ({"key_cache": torch.zeros(NB, BS, H, D, dtype=torch.float8_e5m2), "k_offset": torch.zeros((), dtype=torch.int8)},
     ValueError, "k_offset is for int8 codes"),
    ({"key_cache": torch.zeros(NB, BS, H, D, dtype=torch.float8_e5m2)}, None, ""),
    ({"key_cache": torch.zeros(NB, BS, H, D, dtype=torch.float16)}, TypeError, "key_cache must have dtype int8"),
    ({"key": torch.ones(4, H, D, dtype=torch.float64)}, TypeError, "key must have dtype float16, bfloat16 or float32"),
    ({"key": torch.ones(4, H, D, dtype=torch.int8)}, TypeError, "key must have dtype float16"),
    ({"k_scale": torch.ones(H, D, dtype=torch.float64)}, TypeError, "k_scale must have dtype"),
    ({"k_scale": torch.ones(1, 1, 1)}, None, ""),
    ({"k_scale": torch.ones(1, 1, 1, 1)}, ValueError, "k_scale must have one element"),
    ({"k_scale": torch.ones(1, H, 1)}, None, ""),
    ({"k_scale": torch.ones(1, H + 1, 1)}, ValueError, r"k_scale must have .* H = 2, D = 32.*\(1, 3, 1\)"),
    ({"k_scale": torch.ones(H * D)}, None, ""),
    ({"k_scale": torch.ones(H * D + 1)}, ValueError, "k_scale must have one element"),
    ({"k_offset": torch.zeros(H, D, dtype=torch.int32)}, None, ""),
    ({"k_offset": torch.zeros(H, D, dtype=torch.int64)}, TypeError, "k_offset must have dtype"),
    ({"k_offset": torch.zeros(H, D + 1, dtype=torch.int8)}, ValueError, "k_offset must have one element"),
    ({"v_scale_cache": torch.zeros(NB, BS, H, 1)}, None, ""),
    ({"v_scale_cache": torch.zeros(NB, BS, H, 2)}, ValueError, r"v_scale_cache must be \[num_blocks"),
    ({"v_scale_cache": torch.zeros(NB, BS, H + 1)}, ValueError, r"v_scale_cache.shape\[2\] \(H\) = 3 must be 2"),
    ({"v_scale_cache": torch.zeros(NB, BS + 1, H)}, ValueError, r"v_scale_cache.shape\[1\] \(block_size\)"),
    ({"v_scale_cache": torch.zeros(NB + 1, BS, H)}, ValueError, r"v_scale_cache.shape\[0\] \(num_blocks\)"),
    ({"v_scale_cache": torch.zeros(NB, BS, H, dtype=torch.float64)}, TypeError, "v_scale_cache must have dtype"),
    ({"v_scale_cache": torch.zeros(NB, BS, H, device="meta")}, TypeError, "v_scale_cache must hold data"),
    ({"v_scale_cache": torch.zeros(1, 1, 1).expand(NB, BS, H)}, ValueError, "v_scale_cache"),
    ({"k_scale": torch.ones(H, D, dtype=torch.bfloat16, device="npu")}, ValueError, "k_scale is on npu"),
    # host scale and offset values (docs/semantics.md §13.3): finite, and a divisor nonzero
    ({"k_scale": torch.tensor(torch.finfo(torch.float32).tiny / 2**23)}, None, ""),  # the smallest positive
    ({"k_scale": torch.tensor(0.0)}, ValueError, (r"^k_scale = 0.0: a quantizing write's scale must not be zero "
     r"\(the write divides by it\)$")),
    ({"k_scale": torch.tensor([[1.0] * D, [1.0] * (D - 1) + [-0.0]])}, ValueError, r"^k_scale\[1, 31\] = -0.0: "),
    ({"k_scale": torch.full((H, D), torch.finfo(torch.bfloat16).max, dtype=torch.bfloat16)}, None, ""),
    ({"k_scale": torch.tensor([1.0, float("inf")])}, ValueError, (r"^k_scale\[1\] = inf: a quantizing write's scale "
     r"must be finite$")),
    ({"k_scale": torch.tensor([float("-inf"), 1.0])}, ValueError, r"^k_scale\[0\] = -inf: "),
    ({"k_scale": torch.ones(H, D, dtype=torch.float16).index_fill(1, torch.tensor([7]), float("nan"))}, ValueError,
     r"^k_scale\[0, 7\] = nan: a quantizing write's scale must be finite$"),
    ({"k_scale": None, "k_inv_scale": torch.tensor(0.0)}, None, ""),  # a factor of 0 divides nothing
    ({"k_scale": None, "k_inv_scale": torch.tensor(float("nan"))}, ValueError, (r"^k_inv_scale = nan: a quantizing "
     r"write's scale must be finite$")),
    ({"k_offset": torch.tensor(float("nan"))}, ValueError, (r"^k_offset = nan: a quantizing write's offset must be "
     r"finite$")),
    ({"k_offset": torch.full((H, D), -65504.0, dtype=torch.float16)}, None, ""),
    ({"k_scale": torch.ones(D, H).index_put_((torch.tensor(4), torch.tensor(1)), torch.tensor(float("nan"))).t()},
     ValueError, r"^k_scale\[1, 4\] = nan: "),  # a transposed scale: the index is the tensor's own
]


@pytest.mark.parametrize(("changes", "error", "message"), WRITE_RULES)
def test_write_rules_at_their_boundary(changes: dict[str, Any], error: type[Exception] | None, message: str) -> None:
    call = write_call(**changes)
    written = [call["key_cache"], call["value_cache"], *scale_caches(call)]
    before = [t.clone() for t in written if t.device.type != "meta"]
    if error is None:
        ascend_kv.reshape_and_cache(**call)
        return
    with pytest.raises(error, match=message):
        ascend_kv.reshape_and_cache(**call)
    assert all(bits_equal(t, b) for t, b in zip([t for t in written if t.device.type != "meta"], before))



def test_device_scales_are_not_read_back() -> None:
    """On the device a call reads no value back, so a NaN or zero scale is not refused there: the write runs as
    the reference computes it (NaN scales give codes of 0, a zero divisor saturates), docs/semantics.md §13.3."""
    k_scale = torch.ones(H, D)
    k_scale[0, 3], k_scale[1, 0] = float("nan"), 0.0
    call = write_call(k_scale=k_scale, key=torch.randn(4, H, D).to(torch.bfloat16))
    expected = {name: t.clone() for name, t in call.items() if name in ("key_cache", "value_cache", "v_scale_cache")}
    reference.reshape_and_cache_quant(call["key"], call["value"], expected["key_cache"], expected["value_cache"],
                                      call["slot_mapping"], k_scale=k_scale, v_scale_cache=expected["v_scale_cache"])
    with pytest.raises(ValueError, match=r"k_scale\[0, 3\] = nan"):  # the same call on the host
        ascend_kv.reshape_and_cache(**write_call(k_scale=k_scale))
    on_device(ascend_kv.reshape_and_cache, **call)  # asserts no transfer
    assert bits_equal(call["key_cache"], expected["key_cache"])
    assert (call["key_cache"][:1, :4, 0, 3] == 0).all() and (call["key_cache"][:1, :4, 1, 0].to(torch.int16).abs() >= 127).all()

def test_write_aliasing_and_key_only_rules() -> None:
    kc = torch.zeros(NB, BS, H, D, dtype=torch.int8)
    shared = torch.zeros(NB * BS * H * 2 + 8)
    buffer = torch.ones(NB * BS * H * D, dtype=torch.int8)  # as bfloat16 scales: finite and nonzero
    before = buffer.clone()
    with pytest.raises(ValueError, match="v_scale_cache"):  # the scales over the value cache's bytes
        ascend_kv.reshape_and_cache(**write_call(value_cache=buffer.view(NB, BS, H, D),
                                                 v_scale_cache=buffer.view(torch.float32)[:NB * BS * H].view(NB, BS, H)))
    assert bits_equal(buffer, before)
    ascend_kv.reshape_and_cache(**write_call(k_scale=None, k_scale_cache=shared[:NB * BS * H].view(NB, BS, H),
                                             v_scale_cache=shared[NB * BS * H:2 * NB * BS * H].view(NB, BS, H)))
    with pytest.raises(ValueError, match="k_scale_cache"):
        ascend_kv.reshape_and_cache(**write_call(k_scale=None, k_scale_cache=shared[:NB * BS * H].view(NB, BS, H),
                                                 v_scale_cache=shared[8:8 + NB * BS * H].view(NB, BS, H)))
    with pytest.raises(ValueError, match="key_cache"):  # a cache over a scale it reads
        ascend_kv.reshape_and_cache(**write_call(k_scale=buffer.view(torch.bfloat16)[:H * D].view(H, D),
                                                 key_cache=buffer.view(NB, BS, H, D)))
    with pytest.raises(ValueError, match="v_scale is given but the call has no value side"):
        ascend_kv.reshape_and_cache(torch.ones(4, H, D), None, kc, None, torch.tensor([0]), v_scale=torch.ones(()))
    with pytest.raises(ValueError, match="out of range"):
        ascend_kv.reshape_and_cache(**write_call(slot_mapping=torch.tensor([0, 1, 2, NB * BS])))


LOAD_RULES: list[tuple[dict[str, Any], type[Exception] | None, str]] = [
    ({"out_dtype": None}, ValueError, "out_dtype is None"),
    ({"out_dtype": torch.float64}, TypeError, "out_dtype must be torch.float16"),
    ({"out_dtype": torch.int8}, TypeError, "out_dtype must be"),
    ({"k_scale": None}, ValueError, "out_dtype = torch.float32 is for a dequantizing load"),
    ({"k_offset": torch.zeros((), dtype=torch.int8)}, None, ""),
    ({"k_scale": None, "k_scale_cache": torch.zeros(NB, BS, H), "k_offset": torch.zeros(())}, ValueError,
     "k_offset needs a static scale"),
    ({"k_scale_cache": torch.zeros(NB, BS, H)}, ValueError, "at most one of k_scale"),
    ({"key_cache": torch.zeros(NB, BS, H, D, dtype=torch.bfloat16)}, TypeError, "key_cache must have dtype int8"),
    # out_dtype is the dtype of both new outputs: a value side read as it is must have it already
    ({"value_cache": torch.zeros(NB, BS, H, D, dtype=torch.int8)}, ValueError,
     (r"out_dtype = torch.float32 is the dtype of both outputs, but value_cache has dtype int8 and is read as it is "
     r"\(no v_scale or v_scale_cache\): give its scale, or pass key= and value= instead of out_dtype")),
    ({"value_cache": torch.zeros(NB, BS, H, D, dtype=torch.int8), "v_scale": torch.ones(())}, None, ""),
]


@pytest.mark.parametrize(("changes", "error", "message"), LOAD_RULES)
def test_load_rules_at_their_boundary(changes: dict[str, Any], error: type[Exception] | None, message: str) -> None:
    call: dict[str, Any] = {"key_cache": torch.zeros(NB, BS, H, D, dtype=torch.int8),
                            "value_cache": torch.zeros(NB, BS, H, D, dtype=torch.float32),  # read as it is
                            "block_table": torch.tensor([[0, 1]]), "context_lens": torch.tensor([20]),
                            "kv_cache_cfg": "nd", "k_scale": torch.ones(()), "out_dtype": torch.float32}
    call.update(changes)
    if error is None:
        ascend_kv.paged_cache_load(**call)
        return
    with pytest.raises(error, match=message):
        ascend_kv.paged_cache_load(**call)


def test_load_output_rules() -> None:
    kc = torch.zeros(NB, BS, H, D, dtype=torch.int8)
    outs = torch.full((20, H, D), 5.0, dtype=torch.bfloat16), torch.zeros(20, H, D, dtype=torch.int8)
    common = {"kv_cache_cfg": "nd", "k_scale": torch.ones(())}
    ascend_kv.paged_cache_load(kc, kc, torch.tensor([[0, 1]]), torch.tensor([20]), key=outs[0], value=outs[1], **common)
    with pytest.raises(TypeError, match="out_dtype = torch.float16 must equal key.dtype"):
        ascend_kv.paged_cache_load(kc, kc, torch.tensor([[0, 1]]), torch.tensor([20]), key=outs[0], value=outs[1],
                                   out_dtype=torch.float16, **common)
    with pytest.raises(TypeError, match="key must have dtype float16, bfloat16 or float32"):
        ascend_kv.paged_cache_load(kc, kc, torch.tensor([[0, 1]]), torch.tensor([20]), key=outs[1], value=outs[1],
                                   **common)
    before = outs[0].clone()
    with pytest.raises(ValueError, match="key may share memory with k_scale|key .*k_scale"):
        ascend_kv.paged_cache_load(kc, kc, torch.tensor([[0, 1]]), torch.tensor([20]), key=outs[0], value=outs[1],
                                   k_scale=outs[0][19], kv_cache_cfg="nd")
    assert bits_equal(outs[0], before)


# ----------------------------------------------------------------------------- the device policy, compile


def test_device_calls_say_why_they_take_the_fallback() -> None:
    """int8 codes run on the quantizing kernel; float8 codes (no fp8 Cast on A2/A3) on the fallback."""
    from test_sim import outside_reason

    key = torch.ones(4, H, D, dtype=torch.bfloat16)
    slots = torch.tensor([0, 1])
    int8 = outside_reason(ascend_kv.reshape_and_cache, key, None, torch.zeros(NB, BS, H, D, dtype=torch.int8), None,
                          slots, k_inv_scale=torch.ones(()))
    assert int8 is None
    fp8 = outside_reason(ascend_kv.reshape_and_cache, key, None,
                         torch.zeros(NB, BS, H, D, dtype=torch.float8_e4m3fn), None, slots, k_scale=torch.ones(()))
    assert fp8 is not None and "need an fp8 Cast" in fp8


def test_a_compiled_step_equals_eager() -> None:
    """One decode step, compiled whole: quantized writes (static C8 K, dynamic V) and dequantized reads."""

    def step(key: torch.Tensor, value: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, vs: torch.Tensor,
             slot_mapping: torch.Tensor, table: torch.Tensor, lens: torch.Tensor, inv: torch.Tensor,
             scale: torch.Tensor, off: torch.Tensor, k_out: torch.Tensor, v_out: torch.Tensor) -> torch.Tensor:
        ascend_kv.reshape_and_cache(key, value, kc, vc, slot_mapping, k_inv_scale=inv, k_offset=off,
                                    v_scale_cache=vs)
        ascend_kv.paged_cache_load(kc, vc, table, lens, kv_cache_cfg="nd", key=k_out, value=v_out, k_scale=scale,
                                   k_offset=off, v_scale_cache=vs)
        return k_out.sum() + v_out.sum()

    def arguments() -> list[torch.Tensor]:
        key, value = special_tokens(4, torch.bfloat16, 30), special_tokens(4, torch.bfloat16, 31)
        inv = static_scale("channel", 1, torch.bfloat16, True, 32)
        return [key.nan_to_num(0.0, 0.0, 0.0), value, cache(torch.int8, "nd", 33), cache(torch.int8, "nd", 34),
                torch.zeros(NB, BS, H), torch.tensor([3, 17, -1, 40]), torch.tensor([[0, 1, 2]]), torch.tensor([48]),
                inv, (1 / inv.float()).to(torch.bfloat16), offset_like(inv, torch.bfloat16, 35),
                torch.zeros(48, H, D, dtype=torch.float32), torch.zeros(48, H, D, dtype=torch.float32)]

    eager, compiled = arguments(), arguments()
    step(*eager)
    torch._dynamo.reset()
    torch.compile(step, fullgraph=True)(*compiled)
    for a, b in zip(eager, compiled):
        assert same(a, b)


# ----------------------------------------------------------------------------- properties


@settings(max_examples=25, deadline=None)
@given(heads=st.integers(1, 3), head_size=st.sampled_from([32, 64]), code=st.sampled_from(CODES),
       scheme=st.sampled_from(SCHEMES), dtype=st.sampled_from(FLOATS), form=st.sampled_from(["tensor", "head",
                                                                                            "channel"]),
       layout=st.sampled_from(["nd", "nz"]), n=st.integers(0, 8), seed=st.integers(0, 2**16))
def test_writes_and_loads_match_the_reference_for_any_shape(heads: int, head_size: int, code: torch.dtype,
                                                            scheme: str, dtype: torch.dtype, form: str, layout: str,
                                                            n: int, seed: int) -> None:
    if code != torch.int8 and scheme.endswith("offset"):
        scheme = scheme.split("_")[0]
    key = special_tokens(n + 3, dtype, seed, heads, head_size)
    key_cache = cache(code, layout, seed, heads, head_size)
    quant: dict[str, torch.Tensor]
    if scheme == "dynamic":
        quant = {"k_scale_cache": scale_cache(seed, heads)}
    else:
        multiply = scheme.startswith("multiply")
        scale = static_scale(form, seed, FLOATS[seed % 3], multiply, seed, heads, head_size)
        quant = {"k_inv_scale" if multiply else "k_scale": scale}
        if scheme.endswith("offset"):
            quant["k_offset"] = offset_like(scale, torch.int8, seed)
    g = torch.Generator().manual_seed(seed)
    slot_mapping = torch.randint(-2, NB * BS, (n,), generator=g)
    value, value_cache = (None, None) if layout == "nd" else (key, key_cache.clone())  # key-only is ND only
    if value is not None:
        quant.update({"v_" + k[2:]: v.clone() for k, v in quant.items()})
    expected, expected_quant = key_cache.clone(), cloned(quant)
    expected_value = None if value_cache is None else value_cache.clone()
    reference.reshape_and_cache_quant(key, value, expected, expected_value, slot_mapping, kv_cache_cfg=layout,
                                      **expected_quant)
    ascend_kv.reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, kv_cache_cfg=layout, **quant)
    assert bits_equal(key_cache, expected)
    for got, want in zip(scale_caches(quant), scale_caches(expected_quant)):
        assert same(got, want)
    if layout == "nz" or "k_inv_scale" in quant:
        return
    load = {**quant, **{"v_" + k[2:]: v for k, v in quant.items()}}  # out_dtype is both outputs' dtype
    table, lens = torch.tensor([[1, 0, 2]]), torch.tensor([n])
    got = ascend_kv.paged_cache_load(key_cache, key_cache, table, lens, kv_cache_cfg="nd", out_dtype=dtype, **load)
    want = reference.paged_cache_load_dequant(key_cache, key_cache, table, lens, kv_cache_cfg=1, out_dtype=dtype,
                                              **load)
    assert same(got[0], want[0]) and same(got[1], want[1])


def test_messages_name_the_argument() -> None:
    """Each refusal names the argument it is about (spot checks of the texts above)."""
    with pytest.raises(ValueError) as raised:
        ascend_kv.reshape_and_cache(**write_call(k_scale=torch.ones(5)))
    assert re.match(r"k_scale must have", str(raised.value))


# ----------------------------------------------------------------------------- the operators


OPS = torch.ops.ascend_kv


@pytest.mark.parametrize("scheme", ["multiply_offset", "dynamic"])
def test_opcheck_reshape_and_cache_quant(scheme: str) -> None:
    key, value = torch.randn(6, H, D, dtype=torch.bfloat16), torch.randn(6, H, D, dtype=torch.bfloat16)
    key_cache, value_cache = cache(torch.int8, "nd", 40), cache(torch.int8, "nd", 41)  # (opcheck multiplies no fp8)
    k = quant_kwargs("k_", scheme, torch.int8, 4, 42)
    v = quant_kwargs("v_", scheme, torch.int8, 5, 43)
    names = ("scale", "inv_scale", "offset", "scale_cache")
    quant = [k.get("k_" + n) for n in names] + [v.get("v_" + n) for n in names]
    torch.library.opcheck(OPS.reshape_and_cache.quant,
                          (key, value, key_cache, value_cache, torch.tensor([3, -1, 17, 3]), "nd", *quant))


@pytest.mark.parametrize("outputs", ["allocated", "given"])
def test_opcheck_paged_cache_load_dequant(outputs: str) -> None:
    key_cache, value_cache = cache(torch.int8, "nd", 44), cache(torch.int8, "nd", 45)
    table, lens = torch.tensor([[2, 0], [1, 2]]), torch.tensor([20, 7])
    quant = (torch.rand(H, D), torch.ones(H, D, dtype=torch.int8), None, None, None, torch.rand(NB, BS, H))
    if outputs == "allocated":
        torch.library.opcheck(OPS.paged_cache_load.dequant,
                              (key_cache, value_cache, table, lens, 1, False, None, False, *quant, torch.bfloat16))
    else:
        key, value = torch.zeros(30, H, D), torch.zeros(30, H, D)
        torch.library.opcheck(OPS.paged_cache_load.dequant_into,
                              (key_cache, value_cache, table, lens, key, value, 1, False, None, False, *quant, None))
