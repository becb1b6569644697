"""Quantizing reshape_and_cache calls reach the quantizing kernel: through the public function on the
sim backend (host tensors, core counts 1/2/7/40/48) and on the fake NPU (an A2 part: one launch,
nothing read back), equal byte for byte to the CPU host path; calls the kernel does not take (fp8
codes, which need the fp8 Cast A2/A3 lack) run on the device fallback and say why.
"""

from __future__ import annotations

import fake_npu
import pytest
import torch
from test_sim import (
    CORES,
    DEVICE_FALLBACK,
    HOST_PATHS,
    KERNELS,
    SIM,
    kernels_on_the_fake_npu,
    outside_reason,
    ran_on,
)

import ascend_kv


def call(layout: str, index_dtype: torch.dtype, seed: int) -> tuple[tuple[torch.Tensor, ...], dict[str, torch.Tensor]]:
    """C8 key (bf16 inv-scale and offset per channel) and dynamic value (fp16 scale cache, FIA's
    transposed layout); ties, saturation, NaN, inf, zeros, padding, duplicates."""
    g = torch.Generator().manual_seed(seed)
    n, h, d, nb, bs = 21, 2, 64, 2, 16
    qkv = (torch.randn(n, 3 * h * d + 16, generator=g) * 90).round() / 2
    qkv[0, h * d:h * d + 6] = torch.tensor([0.5, 1.5, float("nan"), float("inf"), -1e6, -0.0])
    qkv[1, 2 * h * d:3 * h * d] = 0
    qkv = qkv.to(torch.bfloat16)
    key = qkv[:, h * d:2 * h * d].unflatten(1, (h, d))  # a column slice of a QKV buffer
    value = qkv[:, 2 * h * d:3 * h * d].unflatten(1, (h, d))
    shape = (nb, bs, h, d) if layout == "nd" else (nb, h * d // 32, bs, 32)
    key_cache = torch.full(shape, 90, dtype=torch.int8)
    value_cache = torch.full(shape, -7, dtype=torch.int8)
    slots = torch.randperm(nb * bs, generator=g)[:n]
    slots[3], slots[7] = -1, slots[5]  # padding, a duplicate (the later token wins)
    quant = {
        "k_inv_scale": (torch.rand(1, h, d, generator=g) + 0.3).to(torch.bfloat16),
        "k_offset": torch.randint(-9, 9, (1, h, d), generator=g).to(torch.bfloat16),
        "v_scale_cache": torch.full((nb, h, bs), 3.0, dtype=torch.float16).transpose(1, 2),
    }
    return (key, value, key_cache, value_cache, slots.to(index_dtype)), quant


def on_host(args: tuple[torch.Tensor, ...], quant: dict[str, torch.Tensor], layout: str) -> tuple[torch.Tensor, ...]:
    """The CPU host path's result (the C++ reference of docs/semantics.md §13) on copies."""
    key, value, kc, vc, slots = args
    kc, vc, sc = kc.clone(), vc.clone(), quant["v_scale_cache"].clone()
    with ran_on(HOST_PATHS), ascend_kv.use_backend("fallback"):
        ascend_kv.reshape_and_cache(key, value, kc, vc, slots, kv_cache_cfg=layout, **{**quant, "v_scale_cache": sc})
    return kc, vc, sc


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


@pytest.mark.parametrize("cores", CORES)
@pytest.mark.parametrize(("layout", "index_dtype"), [("nd", torch.int32), ("nz", torch.int64)])
def test_sim_runs_the_quantizing_kernel_bit_exactly(configure, cores: int, layout: str,
                                                    index_dtype: torch.dtype) -> None:
    configure(cores, 192 * 1024 - 256 - 8 * 1024)
    args, quant = call(layout, index_dtype, cores)
    want = on_host(args, quant, layout)
    with ran_on(SIM), ascend_kv.use_backend("sim"):
        ascend_kv.reshape_and_cache(*args, kv_cache_cfg=layout, **quant)
    assert same_bytes(args[2], want[0]) and same_bytes(args[3], want[1])
    assert same_bytes(quant["v_scale_cache"], want[2])


@pytest.mark.parametrize("layout", ["nd", "nz"])
def test_fake_npu_runs_one_launch_and_reads_nothing_back(layout: str) -> None:
    args, quant = call(layout, torch.int64, 3)
    want = on_host(args, quant, layout)
    fake_npu.install()
    mirror = fake_npu.same_layout([*args, *quant.values()])
    device_args, device_quant = mirror.values[:5], dict(zip(quant, mirror.values[5:]))
    with kernels_on_the_fake_npu():
        before = int(torch.ops.ascend_kv_host.launches())
        with ran_on(KERNELS), fake_npu.counting() as seen:
            ascend_kv.reshape_and_cache(*device_args, kv_cache_cfg=layout, **device_quant)
        assert int(torch.ops.ascend_kv_host.launches()) - before == 1
    assert seen.transfers == 0 and seen.uploads == 0
    mirror.copy_back()
    assert same_bytes(args[2], want[0]) and same_bytes(args[3], want[1])
    assert same_bytes(quant["v_scale_cache"], want[2])


def test_fp8_codes_run_on_the_device_fallback_and_say_why() -> None:
    key = torch.randn(4, 2, 32)
    cache = torch.zeros(2, 4, 2, 32, dtype=torch.float8_e4m3fn)
    slots = torch.arange(4)
    reason = outside_reason(ascend_kv.reshape_and_cache, key, None, cache, None, slots, k_scale=torch.tensor(0.5))
    assert reason is not None and "fp8 Cast, which the vector cores of Atlas A2/A3 lack" in reason
    fake_npu.install()
    mirror = fake_npu.same_layout([key, cache, slots, torch.tensor(0.5)])
    with kernels_on_the_fake_npu(), ran_on(DEVICE_FALLBACK), pytest.warns(ascend_kv.FallbackWarning):
        ascend_kv.reshape_and_cache(mirror.values[0], None, mirror.values[1], None, mirror.values[2],
                                    k_scale=mirror.values[3])


def test_explain_states_where_quantized_codes_may_differ() -> None:
    write = ascend_kv.explain("reshape_and_cache", "cpu").quantization
    assert "within 1 ulp of a rounding boundary" in write and "k_inv_scale and dynamic" in write
    assert "float8 codes" in write
    assert "byte for byte" in ascend_kv.explain("paged_cache_load", "cpu").quantization
    assert ascend_kv.explain("block_copy", "cpu").quantization == ""


def load_call(layout: str, seed: int) -> tuple[tuple[torch.Tensor, ...], dict[str, object]]:
    """int8 caches with every code, a static per-channel key (scale and int8 offset) and a dynamic value
    (bf16 scale cache)."""
    g = torch.Generator().manual_seed(seed)
    nb, bs, h, d = 4, 16, 2, 32
    shape = (nb, bs, h, d) if layout == "nd" else (nb, h * d // 32, bs, 32)
    key_cache = torch.randint(-128, 128, shape, generator=g, dtype=torch.int8)
    value_cache = torch.randint(-128, 128, shape, generator=g, dtype=torch.int8)
    table = torch.tensor([[2, 0, 1], [3, 1, 0]], dtype=torch.int32)
    lens = torch.tensor([37, 20], dtype=torch.int32)
    quant: dict[str, object] = {
        "k_scale": (torch.rand(1, h, d, generator=g) * 0.1).to(torch.float16),
        "k_offset": torch.randint(-5, 5, (1, h, d), generator=g, dtype=torch.int8),
        "v_scale_cache": (torch.rand(nb, bs, h, generator=g) * 0.05).to(torch.bfloat16),
    }
    return (key_cache, value_cache, table, lens), quant


@pytest.mark.parametrize("cores", [1, 7, 48])
@pytest.mark.parametrize("layout", ["nd", "nz"])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_sim_runs_the_dequantizing_load_bit_exactly(configure, cores: int, layout: str, out_dtype: torch.dtype) -> None:
    configure(cores, 192 * 1024 - 256 - 8 * 1024)
    args, quant = load_call(layout, cores)
    with ran_on(HOST_PATHS), ascend_kv.use_backend("fallback"):
        want = ascend_kv.paged_cache_load(*args, kv_cache_cfg=layout, out_dtype=out_dtype, **quant)
    with ran_on(SIM), ascend_kv.use_backend("sim"):
        got = ascend_kv.paged_cache_load(*args, kv_cache_cfg=layout, out_dtype=out_dtype, **quant)
    assert same_bytes(got[0], want[0]) and same_bytes(got[1], want[1])


def test_fake_npu_dequantizing_load_runs_one_launch_and_reads_nothing_back() -> None:
    args, quant = load_call("nd", 5)
    with ran_on(HOST_PATHS), ascend_kv.use_backend("fallback"):
        want = ascend_kv.paged_cache_load(*args, kv_cache_cfg="nd", out_dtype=torch.float16, **quant)
    fake_npu.install()
    outputs = [torch.zeros_like(want[0]), torch.zeros_like(want[1])]
    mirror = fake_npu.same_layout([*args, *outputs, *quant.values()])
    device = mirror.values
    with kernels_on_the_fake_npu():
        before = int(torch.ops.ascend_kv_host.launches())
        with ran_on(KERNELS), fake_npu.counting() as seen:
            ascend_kv.paged_cache_load(*device[:4], kv_cache_cfg="nd", key=device[4], value=device[5],
                                       **dict(zip(quant, device[6:])))
        assert int(torch.ops.ascend_kv_host.launches()) - before == 1
    assert seen.transfers == 0 and seen.uploads == 0
    mirror.copy_back()
    assert same_bytes(outputs[0], want[0]) and same_bytes(outputs[1], want[1])
