"""The torch_npu facade, called the way Ascend serving engines call torch_npu, checked bit for bit.

Written as vllm-ascend writes its unit tests: ``torch_npu`` is a MagicMock (their
``tests/ut/conftest.py``), here with the cache ops installed by ``ascend_kv.testing``, so the
cache tests check the caches' contents. The same scenarios run under ``torch_npu_stand_in()``
(``import torch_npu`` gives the facade) and on the fake NPU with every index tensor on the
device, where nothing may be read back. Each scenario is one engine's call form (vllm-ascend
0.23 and main, SGLang, MindIE) and its golden is :mod:`torch_npu_golden`, written from
torch_npu's documented semantics.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterator
from typing import Any
from unittest.mock import MagicMock

import fake_npu
import pytest
import torch
import torch_npu_golden as golden
from cases import bits_equal, random_bits
from hypothesis import given
from hypothesis import strategies as st
from test_npu_path import NPU, kernel_library, soc  # noqa: F401  (fixtures: the kernels' host build, the SoC)

import ascend_kv
from ascend_kv import testing
from ascend_kv.compat import torch_npu as facade

I32 = torch.int32
Pairs = list[tuple[torch.Tensor, torch.Tensor]]


@pytest.fixture
def mock_torch_npu() -> Iterator[MagicMock]:
    """vllm-ascend's conftest: ``torch_npu`` is a MagicMock in ``sys.modules``; here its cache ops are real."""
    mock = MagicMock()
    saved = sys.modules.get("torch_npu")
    sys.modules["torch_npu"] = testing.install_cache_ops(mock)
    yield mock
    if saved is None:
        sys.modules.pop("torch_npu", None)
    else:
        sys.modules["torch_npu"] = saved


def slots_tensor(values: list[int], device: torch.device, *, every: int = 1) -> torch.Tensor:
    """int32 slots on ``device``; with ``every > 1`` a strided view (``slot_mapping[::every]``)."""
    spread = [v for value in values for v in [value] + [-7] * (every - 1)]
    return torch.tensor(spread, dtype=I32, device=device)[::every]


def as_nz_storage(torch_npu: Any, cache: torch.Tensor) -> torch.Tensor:
    """``npu_format_cast(cache, 29)``; on the fake NPU its storage reports FRACTAL_NZ (no torch_npu there)."""
    if cache.device.type == "npu":
        fake_npu.set_storage_format(cache, fake_npu.FORMAT_FRACTAL_NZ)
        return cache
    return torch_npu.npu_format_cast(cache, 29)


# ----------------------------------------------------------------------------- the call forms


def vllm_023_attention(torch_npu: Any, dev: torch.device) -> Pairs:
    """vllm-ascend 0.23 ``device_op.reshape_and_cache``: keywords, K/V split from one projection,
    ``kv[0]``/``kv[1]`` of one buffer, block 128, ``slot_mapping[::2]`` with -1 padding."""
    tokens, q_heads, kv_heads, head = 6, 4, 2, 64
    qkv = random_bits((tokens, (q_heads + 2 * kv_heads) * head), torch.float16, 1).to(dev)
    _, k, v = qkv.split([q_heads * head, kv_heads * head, kv_heads * head], dim=-1)
    k, v = k.view(tokens, kv_heads, head), v.view(tokens, kv_heads, head)
    kv = random_bits((2, 3, 128, kv_heads, head), torch.float16, 2).to(dev)
    slots = slots_tensor([5, 130, -1, 383, 0, 129], dev, every=2)
    expected = golden.scatter(k, v, kv[0], kv[1], slots, nz=False)
    torch_npu._npu_reshape_and_cache(key=k, value=v, key_cache=kv[0], value_cache=kv[1], slot_indices=slots)
    return [(kv[0], expected[0]), (kv[1], expected[1])]


def all_padding(torch_npu: Any, dev: torch.device) -> Pairs:
    """A graph-padded batch: every slot -1, nothing written."""
    k = random_bits((4, 1, 32), torch.bfloat16, 3).to(dev)
    kc, vc = (random_bits((2, 128, 1, 32), torch.bfloat16, s).to(dev) for s in (4, 5))
    before = kc.cpu(), vc.cpu()
    torch_npu._npu_reshape_and_cache(key=k, value=k, key_cache=kc, value_cache=vc,
                                     slot_indices=torch.full((4,), -1, dtype=I32, device=dev))
    return [(kc, before[0]), (vc, before[1])]


def mla_512_64(torch_npu: Any, dev: torch.device) -> Pairs:
    """vllm-ascend 0.23 MLA: the latent (512) and rope (64) caches, ``[nb, 128, 1, 512]`` and ``[nb, 128, 1, 64]``."""
    kc = random_bits((3, 128, 1, 512), torch.bfloat16, 6).to(dev)
    vc = random_bits((3, 128, 1, 64), torch.bfloat16, 61).to(dev)
    latent = random_bits((5, 1, 576), torch.bfloat16, 7).to(dev)
    kv_c, k_pe = latent.split([512, 64], dim=-1)
    slots = slots_tensor([0, 127, 128, 300, -1], dev)
    expected = golden.scatter(kv_c, k_pe, kc, vc, slots, nz=False)
    torch_npu._npu_reshape_and_cache(key=kv_c, value=k_pe, key_cache=kc, value_cache=vc, slot_indices=slots)
    return [(kc, expected[0]), (vc, expected[1])]


def mla_column_slices(torch_npu: Any, dev: torch.device) -> Pairs:
    """MLA's latent and rope caches as column slices of one ``[nb, 128, 1, 576]`` buffer, written in place."""
    buf = random_bits((3, 128, 1, 576), torch.bfloat16, 62).to(dev)
    kc, vc = buf[..., :512], buf[..., 512:]
    kv_c, k_pe = random_bits((4, 1, 576), torch.bfloat16, 63).to(dev).split([512, 64], dim=-1)
    slots = slots_tensor([1, 255, -1, 300], dev)
    expected = golden.scatter(kv_c, k_pe, kc, vc, slots, nz=False)
    torch_npu._npu_reshape_and_cache(key=kv_c, value=k_pe, key_cache=kc, value_cache=vc, slot_indices=slots)
    return [(kc, expected[0]), (vc, expected[1])]


