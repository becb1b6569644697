"""The quantizing reshape_and_cache kernel (ascendc/kernels/reshape_and_cache_quant.cpp) on the host
model, byte for byte against the reference of docs/semantics.md §13 and the slot loop of docs/semantics.md §5.

The kernel is called through the host build's instrument
``torch.ops.ascend_kv_host.reshape_and_cache_quant_kernel`` (the kernel table's entry over CPU
tensors, before any operator rule) at core counts 1/2/7/40/48: ND and NZ caches, int32 and int64
slots with padding, out-of-range slots and duplicates (the last token wins, codes and scale),
static divide / multiply with per-tensor, per-head and per-channel scales and int8 / float
offsets in every compute dtype, dynamic int8 with fp16 / bf16 / fp32 scale caches (also strided),
a quantized key beside a value copied as bytes, key-only; values tying at .5, saturating, NaN, inf
and all-zero rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from ascend_kv.backends import sim

CORES = [1, 2, 7, 40, 48]
NONE, DIVIDE, MULTIPLY, DYNAMIC = range(4)
ND, NZ = 1, 0


@pytest.fixture(scope="module", autouse=True)
def host_library() -> None:
    sim.load()


# ---- the reference (docs/semantics.md §13) ---------------------------------------------------------------------


def q_int8(t: torch.Tensor) -> torch.Tensor:
    r = torch.round(t).clamp(-128, 127)
    return torch.where(torch.isnan(r), torch.zeros_like(r), r).to(torch.int8)


def per(t: torch.Tensor, heads: int, head_size: int) -> torch.Tensor:
    n = t.numel()
    return t.reshape(1, 1) if n == 1 else t.reshape(heads, 1) if n == heads else t.reshape(heads, head_size)


def static_codes(x: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor | None, divide: bool) -> torch.Tensor:
    _, h, d = x.shape
    ct = torch.promote_types(x.dtype, scale.dtype)
    if offset is not None:
        ct = torch.promote_types(ct, offset.dtype)
    s = per(scale, h, d).to(ct)
    t = x.to(ct) / s if divide else x.to(ct) * s
    if offset is not None:
        t = t + per(offset, h, d).to(ct)
    return q_int8(t)


def dynamic_codes(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    xf = x.float()
    a = xf.abs().amax(-1, keepdim=True)
    # 127 / amax as an IEEE float32 division (torch's `127.0 / a` multiplies by a reciprocal)
    return q_int8(xf * torch.div(torch.full_like(a, 127.0), a)), (a * torch.tensor(1 / 127, dtype=torch.float32))[..., 0]


def scatter(cache: torch.Tensor, rows: torch.Tensor, slots: torch.Tensor, layout: int) -> None:
    """The slot loop: row i to slot slots[i] when inside the cache, in token order."""
    nb = cache.shape[0]
    bs = cache.shape[1] if layout == ND else cache.shape[2]
    for i, s in enumerate(slots.tolist()):
        if 0 <= s < nb * bs:
            if layout == ND:
                cache[s // bs, s % bs] = rows[i].reshape(cache.shape[2:])
            else:
                cache[s // bs, :, s % bs, :] = rows[i].reshape(-1, cache.shape[-1])


# ---- calls ---------------------------------------------------------------------------------------


@dataclass
class Side:
    """One side's quantization: scheme, compute dtype and tensors (None when absent)."""

    scheme: int = NONE
    scale: torch.Tensor | None = None
    offset: torch.Tensor | None = None
    scale_cache: torch.Tensor | None = None

    def compute(self, x: torch.Tensor) -> torch.dtype:
        if self.scheme in (NONE, DYNAMIC) or self.scale is None:
            return torch.float32
        ct = torch.promote_types(x.dtype, self.scale.dtype)
        return ct if self.offset is None else torch.promote_types(ct, self.offset.dtype)


def cache_like(tokens_shape: tuple[int, int], nb: int, bs: int, layout: int, dtype: torch.dtype) -> torch.Tensor:
    h, d = tokens_shape
    shape = (nb, bs, h, d) if layout == ND else (nb, h * d * (1 if dtype == torch.int8 else 2) // 32, bs,
                                                   32 if dtype == torch.int8 else 16)
    return torch.full(shape, 0x5A, dtype=torch.uint8).view(dtype) if dtype == torch.int8 else torch.randn(shape).to(dtype)


def run_kernel(key: torch.Tensor, value: torch.Tensor | None, kc: torch.Tensor, vc: torch.Tensor | None,
               slots: torch.Tensor, layout: int, ks: Side, vs: Side) -> None:
    _, h, d = key.shape
    vh, vd = (value.shape[1], value.shape[2]) if value is not None else (1, 1)
    torch.ops.ascend_kv_host.reshape_and_cache_quant_kernel(
        key, value, kc, vc, slots, layout, [ks.scheme, h, d], ks.compute(key), ks.scale, ks.offset, ks.scale_cache,
        [vs.scheme, vh, vd], vs.compute(value) if value is not None else torch.float32, vs.scale, vs.offset,
        vs.scale_cache)


def expected(x: torch.Tensor, cache: torch.Tensor, slots: torch.Tensor, layout: int, side: Side) -> torch.Tensor:
    want = cache.clone()
    if side.scheme == NONE:
        rows = x
    elif side.scheme == DYNAMIC:
        rows, scales = dynamic_codes(x)
        assert side.scale_cache is not None
        nb, bs, _ = side.scale_cache.shape
        scale_want = side.scale_cache.clone()
        for i, s in enumerate(slots.tolist()):
            if 0 <= s < nb * bs:
                scale_want[s // bs, s % bs] = scales[i].to(scale_want.dtype)
        side.scale_cache_expected = scale_want  # type: ignore[attr-defined]
    else:
        assert side.scale is not None
        rows = static_codes(x, side.scale, side.offset, side.scheme == DIVIDE)
    scatter(want, rows.reshape(rows.shape[0], -1), slots, layout)
    return want


def tokens(n: int, h: int, d: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Token rows with ties, saturating values, NaN, inf and an all-zero head."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(n, h, d, generator=g) * 80).round() / 2  # many exact halves: ties
    special = torch.tensor([0.5, 1.5, -2.5, 1e6, -1e6, float("nan"), float("inf"), -0.0])
    x.view(n, -1)[0, :8] = special[:h * d]
    x[min(1, n - 1), h - 1] = 0.0
    return x.to(dtype)


def slot_mapping(n: int, nb: int, bs: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    slots = torch.randperm(nb * bs, generator=g)[:n]
    slots[n // 3] = -1  # padding
    if n > 4:
        slots[4] = slots[2]  # a duplicate: the later token wins
        slots[n - 1] = nb * bs + 5  # out of range: skipped
    return slots.to(dtype)


def bytes_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


STATIC = {
    "c8-bf16-inv-scale-and-offset": (torch.bfloat16, MULTIPLY, lambda h, d: torch.rand(1, h, d).to(torch.bfloat16) + 0.25,
                                     lambda h, d: torch.randint(-8, 8, (1, h, d)).to(torch.bfloat16)),
    "fp16-divide-per-head-int8-offset": (torch.float16, DIVIDE, lambda h, d: torch.tensor([0.5, 0.25, 2.0, 0.013])[:h].to(torch.float16),
                                         lambda h, d: torch.tensor([1, -3, 0, 7], dtype=torch.int8)[:h]),
    "bf16-fp32-scale-per-tensor": (torch.bfloat16, DIVIDE, lambda h, d: torch.tensor(0.37), None),
    "fp32-multiply-per-channel-fp32-offset": (torch.float32, MULTIPLY, lambda h, d: torch.rand(h * d) + 0.5,
                                              lambda h, d: torch.rand(h * d) * 4 - 2),
    "fp16-bf16-scale-int32-offset": (torch.float16, MULTIPLY, lambda h, d: torch.tensor([0.5], dtype=torch.bfloat16),
                                     lambda h, d: torch.tensor([3], dtype=torch.int32)),
}


@pytest.mark.parametrize("cores", CORES)
@pytest.mark.parametrize("name", sorted(STATIC))
@pytest.mark.parametrize("layout", [ND, NZ])
def test_static_write_equals_the_reference(configure, cores: int, name: str, layout: int) -> None:
    configure(cores, 192 * 1024 - 256 - 8 * 1024)
    dtype, scheme, make_scale, make_offset = STATIC[name]
    n, h, d, nb, bs = 23, 4, 32, 5, 8
    torch.manual_seed(cores)
    key = tokens(n, h, d, dtype, cores)
    value = tokens(n, h, d, dtype, cores + 1) * 0.75
    ks = Side(scheme, make_scale(h, d), make_offset(h, d) if make_offset else None)
    vs = Side(scheme, make_scale(h, d), None)
    kc, vc = cache_like((h, d), nb, bs, layout, torch.int8), cache_like((h, d), nb, bs, layout, torch.int8)
    slots = slot_mapping(n, nb, bs, torch.int64 if cores % 2 else torch.int32, cores)
    kw, vw = expected(key, kc, slots, layout, ks), expected(value, vc, slots, layout, vs)
    run_kernel(key, value, kc, vc, slots, layout, ks, vs)
    assert bytes_equal(kc, kw)
    assert bytes_equal(vc, vw)


@pytest.mark.parametrize("cores", CORES)
@pytest.mark.parametrize("scale_dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("d", [32, 128])  # amax on the scalar unit / on the vector unit (a multiple of 64)
def test_dynamic_write_fills_codes_and_scales_at_the_slot(configure, cores: int, scale_dtype: torch.dtype,
                                                          d: int) -> None:
    configure(cores, 192 * 1024 - 256 - 8 * 1024)
    n, h, nb, bs = 19, 2, 4, 8
    key = tokens(n, h, d, torch.bfloat16, cores)
    key[2, 1, 3] = float("nan")
    key[3, 0, 5] = float("-inf")
    kc = cache_like((h, d), nb, bs, ND, torch.int8)
    # FIA's (blocknum, N, blocksize) scale cache, passed transposed: strided
    scale_cache = torch.full((nb, h, bs), 7.0, dtype=scale_dtype).transpose(1, 2)
    ks = Side(DYNAMIC, scale_cache=scale_cache)
    slots = slot_mapping(n, nb, bs, torch.int64, cores)
    kw = expected(key, kc, slots, ND, ks)
    run_kernel(key, None, kc, None, slots, ND, ks, Side())
    assert bytes_equal(kc, kw)
    want = ks.scale_cache_expected  # type: ignore[attr-defined]
    nan = torch.isnan(want)  # a NaN scale: any NaN (its payload is the hardware's)
    assert torch.equal(torch.isnan(scale_cache), nan)
    assert bytes_equal(scale_cache[~nan], want[~nan])


@pytest.mark.parametrize("layout", [ND, NZ])
def test_quantized_key_beside_a_value_copied_as_bytes(configure, layout: int) -> None:
    configure(7, 192 * 1024 - 256 - 8 * 1024)
    n, h, d, nb, bs = 17, 2, 64, 3, 16
    key = tokens(n, h, d, torch.bfloat16, 3)
    value = tokens(n, h, d, torch.bfloat16, 4)
    kc = cache_like((h, d), nb, bs, layout, torch.int8)
    vc = cache_like((h, d), nb, bs, layout, torch.bfloat16)
    ks = Side(MULTIPLY, torch.tensor([0.5], dtype=torch.bfloat16), torch.tensor([1], dtype=torch.int8))
    slots = slot_mapping(n, nb, bs, torch.int32, 5)
    kw, vw = expected(key, kc, slots, layout, ks), expected(value, vc, slots, layout, Side())
    run_kernel(key, value, kc, vc, slots, layout, ks, Side())
    assert bytes_equal(kc, kw)
    assert bytes_equal(vc, vw)


@pytest.mark.parametrize(("h", "d"), [(1, 3), (3, 5), (2, 24), (5, 7)])
def test_rows_of_any_length(configure, h: int, d: int) -> None:
    """ND rows that are no whole number of 32-byte blocks (nor of 8 floats): parameter rows stay aligned."""
    configure(7, 192 * 1024 - 256 - 8 * 1024)
    n, nb, bs = 13, 4, 4
    key = tokens(n, h, d, torch.float16, h * d)
    value = tokens(n, h, d, torch.bfloat16, h + d)
    ks = Side(MULTIPLY, (torch.rand(h * d) + 0.5).to(torch.float16), torch.randint(-4, 4, (h,), dtype=torch.int8))
    scale_cache = torch.zeros(nb, bs, h, dtype=torch.float32)
    vs = Side(DYNAMIC, scale_cache=scale_cache)
    kc, vc = cache_like((h, d), nb, bs, ND, torch.int8), cache_like((h, d), nb, bs, ND, torch.int8)
    slots = slot_mapping(n, nb, bs, torch.int32, h * d)
    kw, vw = expected(key, kc, slots, ND, ks), expected(value, vc, slots, ND, vs)
    run_kernel(key, value, kc, vc, slots, ND, ks, vs)
    assert bytes_equal(kc, kw) and bytes_equal(vc, vw)
    want = vs.scale_cache_expected  # type: ignore[attr-defined]
    assert torch.equal(torch.isnan(scale_cache), torch.isnan(want))
    assert bytes_equal(scale_cache[~torch.isnan(want)], want[~torch.isnan(want)])