def c8_int8_5d_nz(torch_npu: Any, dev: torch.device) -> Pairs:
    """vllm-ascend's C8 path: int8 K and V into per-head 5-D NZ views ``[nb, H, D // 32, bs, 32]`` (default PA_NZ)."""
    heads, head, bs = 2, 128, 128
    k, v = (random_bits((4, heads, head), torch.int8, s).to(dev) for s in (8, 9))
    kc, vc = (random_bits((2, heads, head // 32, bs, 32), torch.int8, s).to(dev) for s in (10, 11))
    slots = slots_tensor([1, 255, -1, 128], dev)
    expected = golden.scatter(k, v, kc, vc, slots, nz=True)
    torch_npu.npu_scatter_pa_kv_cache(k, v, kc, vc, slots)
    return [(kc, expected[0]), (vc, expected[1])]


def mooncake_nz_view_of_nd(torch_npu: Any, dev: torch.device) -> Pairs:
    """vllm-ascend's Mooncake connector: ND storage ``[nb, bs, H, D]`` viewed as NZ ``[-1, H * D // 16, bs, 16]``."""
    heads, head, bs = 2, 64, 128
    k, v = (random_bits((3, heads, head), torch.float16, s).to(dev) for s in (12, 13))
    nd_k, nd_v = (random_bits((2, bs, heads, head), torch.float16, s).to(dev) for s in (14, 15))
    kc, vc = (t.view(-1, heads * head // 16, bs, 16) for t in (nd_k, nd_v))
    slots = slots_tensor([3, 200, 64], dev)
    expected = golden.scatter(k, v, kc, vc, slots, nz=True)
    torch_npu.npu_scatter_pa_kv_cache(k, v, kc, vc, slots)
    return [(kc, expected[0]), (vc, expected[1])]


def format_cast_then_reshape(torch_npu: Any, dev: torch.device) -> Pairs:
    """``npu_format_cast(cache, 29)`` then ``_npu_reshape_and_cache``: NZ taken from the storage format."""
    k, v = (random_bits((3, 2, 32), torch.float16, s).to(dev) for s in (16, 17))
    kc, vc = (as_nz_storage(torch_npu, random_bits((2, 4, 16, 16), torch.float16, s).to(dev)) for s in (18, 19))
    slots = slots_tensor([17, 0, 31], dev)
    expected = golden.scatter(k, v, kc, vc, slots, nz=True)
    torch_npu._npu_reshape_and_cache(key=k, value=v, key_cache=kc, value_cache=vc, slot_indices=slots)
    return [(kc, expected[0]), (vc, expected[1])]


def fp32_pa_nz(torch_npu: Any, dev: torch.device) -> Pairs:
    """A CPU model's fp32 caches in NZ (E = 8), keys fp32 and values fp16."""
    k = random_bits((3, 2, 16), torch.float32, 20).to(dev)
    v = random_bits((3, 2, 16), torch.float16, 21).to(dev)
    kc = random_bits((2, 4, 16, 8), torch.float32, 22).to(dev)
    vc = random_bits((2, 2, 16, 16), torch.float16, 23).to(dev)
    slots = slots_tensor([31, -1, 2], dev)
    expected = golden.scatter(k, v, kc, vc, slots, nz=True)
    torch_npu.npu_scatter_pa_kv_cache(k, v, kc, vc, slots, cache_mode="PA_NZ")
    return [(kc, expected[0]), (vc, expected[1])]


def vllm_main_fp8_scatter_gather(torch_npu: Any, dev: torch.device) -> Pairs:
    """vllm-ascend main: ``npu_scatter_pa_kv_cache(..., cache_mode="Norm")`` of fp8 K/V, then
    ``npu_gather_pa_kv_cache(..., seq_offset=, key=, value=)``; -1 and short table rows give zeros."""
    k, v = (random_bits((5, 1, 64), torch.float8_e4m3fn, s).to(dev) for s in (24, 25))
    kc, vc = (random_bits((4, 16, 1, 64), torch.float8_e4m3fn, s).to(dev) for s in (26, 27))
    slots = slots_tensor([0, 17, 33, 48, 63], dev)
    written = golden.scatter(k, v, kc, vc, slots, nz=False)
    torch_npu.npu_scatter_pa_kv_cache(k, v, kc, vc, slots, cache_mode="Norm")
    table = torch.tensor([[2, -1, 7], [1, 3, 0]], dtype=I32, device=dev)       # -1, an id past num_blocks
    seq_lens = torch.tensor([40, 20], dtype=I32, device=dev)
    seq_offset = torch.tensor([5, 32], dtype=I32, device=dev)                  # entry 1 from column 2: past the table
    key, value = (random_bits((62, 1, 64), torch.float8_e4m3fn, s).to(dev) for s in (28, 29))
    expected = golden.gather(written[0], written[1], table, seq_lens, key, value, seq_offset, cumsum=False, nz=False)
    torch_npu.npu_gather_pa_kv_cache(kc, vc, table, seq_lens, seq_offset=seq_offset, key=key, value=value)
    return [(kc, written[0]), (vc, written[1]), (key, expected[0]), (value, expected[1])]


def gather_cumsum_fp32(torch_npu: Any, dev: torch.device) -> Pairs:
    """``npu_gather_pa_kv_cache`` in cumsum mode (``seq_lens[0] == 0``), fp32 keys, int8 values, MLA-like head sizes."""
    kc = random_bits((3, 16, 1, 24), torch.float32, 30).to(dev)
    vc = random_bits((3, 16, 1, 64), torch.int8, 31).to(dev)
    table = torch.tensor([[1, 2], [0, -1]], dtype=I32, device=dev)
    seq_lens = torch.tensor([0, 20, 37], dtype=I32, device=dev)
    key = random_bits((40, 1, 24), torch.float32, 32).to(dev)
    value = random_bits((40, 1, 64), torch.int8, 33).to(dev)
    expected = golden.gather(kc, vc, table, seq_lens, key, value, None, cumsum=True, nz=False)
    torch_npu.npu_gather_pa_kv_cache(kc, vc, table, seq_lens, key, value, is_seq_lens_cumsum=True)
    return [(key, expected[0]), (value, expected[1])]


def gather_int8_nz(torch_npu: Any, dev: torch.device) -> Pairs:
    """``npu_gather_pa_kv_cache`` of int8 NZ caches (both FRACTAL_NZ): outputs ``[rows, T]``, a -1 block zero."""
    kc, vc = (as_nz_storage(torch_npu, random_bits((3, 4, 16, 32), torch.int8, s).to(dev)) for s in (34, 35))
    table = torch.tensor([[2, -1], [0, 1]], dtype=I32, device=dev)
    seq_lens = torch.tensor([20, 17], dtype=I32, device=dev)
    key, value = (random_bits((37, 128), torch.int8, s).to(dev) for s in (36, 37))
    expected = golden.gather(kc, vc, table, seq_lens, key, value, None, cumsum=False, nz=True)
    torch_npu.npu_gather_pa_kv_cache(kc, vc, table, seq_lens, key, value)
    return [(key, expected[0]), (value, expected[1])]


def vllm_023_mla_chunked_prefill(torch_npu: Any, dev: torch.device) -> Pairs:
    """vllm-ascend 0.23 MLA chunked prefill: ``atb.npu_paged_cache_load(..., seq_starts=, key=, value=)``."""
    buf = random_bits((4, 128, 1, 576), torch.bfloat16, 38).to(dev)
    kc, vc = buf[..., :512], buf[..., 512:]
    table = torch.tensor([[3, 1, -1], [0, 2, 1]], dtype=I32, device=dev)
    context = torch.tensor([130, 100], dtype=I32, device=dev)
    starts = torch.tensor([0, 128], dtype=I32, device=dev)
    key = random_bits((230, 1, 512), torch.bfloat16, 39).to(dev)
    value = random_bits((230, 1, 64), torch.bfloat16, 40).to(dev)
    expected = golden.gather(kc, vc, table, context, key, value, starts, cumsum=False, nz=False)
    out = torch_npu.atb.npu_paged_cache_load(kc, vc, table, context, seq_starts=starts, key=key, value=value)
    assert out[0] is key and out[1] is value
    return [(key, expected[0]), (value, expected[1])]


def sglang_pool(torch_npu: Any, dev: torch.device) -> Pairs:
    """SGLang's NPU KV pool: per-layer ``k_buffer[layer].view(-1, page, H, D)``, ``slot_indices=loc``."""
    layers, page, heads, head = 2, 128, 2, 32
    k_buffer, v_buffer = (random_bits((layers, 2 * page, heads, head), torch.float16, s).to(dev) for s in (41, 42))
    cache_k, cache_v = (random_bits((3, heads, head), torch.float16, s).to(dev) for s in (43, 44))
    loc = torch.tensor([200, 7, 129], dtype=torch.int64, device=dev)
    kc, vc = k_buffer[1].view(-1, page, heads, head), v_buffer[1].view(-1, page, heads, head)
    expected = golden.scatter(cache_k, cache_v, kc, vc, loc, nz=False)
    torch_npu._npu_reshape_and_cache(key=cache_k, value=cache_v, key_cache=kc, value_cache=vc, slot_indices=loc)
    return [(kc, expected[0]), (vc, expected[1])]


def sglang_padding_to_slot_0(torch_npu: Any, dev: torch.device) -> Pairs:
    """SGLang pads a batch by sending its dummy tokens to slot 0: the last token naming a slot wins."""
    k, v = (random_bits((4, 1, 32), torch.float16, s).to(dev) for s in (50, 51))
    kc, vc = (random_bits((2, 16, 1, 32), torch.float16, s).to(dev) for s in (52, 53))
    loc = torch.tensor([5, 0, 0, 0], dtype=I32, device=dev)
    expected = golden.scatter(k, v, kc, vc, loc, nz=False)
    torch_npu._npu_reshape_and_cache(key=k, value=v, key_cache=kc, value_cache=vc, slot_indices=loc)
    return [(kc, expected[0]), (vc, expected[1])]


def mindie_int8_keys(torch_npu: Any, dev: torch.device) -> Pairs:
    """MindIE, positional: int8 keys with bfloat16 values, ND; and the key-only ``_siso`` write."""
    k = random_bits((3, 1, 32), torch.int8, 45).to(dev)
    v = random_bits((3, 1, 16), torch.bfloat16, 46).to(dev)
    kc, vc = random_bits((2, 16, 1, 32), torch.int8, 47).to(dev), random_bits((2, 16, 1, 16), torch.bfloat16, 48).to(dev)
    latent = random_bits((2, 16, 1, 32), torch.int8, 49).to(dev)
    slots = slots_tensor([31, 0, -1], dev)
    expected = golden.scatter(k, v, kc, vc, slots, nz=False)
    expected_latent, _ = golden.scatter(k, None, latent, None, slots, nz=False)
    torch_npu._npu_reshape_and_cache(k, v, kc, vc, slots)
    torch_npu._npu_reshape_and_cache_siso(k, latent, slots)
    return [(kc, expected[0]), (vc, expected[1]), (latent, expected_latent)]


SCENARIOS: list[Callable[[Any, torch.device], Pairs]] = [
    vllm_023_attention, all_padding, mla_512_64, mla_column_slices, c8_int8_5d_nz, mooncake_nz_view_of_nd, format_cast_then_reshape,
    fp32_pa_nz, vllm_main_fp8_scatter_gather, gather_cumsum_fp32, gather_int8_nz, vllm_023_mla_chunked_prefill,
    sglang_pool, sglang_padding_to_slot_0, mindie_int8_keys,
]


def assert_bits(pairs: Pairs) -> None:
    for i, (actual, expected) in enumerate(pairs):
        assert bits_equal(actual.cpu(), expected), f"tensor {i} differs from the golden"


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_a_magicmock_torch_npu_with_the_cache_ops_installed(mock_torch_npu: MagicMock, scenario: Any) -> None:
    import torch_npu  # the engine's own import: the MagicMock of the fixture

    assert torch_npu is mock_torch_npu
    assert_bits(scenario(torch_npu, torch.device("cpu")))


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_under_the_stand_in(backend: str, scenario: Any) -> None:
    """On each host backend: the fallback and the kernels' host build (sim)."""
    with testing.torch_npu_stand_in():
        import torch_npu
        import torch_npu.atb

        assert torch_npu._npu_reshape_and_cache is facade._npu_reshape_and_cache
        assert torch_npu.atb.npu_paged_cache_load is facade.atb.npu_paged_cache_load
        assert_bits(scenario(torch_npu, torch.device("cpu")))


class Counted:
    """The facade with every call counted by the fake NPU (the scenario's own setup and golden are not)."""

    def __init__(self, module: Any, seen: list[fake_npu.Counts]) -> None:
        self._module, self._seen = module, seen

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._module, name)
        if name == "atb":
            return Counted(target, self._seen)

        def call(*args: Any, **kwargs: Any) -> Any:
            with fake_npu.counting() as seen:
                result = target(*args, **kwargs)
            self._seen.append(seen)
            return result

        return call


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_on_the_fake_npu_with_device_indices_reading_nothing_back(soc: str, scenario: Any) -> None:  # noqa: F811
    seen: list[fake_npu.Counts] = []
    pairs = scenario(Counted(facade, seen), NPU)
    assert seen and all(s.transfers == 0 and s.uploads == 0 for s in seen), seen  # every index tensor on the NPU
    assert_bits(pairs)


def nz_reshape_case(cache_shape: tuple[int, ...], dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    e = 32 // dtype.itemsize
    rows = cache_shape[1] * e if len(cache_shape) == 4 else cache_shape[-1]
    k = random_bits((2, 1, rows), dtype, 90).to(NPU)
    kc, vc = (random_bits(cache_shape, dtype, s).to(NPU) for s in (91, 92))
    return k, kc, vc, torch.tensor([1, 17], dtype=I32, device=NPU)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int8, torch.float8_e5m2])
def test_fractal_nz_caches_in_the_nz_shape_are_taken_in_place(soc: str, dtype: torch.dtype) -> None:  # noqa: F811
    """torch_npu's FRACTAL_NZ of ``[nb, T // E, bs, E]`` (E = C0, bs % 16 == 0) is its row-major bytes: the
    operators write it in place, through the facade and ascend_kv.reshape_and_cache alike."""
    k, kc, vc, slots = nz_reshape_case((2, 2, 16, 32 // dtype.itemsize), dtype)
    for cache in (kc, vc):
        fake_npu.set_storage_format(cache, fake_npu.FORMAT_FRACTAL_NZ)
    expected = golden.scatter(k, k, kc, vc, slots, nz=True)
    facade._npu_reshape_and_cache(k, k, kc, vc, slots)
    assert_bits([(kc, expected[0]), (vc, expected[1])])
    expected = golden.scatter(k, k, kc, vc, slots.flip(0), nz=True)
    ascend_kv.reshape_and_cache(k, k, kc, vc, slots.flip(0), kv_cache_cfg="nz")  # the public function too
    assert_bits([(kc, expected[0]), (vc, expected[1])])


@pytest.mark.parametrize(("shape", "dtype", "why"), [
    ((2, 4, 16, 8), torch.float32, "4-byte elements"),
    ((2, 16, 32), torch.float16, "is not .num_blocks, T // E, block_size, E = 16."),
], ids=["fp32", "logical ND shape"])
def test_fractal_nz_caches_whose_bytes_are_elsewhere_are_refused_saying_why(soc: str, shape: Any, dtype: Any,  # noqa: F811
                                                                             why: str) -> None:
    k, kc, vc, slots = nz_reshape_case(shape, dtype)
    fake_npu.set_storage_format(kc, fake_npu.FORMAT_FRACTAL_NZ)
    before = kc.cpu()
    with pytest.raises(ValueError, match=f"key_cache is stored in the NPU's private format FRACTAL_NZ.*{why}"):
        ascend_kv.reshape_and_cache(k, k, kc, vc, slots, kv_cache_cfg="nz")
    assert bits_equal(kc.cpu(), before)


def test_a_strided_fractal_nz_view_is_refused(soc: str) -> None:  # noqa: F811
    buf = random_bits((2, 2, 32, 16), torch.float16, 93).to(NPU)
    fake_npu.set_storage_format(buf, fake_npu.FORMAT_FRACTAL_NZ)
    kc = buf[:, :, ::2]                                                   # block_size 16, slots two rows apart
    outputs = {name: torch.zeros(4, 32, dtype=torch.float16, device=NPU) for name in ("key", "value")}
    with pytest.raises(ValueError, match="key_cache is stored in the NPU's private format FRACTAL_NZ.*strided view"):
        ascend_kv.paged_cache_load(kc, kc.contiguous(), torch.tensor([[0]], device=NPU), torch.tensor([4], device=NPU),
                                   **outputs)
    assert not outputs["key"].cpu().any()


# ----------------------------------------------------------------------------- errors: named, nothing written


def test_compress_arguments_are_not_implemented_and_named() -> None:
    k = torch.zeros(2, 1, 16, dtype=torch.float16)
    kc = torch.zeros(2, 1, 16, 16, dtype=torch.float16)
    slots = torch.tensor([0, 1], dtype=I32)
    for compress in ({"compress_lens": slots}, {"seq_lens": slots, "compress_seq_offsets": slots}):
        with pytest.raises(NotImplementedError) as info:
            facade.npu_scatter_pa_kv_cache(k, k, kc, kc.clone(), slots, **compress)
        assert all(name in str(info.value) for name in compress), info.value
    with pytest.raises(NotImplementedError, match="4-D key"):
        facade.npu_scatter_pa_kv_cache(k.view(1, 2, 1, 16), k.view(1, 2, 1, 16), kc, kc.clone(), slots)
    assert not kc.any()


def test_bad_cache_mode_and_mixed_formats_are_errors_that_write_nothing() -> None:
    k = random_bits((2, 1, 16), torch.float16, 60)
    kc, vc = torch.zeros(2, 16, 1, 16, dtype=torch.float16), torch.zeros(2, 16, 1, 16, dtype=torch.float16)
    slots = torch.tensor([0, 1], dtype=I32)
    with pytest.raises(ValueError, match="cache_mode must be 'PA_NZ', 'Norm' or None, got 'nz'"):
        facade.npu_scatter_pa_kv_cache(k, k, kc, vc, slots, cache_mode="nz")
    with pytest.raises(ValueError, match="key_cache has storage format 29 but value_cache has 2"):
        facade._npu_reshape_and_cache(k, k, facade.npu_format_cast(torch.zeros_like(kc), 29), vc, slots)
    with pytest.raises(ValueError, match="acl_format must be 2 .ND. or 29 .FRACTAL_NZ., got 3"):
        facade.npu_format_cast(kc, 3)
    with pytest.raises(ValueError, match="slot_indices.1. = 32 is out of range"):
        facade._npu_reshape_and_cache(k, k, kc, vc, torch.tensor([0, 32], dtype=I32))
    assert not kc.any() and not vc.any()


# ----------------------------------------------------------------------------- storage formats off the NPU


def test_a_format_belongs_to_the_tensor_cast_and_the_views_taken_from_it() -> None:
    """As torch_npu: the cast's result has the format, and so does every view taken from it; the cast's
    input, the buffer it is a view of and its siblings keep theirs."""
    buf = torch.zeros(2, 3, 4, 16, 16)
    assert facade.get_npu_format(buf) == 2
    kv = facade.npu_format_cast(buf, 29)
    assert kv.data_ptr() == buf.data_ptr() and kv.shape == buf.shape and facade.get_npu_format(buf) == 2
    views = [kv, kv[0], kv[1], kv[1][2], kv[:, 1:], kv[0, :2], kv.view(6, 4, 16, 16), *kv.unbind(0)]
    assert [facade.get_npu_format(v) for v in views] == [29] * len(views)
    nd = facade.npu_format_cast(kv[1], 2)
    assert facade.get_npu_format(nd) == 2 and facade.get_npu_format(nd[0]) == 2
    assert facade.get_npu_format(kv[1]) == 29 and facade.get_npu_format(kv) == 29
    t = buf[0]
    k = facade.npu_format_cast(t, 29)
    assert facade.get_npu_format(k) == 29 and facade.get_npu_format(k[2]) == 29
    assert [facade.get_npu_format(v) for v in (t, buf, buf[0], buf[1], buf[1][0])] == [2] * 5
    assert facade.get_npu_format(torch.zeros(2, 3, 4, 16, 16)) == 2


def test_nd_and_nz_caches_as_views_of_one_buffer() -> None:
    """vllm-ascend's layouts: one allocation for every layer, K and V per layer, some layers' caches cast
    to FRACTAL_NZ and others left ND. Each cache is written in its own layout and nothing else changes."""
    layers, nb, bs, heads, dim = 3, 4, 16, 1, 16
    buf = torch.zeros(layers, 2, nb, heads * dim // 16, bs, 16, dtype=torch.float16)  # NZ-shaped layer caches
    nz_layers = {0, 2}
    caches = [[facade.npu_format_cast(buf[l][i], 29) if l in nz_layers else buf[l][i].view(nb, bs, heads, dim)
               for i in range(2)] for l in range(layers)]
    assert [[facade.get_npu_format(c) for c in pair] for pair in caches] == [[29, 29], [2, 2], [29, 29]]
    slots = torch.tensor([3, 17, -1, 40], dtype=I32)
    for l, (kc, vc) in enumerate(caches):
        k, v = (random_bits((4, heads, dim), torch.float16, 200 + 2 * l + i) for i in range(2))
        before = buf.clone()
        expected = golden.scatter(k, v, kc, vc, slots, nz=l in nz_layers)
        facade._npu_reshape_and_cache(key=k, value=v, key_cache=kc, value_cache=vc, slot_indices=slots)
        assert_bits([(kc, expected[0]), (vc, expected[1])])
        untouched = torch.ones(layers, dtype=torch.bool)
        untouched[l] = False
        assert bits_equal(buf[untouched], before[untouched])
    assert [facade.get_npu_format(v) for v in (buf, buf[1], buf[0])] == [2, 2, 2]


def test_views_taken_inside_a_compiled_step_keep_their_format() -> None:
    """K/V views of a cast buffer and of a plain one, taken inside the compiled function: each written
    in its layout, as eagerly (Dynamo reads no attribute of such a view's base)."""

    def step(k: torch.Tensor, nz: torch.Tensor, nd: torch.Tensor, slots: torch.Tensor) -> tuple[torch.Tensor, ...]:
        facade._npu_reshape_and_cache(k, k, nz[0], nz[1], slots)
        facade._npu_reshape_and_cache(k, k, nd[0], nd[1], slots)
        return nz, nd

    def inputs() -> tuple[torch.Tensor, ...]:
        buf = torch.zeros(2, 2, 3, 16, 16, 16, dtype=torch.float16)
        return (random_bits((3, 16, 16), torch.float16, 97), facade.npu_format_cast(buf[0], 29), buf[1],
                torch.tensor([1, 20, 33], dtype=I32))

    expected = step(*inputs())
    torch._dynamo.reset()
    actual = torch.compile(step, fullgraph=True, backend="aot_eager")(*inputs())
    assert all(bits_equal(a, e) for a, e in zip(actual, expected))
    assert not bits_equal(expected[0], expected[1])  # NZ and ND writes of the same rows differ


@pytest.mark.parametrize("split", ["index", "unbind", "slice"])
def test_indexed_views_of_a_cast_kv_buffer_are_written_nz(split: str) -> None:
    """The issue's case: ``[nb, 16, 16, 16]`` float16 caches, ``kv[0]``/``kv[1]`` of one cast buffer, also
    valid ND shapes ``[nb, bs=16, H=16, D=16]``: written NZ (was silently ND)."""
    kv = facade.npu_format_cast(random_bits((2, 3, 16, 16, 16), torch.float16, 94), 29)
    kc, vc = {"index": (kv[0], kv[1]), "unbind": kv.unbind(0), "slice": (kv[:1][0], kv[1:][0])}[split]
    k, v = (random_bits((3, 16, 16), torch.float16, s) for s in (95, 96))  # T = 256 = 16 x E
    slots = torch.tensor([17, -1, 40], dtype=I32)
    expected = golden.scatter(k, v, kc, vc, slots, nz=True)
    facade._npu_reshape_and_cache(key=k, value=v, key_cache=kc, value_cache=vc, slot_indices=slots)
    assert_bits([(kc, expected[0]), (vc, expected[1])])
    rows = torch.zeros(32, 256, dtype=torch.float16), torch.zeros(32, 256, dtype=torch.float16)
    facade.atb.npu_paged_cache_load(kc, vc, torch.tensor([[1, 2]], dtype=I32), torch.tensor([32], dtype=I32),
                                    key=rows[0], value=rows[1])
    assert bits_equal(rows[0][1], k[0].reshape(-1)) and bits_equal(rows[1][24], v[2].reshape(-1))


@pytest.mark.parametrize("view", ["nd_shaped", "flattened", "head_slice"])
def test_a_view_of_nz_bytes_that_loses_the_tiling_is_refused_saying_why(view: str) -> None:
    kv = facade.npu_format_cast(torch.zeros(2, 3, 4, 16, 16, dtype=torch.float16), 29)
    kc, vc = {"nd_shaped": (kv.view(2, 3, 16, 4, 16)[0], kv.view(2, 3, 16, 4, 16)[1]),
              "flattened": (kv.view(2, 3, -1)[0], kv.view(2, 3, -1)[1]),
              "head_slice": (kv[0, ..., :8], kv[1, ..., :8])}[view]
    key = torch.ones(2, 4, 16, dtype=torch.float16)
    for call in (lambda: facade._npu_reshape_and_cache(key, key, kc, vc, torch.tensor([0, 1], dtype=I32)),
                 lambda: facade.npu_gather_pa_kv_cache(kc, vc, torch.tensor([[0]], dtype=I32),
                                                       torch.tensor([1], dtype=I32), key, key)):
        with pytest.raises(ValueError, match=r"key_cache \(shape .*\) is a view of bytes cast to FRACTAL_NZ \(29\), "
                                             r"but the tensor cast has the NZ tiling .* does not keep it"):
            call()
    assert not kv.any()
    nd = facade.npu_format_cast(kv.view(2, 3, 16, 4, 16), 2)  # its bytes are ND after all: say so
    facade._npu_reshape_and_cache(key, key, nd[0], nd[1], torch.tensor([0, 1], dtype=I32))
    assert torch.equal(nd[0, 0, 1], key[1])


def test_empty_with_format() -> None:
    """vllm-ascend's 310P runner: ``empty_with_format(size=, dtype=, device=, acl_format=29)`` per cache."""
    cache = facade.empty_with_format(size=[4, 8, 16, 16], dtype=torch.float16, device="cpu", acl_format=29)
    assert cache.shape == (4, 8, 16, 16) and cache.dtype == torch.float16 and facade.get_npu_format(cache[2]) == 29
    plain = facade.empty_with_format(torch.Size([2, 3]))
    assert plain.dtype == torch.get_default_dtype() and facade.get_npu_format(plain) == 2


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"size": 4}, TypeError, "size must be a sequence of ints, got int 4"),
    ({"size": torch.tensor([4])}, TypeError, "size must be a sequence of ints"),
    ({"size": [4, 2.0]}, TypeError, r"size\[1\] must be an int"),
    ({"size": [4, -1]}, ValueError, r"size must not hold negative sizes, got \[4, -1\]"),
    ({"size": [4], "dtype": "float16"}, TypeError, "dtype must be a torch.dtype, got str 'float16'"),
    ({"size": [4], "layout": torch.sparse_coo}, ValueError, "layout must be torch.strided"),
    ({"size": [4], "device": "gpu0"}, ValueError, "device must name a device, got str 'gpu0'"),
    ({"size": [4], "pin_memory": "yes"}, TypeError, "pin_memory must be a bool"),
    ({"size": [4], "acl_format": 3}, ValueError, r"acl_format must be 2 \(ND\) or 29 \(FRACTAL_NZ\), got 3"),
    ({"size": [4], "acl_format": "29"}, TypeError, "acl_format must be an int"),
])
def test_empty_with_format_refusals_name_the_argument(kwargs: dict[str, Any], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        facade.empty_with_format(**kwargs)


def test_npu_format_cast_refusals() -> None:
    with pytest.raises(TypeError, match="tensor must be a torch.Tensor, got MagicMock"):
        facade.npu_format_cast(MagicMock(), 29)  # the facade's own cast is strict; ascend_kv.testing's passes mocks
    with pytest.raises(NotImplementedError, match="customize_dtype=torch.bfloat16"):
        facade.npu_format_cast(torch.zeros(4, 4), 29, customize_dtype=torch.bfloat16)


# ----------------------------------------------------------------------------- errors in torch_npu's words


def test_a_forgotten_cache_mode_is_named() -> None:
    """ND caches with the default ``cache_mode="PA_NZ"``: the error says what PA_NZ takes and to pass "Norm"."""
    k = torch.zeros(2, 8, 128, dtype=torch.bfloat16)
    kc, vc = torch.zeros(4, 128, 8, 128, dtype=torch.bfloat16), torch.zeros(4, 128, 8, 128, dtype=torch.bfloat16)
    slots = torch.tensor([0, 1], dtype=I32)
    with pytest.raises(ValueError, match=r"key_cache.shape\[3\] must be E = 16 .* cache_mode='PA_NZ' \(torch_npu's "
                                         r"default\) takes NZ caches .* need cache_mode='Norm'"):
        facade.npu_scatter_pa_kv_cache(k, k, kc, vc, slots)
    nz = torch.zeros(4, 64, 128, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"cache_mode='Norm' takes ND caches .*; NZ caches need cache_mode='PA_NZ'"):
        facade.npu_scatter_pa_kv_cache(k, k, nz, nz.clone(), slots, cache_mode="Norm")
    with pytest.raises(TypeError, match="cache_mode must be a str or None, got a list"):
        facade.npu_scatter_pa_kv_cache(k, k, kc, vc, slots, cache_mode=["Norm"])
    with pytest.raises(TypeError, match="key.dtype must equal key_cache.dtype") as info:  # not a shape: no hint
        facade.npu_scatter_pa_kv_cache(k.half(), k.half(), kc, vc, slots, cache_mode="Norm")
    assert "cache_mode" not in str(info.value)
    assert not kc.any()


def test_the_layout_chosen_by_storage_format_is_said() -> None:
    k = torch.zeros(2, 2, 16, dtype=torch.float16)
    nz_shaped = torch.zeros(2, 2, 16, 16, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"neither cache is FRACTAL_NZ \(29\), so the layout is ND: .* "
                                         r"npu_format_cast\(cache, 29\) of both"):
        facade._npu_reshape_and_cache(k, k, nz_shaped, nz_shaped.clone(), torch.tensor([0, 1], dtype=I32))
    nd_cast = [facade.npu_format_cast(torch.zeros(2, 16, 2, 16, dtype=torch.float16), 29) for _ in range(2)]
    with pytest.raises(ValueError, match=r"both caches are FRACTAL_NZ \(29\), so the layout is NZ"):
        facade._npu_reshape_and_cache(k, k, *nd_cast, torch.tensor([0, 1], dtype=I32))


def gather_args(**changes: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "key_cache": torch.zeros(3, 16, 1, 32), "value_cache": torch.zeros(3, 16, 1, 32),
        "block_tables": torch.tensor([[0]], dtype=I32), "seq_lens": torch.tensor([4], dtype=I32),
        "key": torch.zeros(4, 1, 32), "value": torch.zeros(4, 1, 32)}
    args.update(changes)
    return args


#: Bad calls of each function and the error they must raise, in torch_npu's argument names.
BAD_CALLS: list[tuple[str, Callable[[], Any], type, str]] = [
    ("slot_indices list", lambda: facade._npu_reshape_and_cache(
        torch.zeros(2, 1, 16), torch.zeros(2, 1, 16), torch.zeros(2, 16, 1, 16), torch.zeros(2, 16, 1, 16), [0, 1]),
     TypeError, "slot_indices must be a torch.Tensor, got a list"),
    ("slot_indices float", lambda: facade._npu_reshape_and_cache_siso(
        torch.zeros(2, 1, 16), torch.zeros(2, 16, 1, 16), torch.tensor([0.0, 1.0])),
     TypeError, "slot_indices must have dtype int32 or int64"),
    ("slot_indices 2-D", lambda: facade._npu_reshape_and_cache(
        torch.zeros(2, 1, 16), torch.zeros(2, 1, 16), torch.zeros(2, 16, 1, 16), torch.zeros(2, 16, 1, 16),
        torch.tensor([[0, 1]], dtype=I32)), ValueError, "slot_indices must be a 1-D tensor"),
    ("slot_mapping kept", lambda: facade.npu_scatter_pa_kv_cache(
        torch.zeros(2, 1, 16), torch.zeros(2, 1, 16), torch.zeros(2, 16, 1, 16), torch.zeros(2, 16, 1, 16),
        torch.tensor([0, 99], dtype=I32), cache_mode="Norm"), ValueError, r"slot_mapping\[1\] = 99 is out of range"),
    ("seq_offset list", lambda: facade.npu_gather_pa_kv_cache(**gather_args(), seq_offset=[0]),
     TypeError, "seq_offset must be a torch.Tensor, got a list"),
    ("seq_offset negative", lambda: facade.npu_gather_pa_kv_cache(**gather_args(), seq_offset=torch.tensor([-1])),
     ValueError, r"seq_offset\[0\] = -1 is negative"),
    ("seq_offset entries", lambda: facade.npu_gather_pa_kv_cache(**gather_args(), seq_offset=torch.tensor([0, 0])),
     ValueError, r"seq_offset must have 1 entries \(batch = block_tables.shape\[0\]\)"),
    ("block_tables list", lambda: facade.npu_gather_pa_kv_cache(**gather_args(block_tables=[[0]])),
     TypeError, "block_tables must be a torch.Tensor, got a list"),
    ("seq_lens list", lambda: facade.npu_gather_pa_kv_cache(**gather_args(seq_lens=[4])),
     TypeError, "seq_lens must be a torch.Tensor, got a list"),
    ("seq_lens negative", lambda: facade.npu_gather_pa_kv_cache(**gather_args(seq_lens=torch.tensor([-4]))),
     ValueError, r"seq_lens\[0\] = -4 is negative"),
    ("seq_lens cumsum", lambda: facade.npu_gather_pa_kv_cache(**gather_args(), is_seq_lens_cumsum=True),
     ValueError, r"seq_lens must have 2 entries \(batch \+ 1 in cumsum mode"),
    ("is_seq_lens_cumsum int", lambda: facade.npu_gather_pa_kv_cache(**gather_args(), is_seq_lens_cumsum=1),
     TypeError, "is_seq_lens_cumsum must be a bool, got int 1"),
    ("is_seq_lens_cumsum with NZ", lambda: facade.npu_gather_pa_kv_cache(**gather_args(
        key_cache=facade.npu_format_cast(torch.zeros(3, 4, 16, 8), 29),
        value_cache=facade.npu_format_cast(torch.zeros(3, 4, 16, 8), 29), seq_lens=torch.tensor([0, 4], dtype=I32),
        key=torch.zeros(4, 32), value=torch.zeros(4, 32)), is_seq_lens_cumsum=True),
     ValueError, r"is_seq_lens_cumsum=True is not supported with NZ caches \(both FRACTAL_NZ, 29\)"),
    ("key None", lambda: facade.npu_gather_pa_kv_cache(**gather_args(key=None)),
     TypeError, "key must be a torch.Tensor, got NoneType"),
    ("key too short", lambda: facade.npu_gather_pa_kv_cache(**gather_args(key=torch.zeros(3, 1, 32))),
     ValueError, r"key must have shape \[rows >= 4, 1, 32\]"),
    ("key_cache list", lambda: facade.npu_gather_pa_kv_cache(**gather_args(key_cache=[0])),
     TypeError, "key_cache must be a torch.Tensor, got a list"),
    ("atb context_lens list", lambda: facade.atb.npu_paged_cache_load(
        torch.zeros(3, 16, 1, 32), torch.zeros(3, 16, 1, 32), torch.tensor([[0]]), [4]),
     TypeError, "context_lens must be a torch.Tensor, got a list"),
    ("atb seq_starts list", lambda: facade.atb.npu_paged_cache_load(
        torch.zeros(3, 16, 1, 32), torch.zeros(3, 16, 1, 32), torch.tensor([[0]]), torch.tensor([4]), seq_starts=[0]),
     TypeError, "seq_starts must be a torch.Tensor"),
    ("get_npu_format list", lambda: facade.get_npu_format([1]), TypeError, "tensor must be a torch.Tensor"),
]


@pytest.mark.parametrize(("name", "call", "error", "message"), BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_every_refusal_names_the_callers_argument(name: str, call: Callable[[], Any], error: type,
                                                  message: str) -> None:
    with pytest.raises(error, match=message) as info:
        call()
    assert type(info.value) is error  # TypeError or ValueError, never the dispatcher's RuntimeError
    for ours in ("block_table ", "block_table.", "context_lens", "seq_starts"):
        assert name.startswith("atb") or ours not in str(info.value), info.value


#: The element types torch_npu's scatter docs list beyond ATB's (uint16, uint32) and PyTorch's other float8
#: types, by the same-width integer type their bits are compared in.
WIDER_TYPES = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.float8_e4m3fnuz: torch.uint8,
                 torch.float8_e5m2fnuz: torch.uint8, torch.float8_e8m0fnu: torch.uint8}


@pytest.mark.parametrize("dtype", list(WIDER_TYPES), ids=str)
def test_scatter_and_gather_take_every_element_type(dtype: torch.dtype) -> None:
    """vllm-ascend main's pair (Norm scatter, gather with seq_offset) on each type, compared by bits."""
    ints = WIDER_TYPES[dtype]
    g = torch.Generator().manual_seed(97)
    k = torch.randint(0, 100, (3, 1, 32), generator=g, dtype=torch.int32).to(ints).view(dtype)
    kc, vc = torch.zeros(2, 16, 1, 32, dtype=ints).view(dtype), torch.zeros(2, 16, 1, 32, dtype=ints).view(dtype)
    facade.npu_scatter_pa_kv_cache(k, k, kc, vc, torch.tensor([0, 17, 18], dtype=I32), cache_mode="Norm")
    assert torch.equal(kc.view(ints)[1, 1], k.view(ints)[1]) and torch.equal(vc.view(ints)[1, 2], k.view(ints)[2])
    key, value = torch.zeros(19, 1, 32, dtype=ints).view(dtype), torch.zeros(19, 1, 32, dtype=ints).view(dtype)
    facade.npu_gather_pa_kv_cache(kc, vc, torch.tensor([[0, 1]], dtype=I32), torch.tensor([19], dtype=I32), key, value,
                                  seq_offset=torch.tensor([0], dtype=I32))
    assert torch.equal(key.view(ints)[17], k.view(ints)[1]) and torch.equal(value.view(ints)[0], k.view(ints)[0])


# ----------------------------------------------------------------------------- graphs


def compiled_steps() -> list[tuple[str, Callable[..., Any], Callable[[], tuple[Any, ...]]]]:
    """``(name, step, fresh inputs)`` for each facade function."""

    def nd() -> tuple[Any, ...]:
        return (random_bits((3, 2, 16), torch.float16, 70), random_bits((2, 16, 2, 16), torch.float16, 71),
                random_bits((2, 16, 2, 16), torch.float16, 72), torch.tensor([5, -1, 20], dtype=I32))

    def nz5() -> tuple[Any, ...]:
        return (random_bits((3, 2, 32), torch.int8, 73), random_bits((2, 2, 1, 16, 32), torch.int8, 74),
                random_bits((2, 2, 1, 16, 32), torch.int8, 75), torch.tensor([5, 0, 20], dtype=I32))

    def load() -> tuple[Any, ...]:
        return (random_bits((3, 16, 1, 32), torch.float32, 76), random_bits((3, 16, 1, 32), torch.float32, 77),
                torch.tensor([[2, -1], [0, 5]], dtype=I32), torch.tensor([20, 17], dtype=I32),
                torch.zeros(37, 1, 32), torch.zeros(37, 1, 32))

    def nz_cast() -> tuple[Any, ...]:
        k = random_bits((3, 2, 16), torch.float16, 78)
        caches = [facade.npu_format_cast(random_bits((2, 2, 16, 16), torch.float16, s), 29) for s in (79, 80)]
        return (k, *caches, torch.tensor([5, -1, 20], dtype=I32))

    def nz_plain() -> tuple[Any, ...]:
        k = random_bits((3, 2, 16), torch.float16, 81)
        caches = [random_bits((2, 2, 16, 16), torch.float16, s) for s in (82, 83)]
        return (k, *caches, torch.tensor([5, -1, 20], dtype=I32))

    def reshape(k: Any, kc: Any, vc: Any, s: Any) -> Any:
        facade._npu_reshape_and_cache(key=k, value=k, key_cache=kc, value_cache=vc, slot_indices=s)
        return kc, vc

    def siso(k: Any, kc: Any, vc: Any, s: Any) -> Any:
        facade._npu_reshape_and_cache_siso(k, kc, s)
        return kc

    def scatter(k: Any, kc: Any, vc: Any, s: Any) -> Any:
        facade.npu_scatter_pa_kv_cache(k, k, kc, vc, s)
        return kc, vc

    def gather(kc: Any, vc: Any, t: Any, n: Any, k: Any, v: Any) -> Any:
        facade.npu_gather_pa_kv_cache(kc, vc, t, n, key=k, value=v)
        return k, v

    def cast_inside(k: Any, kc: Any, vc: Any, s: Any) -> Any:
        kc, vc = facade.npu_format_cast(kc, 29), facade.npu_format_cast(vc, 29)
        facade._npu_reshape_and_cache(k, k, kc, vc, s)
        return kc, vc, torch.tensor(facade.get_npu_format(kc))

    def atb_load(kc: Any, vc: Any, t: Any, n: Any, k: Any, v: Any) -> Any:
        return facade.atb.npu_paged_cache_load(kc, vc, torch.where(t < 0, 0, t) % 3, n, key=k, value=v)

    return [("_npu_reshape_and_cache", reshape, nd), ("_npu_reshape_and_cache_siso", siso, nd),
            ("npu_scatter_pa_kv_cache", scatter, nz5), ("npu_gather_pa_kv_cache", gather, load),
            ("atb.npu_paged_cache_load", atb_load, load), ("npu_format_cast + _npu_reshape_and_cache", reshape, nz_cast),
            ("npu_format_cast and get_npu_format in the step", cast_inside, nz_plain)]


@pytest.mark.parametrize(("name", "step", "inputs"), compiled_steps(), ids=[s[0] for s in compiled_steps()])
def test_each_function_compiles_fullgraph_and_traces_as_our_operator(name: str, step: Any, inputs: Any) -> None:
    eager_inputs, compiled_inputs = inputs(), inputs()
    expected = step(*eager_inputs)
    torch._dynamo.reset()
    actual = torch.compile(step, fullgraph=True, backend="aot_eager")(*compiled_inputs)
    for a, e in zip(torch.utils._pytree.tree_leaves(actual), torch.utils._pytree.tree_leaves(expected)):
        assert bits_equal(a, e)
    graph = torch.fx.experimental.proxy_tensor.make_fx(step)(*inputs())
    ops = [str(n.target) for n in graph.graph.nodes if n.op == "call_function"]
    assert any(op.startswith("ascend_kv.") for op in ops), ops


@st.composite
def gather_calls(draw: st.DrawFn) -> tuple[tuple[Any, ...], dict[str, Any], bool]:
    """Any ``npu_gather_pa_kv_cache`` call on small shapes: tables with -1, ids past num_blocks and rows
    too short, cumsum or not, seq_offset or not, ND or NZ (FRACTAL_NZ caches), every dtype pair."""
    from cases import ANY_DTYPE_PAIRS

    nz = draw(st.booleans())
    key_dtype, value_dtype = draw(st.sampled_from(ANY_DTYPE_PAIRS))
    block_size = draw(st.sampled_from([16, 32] if nz else [1, 3, 16]))
    num_blocks, batch, columns = draw(st.integers(1, 4)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    lens = [draw(st.integers(0, (columns + 1) * block_size)) for _ in range(batch)]
    table = torch.tensor([[draw(st.integers(-2, num_blocks + 1)) for _ in range(columns)] for _ in range(batch)],
                         dtype=draw(st.sampled_from([torch.int32, torch.int64])))
    cumsum = not nz and draw(st.booleans())
    seq_lens = torch.tensor([0, *itertools.accumulate(lens)] if cumsum else lens, dtype=table.dtype)
    seq_offset = (torch.tensor([draw(st.integers(0, 2 * block_size)) for _ in lens], dtype=table.dtype)
                  if not nz and draw(st.booleans()) else None)
    rows = sum(lens) + draw(st.integers(0, 2))
    seed = draw(st.integers(0, 2**31))
    caches, outs = [], []
    for i, dtype in enumerate((key_dtype, value_dtype)):
        e = 32 // dtype.itemsize
        if nz:
            cache = facade.npu_format_cast(random_bits((num_blocks, 2, block_size, e), dtype, seed + i), 29)
            out = random_bits((rows, 2 * e), dtype, seed + 2 + i)
        else:
            cache = random_bits((num_blocks, block_size, 1, e), dtype, seed + i)
            out = random_bits((rows, 1, e), dtype, seed + 2 + i)
        caches.append(cache)
        outs.append(out)
    return (*caches, table, seq_lens, *outs), {"seq_offset": seq_offset, "is_seq_lens_cumsum": cumsum}, nz


@given(call=gather_calls())
def test_gather_zero_fills_like_torch_npus_golden(backend: str, call: Any) -> None:
    args, kwargs, nz = call
    want = golden.gather(*args, kwargs["seq_offset"], kwargs["is_seq_lens_cumsum"], nz=nz)
    facade.npu_gather_pa_kv_cache(*args, **kwargs)
    assert_bits([(args[4], want[0]), (args[5], want[1])])
