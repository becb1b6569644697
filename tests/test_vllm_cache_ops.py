"""vLLM's cache ops through ascend_kv.compat.vllm (docs/semantics.md §16), under vLLM's names,
argument order, layouts and dtypes (uint8 fp8 caches as vLLM allocates them): bit for bit against
the plain references, the host paths and the device fallback (fake NPU: nothing read back), the
rules at their boundaries (nothing written), compiled and eager, opcheck on every operator.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import fake_npu
import pytest
import torch
from cases import bits_equal, raises_writing_nothing, random_bits
from hypothesis import given
from hypothesis import strategies as st
from npu_fixtures import NPU

import ascend_kv
from ascend_kv.compat import vllm
from ascend_kv.tools import reference

OPS = torch.ops.ascend_kv


def transfers(call: Callable[[], object]) -> int:
    """Device-to-host transfers of ``call()`` on the fake NPU (the device fallback runs there: no kernels)."""
    with fake_npu.counting() as counts:
        call()
    return int(counts.transfers)


# ----------------------------------------------------------------------------- gather_cache


@st.composite
def gathers(draw: st.DrawFn) -> dict[str, object]:
    """A paged MLA cache (any entries shape), sequences at token starts (None: 0), cumulative lengths from
    a non-zero first row sometimes, index dtypes int32/int64, a padded destination."""
    nb, bs = draw(st.integers(1, 6)), draw(st.sampled_from([1, 2, 4, 16]))
    entries = draw(st.sampled_from([(8,), (3, 4), (40,)]))
    batch = draw(st.integers(0, 4))
    lens = [draw(st.integers(0, 2 * bs + 3)) for _ in range(batch)]
    starts = [draw(st.integers(0, 2 * bs)) for _ in range(batch)]
    columns = max([(s + n + bs - 1) // bs for s, n in zip(starts, lens)] + [1])
    table = [[draw(st.integers(0, nb - 1)) for _ in range(columns)] for _ in range(batch)]
    first = draw(st.integers(0, 2))
    cu = [first]
    for n in lens:
        cu.append(cu[-1] + n)
    dtype = draw(st.sampled_from([torch.int32, torch.int64]))
    return {"nb": nb, "bs": bs, "entries": entries, "table": torch.tensor(table, dtype=dtype).reshape(batch, columns),
            "cu": torch.tensor(cu, dtype=dtype), "rows": cu[-1] + draw(st.integers(0, 2)),
            "starts": torch.tensor(starts, dtype=dtype) if draw(st.booleans()) else None,
            "fp8": draw(st.sampled_from([None, "fp8", "fp8_e5m2"])),
            "dtype": draw(st.sampled_from([torch.bfloat16, torch.float16, torch.float32]))}


def gather_tensors(case: dict[str, object], device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """The cache (random bits; fp8 codes as uint8, finite) and a destination of random bits."""
    shape = (case["nb"], case["bs"], *case["entries"])
    if case["fp8"]:
        values = torch.randn(shape) * 4
        src = values.to(reference.VLLM_FP8[case["fp8"]]).view(torch.uint8)
    else:
        src = random_bits(shape, case["dtype"], 1)
    return src.to(device), random_bits((case["rows"], *case["entries"]), case["dtype"], 2).to(device)


def gather_expected(case: dict[str, object], src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    return reference.gather_cache(src.cpu(), dst.cpu().clone(), case["table"], case["cu"], case["starts"],
                                  case["fp8"] or "auto", torch.tensor(0.25))


def gather_call(case: dict[str, object], src: torch.Tensor, dst: torch.Tensor, device: torch.device | str = "cpu") -> None:
    starts = None if case["starts"] is None else case["starts"].to(device)
    ascend_kv.gather_cache(src, dst, case["table"].to(device), case["cu"].to(device), starts,
                           kv_cache_dtype=case["fp8"] or "auto",
                           scale=torch.tensor(0.25, device=device) if case["fp8"] else None)


@given(case=gathers())
def test_gather_cache_matches_the_reference_on_the_host(case: dict[str, object]) -> None:
    src, dst = gather_tensors(case)
    want = gather_expected(case, src, dst)
    gather_call(case, src, dst)
    assert bits_equal(dst, want)


@given(case=gathers())
def test_gather_cache_on_the_device_reads_nothing_back(case: dict[str, object]) -> None:
    src, dst = gather_tensors(case, NPU)
    want = gather_expected(case, src, dst)
    assert transfers(lambda: gather_call(case, src, dst, NPU)) == 0 and bits_equal(dst.cpu(), want)


def test_gather_cache_device_values_out_of_range_keep_their_rows() -> None:
    """Unchecked device values: a column past the table, a block id past the cache, rows past cu_seq_lens."""
    src = random_bits((2, 4, 8), torch.float16, 3).to(NPU)
    dst = random_bits((6, 8), torch.float16, 4).to(NPU)
    before = dst.cpu().clone()
    table = torch.tensor([[1, 7]], device=NPU)          # column 1 names block 7 of 2
    ascend_kv.gather_cache(src, dst, table, torch.tensor([1, 5], device=NPU), torch.tensor([2], device=NPU))
    got = dst.cpu()
    assert bits_equal(got[1:3], src.cpu()[1, 2:4])      # tokens 2, 3 in block 1
    assert bits_equal(got[3:], before[3:]) and bits_equal(got[:1], before[:1])


def test_vllm_seq_starts_is_a_token_offset_not_atb_block_offset() -> None:
    """The issue's case: seq_starts = 3 with block_size 32 reads slots 3.., where ATB's (paged_cache_load) reads 0.."""
    cache = torch.arange(64, dtype=torch.float32).repeat_interleave(8).reshape(2, 32, 8)
    dst = torch.zeros(4, 8)
    table, cu, starts = torch.tensor([[1, 0]], dtype=torch.int32), torch.tensor([0, 4], dtype=torch.int32), \
        torch.tensor([3], dtype=torch.int32)
    vllm.cp_gather_cache(cache, dst, table, cu, 1, starts)
    assert dst[:, 0].tolist() == [35.0, 36.0, 37.0, 38.0]
    atb, _ = ascend_kv.paged_cache_load(cache.reshape(2, 32, 1, 8), cache.reshape(2, 32, 1, 8), table, cu,
                                        kv_cache_cfg="nd", cumsum=True, seq_starts=starts)
    assert atb[:, 0, 0].tolist() == [32.0, 33.0, 34.0, 35.0]


def test_gather_cache_rules_at_their_boundaries_write_nothing() -> None:
    src = random_bits((3, 4, 8), torch.bfloat16, 5)
    dst = random_bits((6, 8), torch.bfloat16, 6)
    t = torch.tensor
    table = t([[0, 1, 2]])
    for cu, starts, tab, message in (
        ([0, 6], [6], table, None),                                    # the last token of the table, the last row
        ([0, 6], [7], table, r"block_table has 3 columns, but batch entry 0 needs columns 1..3"),
        ([0, 7], [0], table, r"cu_seq_lens\[1\] = 7 is past dst's 6 rows"),
        ([1, 0], [0], table, r"cu_seq_lens\[1\] = 0 is smaller than cu_seq_lens\[0\] = 1"),
        ([-1, 0], [0], table, r"cu_seq_lens\[0\] = -1 is negative"),
        ([0, 1], [-1], table, r"seq_starts\[0\] = -1 is negative"),
        ([0, 4], [0], t([[2, 9, 0]]), None),                           # column 1 is not needed
        ([0, 5], [0], t([[2, 3, 0]]), r"block_table\[0, 1\] = 3 is outside \[0, 3\)"),
    ):
        raises_writing_nothing(lambda c=cu, s=starts, b=tab: ascend_kv.gather_cache(src, dst, b, t(c), t(s)), dst, message)
    for call, message, error in (
        (lambda: ascend_kv.gather_cache(src, dst.float(), table, t([0, 1])), r"dst.dtype must equal src_cache.dtype = torch.bfloat16, got torch.float32",
         TypeError),
        (lambda: ascend_kv.gather_cache(src, dst[:, :4], table, t([0, 1])), r"dst must be \[rows, \*entries\]",
         ValueError),
        (lambda: ascend_kv.gather_cache(src, dst, table, t([0, 1, 2])), r"cu_seq_lens must have 2 entries",
         ValueError),
        (lambda: ascend_kv.gather_cache(src, dst, table, t([0, 1]), kv_cache_dtype="fp8", scale=t(1.0)),
         r"src_cache must have dtype torch.uint8 or torch.float8_e4m3fn for kv_cache_dtype = 'fp8'", TypeError),
        (lambda: ascend_kv.gather_cache(src.view(torch.uint8), dst, table, t([0, 1]), kv_cache_dtype="fp8"),
         r"dst must be \[rows", ValueError),
        (lambda: ascend_kv.gather_cache(src, dst, table, t([0, 1]), kv_cache_dtype="int8"),
         r"kv_cache_dtype must be 'auto', 'fp8', 'fp8_e4m3' or 'fp8_e5m2', got 'int8'", ValueError),
        (lambda: vllm.cp_gather_cache(src, dst, table, t([0, 1]), 2), r"batch_size must be len\(cu_seq_lens\) - 1 = 1",
         ValueError),
        (lambda: vllm.gather_and_maybe_dequant_cache(src, dst, table, t([0, 1]), t([0]), 7, "auto", t(1.0)),
         r"num_tokens must be an int in \[0, 6\]", ValueError),
    ):
        raises_writing_nothing(call, dst, message, error)
    codes = torch.zeros(3, 4, 8, dtype=torch.uint8)
    raises_writing_nothing(lambda: ascend_kv.gather_cache(codes, dst, table, t([0, 1]), kv_cache_dtype="fp8"), dst,
          r"scale must be given")
    raises_writing_nothing(lambda: ascend_kv.gather_cache(codes, dst, table, t([0, 1]), kv_cache_dtype="fp8", scale=t([1.0, 2.0])),
          dst, r"scale must have one element")


def test_vllm_gather_forms_match_the_reference() -> None:
    """vLLM's own test's shapes: an MLA latent cache of 576 entries, three sequences at token starts."""
    src = (torch.randn(8, 16, 576) * 2).to(torch.float8_e4m3fn).view(torch.uint8)
    table = torch.stack([torch.randperm(8) for _ in range(3)]).int()
    starts, cu = torch.tensor([3, 17, 5], dtype=torch.int32), torch.tensor([0, 20, 30, 46], dtype=torch.int32)
    dst = torch.zeros(46, 576, dtype=torch.bfloat16)
    vllm.gather_and_maybe_dequant_cache(src, dst, table, cu, torch.zeros(46, dtype=torch.int32), 46, "fp8",
                                        torch.tensor(0.1), starts)
    assert bits_equal(dst, reference.gather_cache(src, torch.zeros_like(dst), table, cu, starts, "fp8",
                                                  torch.tensor(0.1)))
    raw = torch.zeros(46, 576, dtype=torch.uint8)
    vllm.cp_gather_cache(src, raw, table, cu, 3, starts)
    assert bits_equal(raw, reference.gather_cache(src, torch.zeros_like(raw), table, cu, starts))


# ----------------------------------------------------------------------------- reshape_and_cache (5-D), flash


@st.composite
def paged_writes(draw: st.DrawFn) -> dict[str, object]:
    heads, x = draw(st.integers(1, 3)), draw(st.sampled_from([1, 2, 8, 16]))
    head_size = x * draw(st.integers(1, 3))
    nb, bs = draw(st.integers(1, 4)), draw(st.sampled_from([1, 4, 16]))
    n = draw(st.integers(0, min(6, nb * bs)))
    slots = draw(st.lists(st.integers(0, nb * bs - 1), min_size=n, max_size=n, unique=True))
    slots = [s if draw(st.integers(0, 4)) else -1 for s in slots]
    return {"heads": heads, "x": x, "head_size": head_size, "nb": nb, "bs": bs, "slots": slots,
            "fp8": draw(st.sampled_from(["auto", "fp8", "fp8_e5m2"])), "per_head": draw(st.booleans()),
            "layers": draw(st.integers(1, 2)), "dtype": draw(st.sampled_from([torch.bfloat16, torch.float32]))}


def paged_tensors(case: dict[str, object], device: torch.device | str = "cpu") -> tuple[torch.Tensor, ...]:
    """Tokens, scales, and one buffer [layers, 2, ...] whose layer-1 K and V caches are views (vLLM's layout per layer)."""
    h, d, nb, bs = case["heads"], case["head_size"], case["nb"], case["bs"]
    n = len(case["slots"])
    cache_dtype = torch.uint8 if case["fp8"] != "auto" else case["dtype"]
    key = torch.randn(n, h, d).to(case["dtype"])
    value = torch.randn(n, h, d).to(case["dtype"])
    buffer = random_bits((case["layers"], 2, nb, h * d * bs), cache_dtype, 7)
    scales = (torch.rand(h) + 0.5) if case["per_head"] else torch.tensor(0.5)
    return tuple(t.to(device) for t in (key, value, buffer, scales, torch.tensor(case["slots"], dtype=torch.int64)))


def paged_views(buffer: torch.Tensor, case: dict[str, object]) -> tuple[torch.Tensor, torch.Tensor]:
    h, d, x, nb, bs = case["heads"], case["head_size"], case["x"], case["nb"], case["bs"]
    layer = buffer[-1]
    return layer[0].view(nb, h, d // x, bs, x), layer[1].view(nb, h, d, bs)


def paged_expected(case: dict[str, object], tensors: tuple[torch.Tensor, ...]) -> torch.Tensor:
    key, value, buffer, scales, slots = (t.cpu() for t in tensors)
    want = buffer.clone()
    reference.vllm_reshape_and_cache(key, value, *paged_views(want, case), slots, case["fp8"], scales, scales * 2)
    return want


@given(case=paged_writes())
def test_paged_attention_layout_matches_the_reference(case: dict[str, object]) -> None:
    tensors = paged_tensors(case)
    want = paged_expected(case, tensors)
    key, value, buffer, scales, slots = tensors
    vllm.reshape_and_cache(key, value, *paged_views(buffer, case), slots, case["fp8"], scales, scales * 2)
    assert bits_equal(buffer, want)


@given(case=paged_writes())
def test_paged_attention_layout_on_the_device_reads_nothing_back(case: dict[str, object]) -> None:
    tensors = paged_tensors(case, NPU)
    want = paged_expected(case, tensors)
    key, value, buffer, scales, slots = tensors
    assert transfers(lambda: vllm.reshape_and_cache(key, value, *paged_views(buffer, case), slots, case["fp8"], scales,
                                                    scales * 2)) == 0 and bits_equal(buffer.cpu(), want)


def test_paged_attention_rules_write_nothing() -> None:
    key = torch.randn(2, 2, 16)
    kc, vc = torch.zeros(3, 2, 2, 4, 8), torch.zeros(3, 2, 16, 4)
    slots, one = torch.tensor([0, 11]), torch.tensor(1.0)
    for call, message, error in (
        (lambda: vllm.reshape_and_cache(key, key, kc, vc, torch.tensor([0, 12]), "auto", one, one),
         r"slot_mapping\[1\] = 12", ValueError),
        (lambda: vllm.reshape_and_cache(key, key, kc[:, :, :1], vc, slots, "auto", one, one),
         r"key_cache must have shape \(num_blocks, 2, head_size // x, block_size, x\)", ValueError),
        (lambda: vllm.reshape_and_cache(key, key, kc, vc[..., :3], slots, "auto", one, one),
         r"value_cache must have shape \(3, 2, 16, 4\)", ValueError),
        (lambda: vllm.reshape_and_cache(key, key[..., :8], kc, vc, slots, "auto", one, one),
         r"value must have key's shape", ValueError),
        (lambda: vllm.reshape_and_cache(key, key, kc, vc.half(), slots, "auto", one, one), r"dtype", TypeError),
        (lambda: vllm.reshape_and_cache(key, key, kc.transpose(1, 2), vc, slots, "auto", one, one),
         r"key_cache must", ValueError),
        (lambda: vllm.reshape_and_cache(key, key, kc, vc, slots, "fp8", one, one),
         r"key_cache must have dtype torch.uint8 or torch.float8_e4m3fn", TypeError),
    ):
        raises_writing_nothing(call, kc, message, error)
        assert not vc.any()
    vllm.reshape_and_cache(key, key, kc, vc, torch.tensor([0, 11]), "auto", one, one)  # the last slot
    assert bits_equal(vc[2, :, :, 3], key[1])


def test_flash_fp8_uint8_caches_pass_opcheck_in_inference_mode() -> None:
    """The issue's failure: AOT dispatch inside inference_mode rebuilt a Python fp8 view as uint8."""
    key = torch.randn(5, 2, 16, dtype=torch.bfloat16)
    caches = torch.zeros(4, 8, 2, 16, dtype=torch.uint8), torch.zeros(4, 8, 2, 16, dtype=torch.uint8)
    with torch.inference_mode():
        torch.library.opcheck(OPS.vllm_reshape_and_cache_flash.default,
                              (key, key, *caches, torch.tensor([3, -1, 20, 31, 0]), "fp8", torch.tensor(0.5),
                               torch.tensor([0.5, 0.25])))
    want = [torch.zeros_like(c) for c in caches]
    vllm.reshape_and_cache_flash(key, key, *caches, torch.tensor([3, -1]), "fp8", torch.tensor(0.5), torch.tensor(0.5))
    ascend_kv.reshape_and_cache(key, key, want[0].view(torch.float8_e4m3fn), want[1].view(torch.float8_e4m3fn),
                                torch.tensor([3, -1]), k_scale=torch.tensor(0.5), v_scale=torch.tensor(0.5))
    assert bits_equal(caches[0], want[0]) and bits_equal(caches[1], want[1])


# ----------------------------------------------------------------------------- convert_fp8


@pytest.mark.parametrize("kv_dtype", ["fp8", "fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("device", ["cpu", NPU])
def test_convert_fp8_both_ways_match_the_reference(kv_dtype: str, dtype: torch.dtype, device: torch.device | str) -> None:
    x = (torch.randn(3, 4, 5) * 300).to(dtype)
    x[0, 0, 0] = float("nan")
    codes, want = torch.zeros(3, 4, 5, dtype=torch.uint8), torch.zeros(3, 4, 5, dtype=torch.uint8)
    reference.convert_fp8(want, x, 0.5, kv_dtype)
    got = codes.to(device)
    vllm.convert_fp8(got, x.to(device), 0.5, kv_dtype)
    assert bits_equal(got.cpu(), want)
    back, back_want = torch.zeros_like(x).to(device), torch.zeros_like(x)
    reference.convert_fp8(back_want, want, 0.5, kv_dtype)
    vllm.convert_fp8(back, got, 0.5, kv_dtype)
    assert bits_equal(back.cpu(), back_want)


def test_convert_fp8_rules_write_nothing() -> None:
    x, codes = torch.randn(2, 3), torch.zeros(2, 3, dtype=torch.uint8)
    for call, message, error in (
        (lambda: vllm.convert_fp8(codes, x, 0.0), r"scale must be a positive finite number, got 0", ValueError),
        (lambda: vllm.convert_fp8(codes, x, float("inf")), r"scale must be a positive finite number", ValueError),
        (lambda: vllm.convert_fp8(codes, x, 1.0, "auto"), r"kv_cache_dtype must be 'fp8', 'fp8_e4m3' or 'fp8_e5m2'",
         ValueError),
        (lambda: vllm.convert_fp8(codes[:, :2], x, 1.0), r"dst_cache must have src_cache's shape \(2, 3\)", ValueError),
        (lambda: vllm.convert_fp8(codes.short(), x, 1.0), r"dst_cache must have dtype torch.uint8", TypeError),
    ):
        raises_writing_nothing(call, codes, message, error)
    vllm.convert_fp8(codes, x, 1e-30)  # the smallest scales saturate, not fail
    assert bits_equal(codes.view(torch.float8_e4m3fn).abs().float().max().reshape(1), torch.tensor([448.0]))


# ----------------------------------------------------------------------------- graphs and opcheck


def test_compiled_calls_equal_eager() -> None:
    def step(key: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, fc: torch.Tensor, src: torch.Tensor,
             dst: torch.Tensor, codes: torch.Tensor) -> None:
        vllm.reshape_and_cache(key, key, kc, vc, torch.tensor([1, 6]), "fp8", torch.tensor(0.5), torch.tensor(0.5))
        vllm.reshape_and_cache_flash(key, key, fc, fc.clone(), torch.tensor([1, 6]), "fp8", torch.tensor(0.5),
                                     torch.tensor(0.5))
        vllm.convert_fp8(codes, src, 0.5)
        vllm.gather_and_maybe_dequant_cache(codes, dst, torch.tensor([[1, 0]]), torch.tensor([0, 3]),
                                            torch.zeros(3), 3, "fp8", torch.tensor(0.5), torch.tensor([2]))

    results = []
    for compiled in (False, True):
        tensors = (torch.ones(2, 2, 16), torch.zeros(2, 2, 2, 4, 8, dtype=torch.uint8),
                   torch.zeros(2, 2, 16, 4, dtype=torch.uint8), torch.zeros(2, 4, 2, 16, dtype=torch.uint8),
                   torch.arange(64.0).reshape(2, 4, 8) / 7 - 4, torch.zeros(4, 8),
                   torch.zeros(2, 4, 8, dtype=torch.uint8))
        torch._dynamo.reset()
        (torch.compile(step, fullgraph=True) if compiled else step)(*tensors)
        results.append(tensors)
    assert all(bits_equal(a, b) for a, b in zip(*results)) and results[1][1].any() and results[1][5].any()


def test_every_operator_passes_opcheck() -> None:
    key = torch.randn(3, 2, 16, dtype=torch.bfloat16)
    slots = torch.tensor([3, -1, 20])
    torch.library.opcheck(OPS.vllm_reshape_and_cache.default,
                          (key, key, torch.zeros(4, 2, 2, 8, 8, dtype=torch.uint8),
                           torch.zeros(4, 2, 16, 8, dtype=torch.uint8), slots, "fp8", torch.tensor([0.5, 0.25]),
                           torch.tensor(0.5)))
    torch.library.opcheck(OPS.vllm_reshape_and_cache_flash.default,
                          (key, key, torch.zeros(4, 8, 2, 16, dtype=torch.bfloat16),
                           torch.zeros(4, 8, 2, 16, dtype=torch.bfloat16), slots, "auto", torch.tensor(1.0),
                           torch.tensor(1.0)))
    src = torch.randn(4, 8, 24)
    codes = torch.zeros(4, 8, 24, dtype=torch.uint8)
    torch.library.opcheck(OPS.convert_fp8.default, (codes, src, 0.5, "fp8"))
    table, cu, starts = torch.tensor([[1, 3], [2, 0]]), torch.tensor([0, 5, 9]), torch.tensor([7, 1])
    torch.library.opcheck(OPS.gather_cache.default, (src, torch.zeros(9, 24), table, cu, starts))
    torch.library.opcheck(OPS.gather_cache.default,
                          (codes, torch.zeros(9, 24, dtype=torch.bfloat16), table, cu, None, "fp8_e5m2",
                           torch.tensor(2.0)))


# ----------------------------------------------------------------------------- MLA


@st.composite
def mla_writes(draw: st.DrawFn) -> dict[str, object]:
    form = draw(st.sampled_from(["auto", "fp8", "fp8_e5m2", "fp8_ds_mla"]))
    ds = form == "fp8_ds_mla"
    rank, pe = (512, draw(st.sampled_from([64, 0]))) if ds else (draw(st.sampled_from([16, 64])),
                                                                 draw(st.sampled_from([0, 8])))
    nb, bs = draw(st.integers(1, 3)), draw(st.sampled_from([1, 4]))
    n = draw(st.integers(0, min(5, nb * bs)))
    slots = draw(st.lists(st.integers(0, nb * bs - 1), min_size=n, max_size=n, unique=True))
    return {"form": form, "rank": rank, "pe": pe, "nb": nb, "bs": bs,
            "slots": [s if draw(st.integers(0, 3)) else -1 for s in slots], "extra": draw(st.integers(0, 2)),
            "entry": (656 if pe or draw(st.booleans()) else 528) if ds else rank + pe,
            "dtype": torch.bfloat16 if ds else draw(st.sampled_from([torch.bfloat16, torch.float32]))}


def mla_tensors(case: dict[str, object], device: torch.device | str = "cpu") -> tuple[torch.Tensor, ...]:
    """kv_c and k_pe with padding tokens past the slots, and a cache that is layer 1 of a 2-layer buffer."""
    t = len(case["slots"]) + case["extra"]
    kv_c = (torch.randn(t, case["rank"]) * 3).to(case["dtype"])
    kv_c[:, :3] = torch.tensor([0.0, 1e-9, -500.0])  # a zero, a tiny and a large value in the first tile
    k_pe = torch.randn(t, case["pe"]).to(case["dtype"])
    cache_dtype = case["dtype"] if case["form"] == "auto" else torch.uint8
    buffer = random_bits((2, case["nb"], case["bs"], case["entry"]), cache_dtype, 8)
    return tuple(x.to(device) for x in (kv_c, k_pe, buffer, torch.tensor(case["slots"], dtype=torch.int64),
                                        torch.tensor(0.5)))


@given(case=mla_writes())
def test_concat_and_cache_mla_matches_the_reference(case: dict[str, object]) -> None:
    for device in ("cpu", NPU):
        kv_c, k_pe, buffer, slots, scale = mla_tensors(case, device)
        want = buffer.cpu().clone()
        reference.concat_and_cache_mla(kv_c.cpu(), k_pe.cpu(), want[1], slots.cpu(), case["form"], scale.cpu())
        write = functools.partial(vllm.concat_and_cache_mla, kv_c, k_pe, buffer[1], slots, case["form"], scale)
        assert transfers(write) == 0
        assert bits_equal(buffer.cpu(), want), device


def test_concat_and_cache_mla_rules_write_nothing() -> None:
    kv_c, k_pe = torch.randn(3, 512, dtype=torch.bfloat16), torch.randn(3, 64, dtype=torch.bfloat16)
    cache = torch.zeros(2, 4, 656, dtype=torch.uint8)
    one = torch.tensor(1.0)
    for call, message, error in (
        (lambda: vllm.concat_and_cache_mla(kv_c, k_pe, cache, torch.tensor([7, 8]), "fp8_ds_mla", one),
         r"slot_mapping\[1\] = 8", ValueError),
        (lambda: vllm.concat_and_cache_mla(kv_c[:, :256], k_pe, cache, torch.tensor([0]), "fp8_ds_mla", one),
         r"kv_c must have kv_lora_rank = 512", ValueError),
        (lambda: vllm.concat_and_cache_mla(kv_c, k_pe[:, :32], cache, torch.tensor([0]), "fp8_ds_mla", one),
         r"k_pe must have pe_dim = 64 or 0", ValueError),
        (lambda: vllm.concat_and_cache_mla(kv_c, k_pe, cache[..., :528], torch.tensor([0]), "fp8_ds_mla", one),
         r"kv_cache must have 656-byte rows \(or 528 with pe_dim = 0\)", ValueError),
        (lambda: vllm.concat_and_cache_mla(kv_c.float(), k_pe.float(), cache, torch.tensor([0]), "fp8_ds_mla", one),
         r"kv_c must have dtype", TypeError),
        (lambda: vllm.concat_and_cache_mla(kv_c, k_pe, cache, torch.tensor([0, 1, 2, 3]), "fp8_ds_mla", one),
         r"slot_mapping must have at most kv_c's 3 tokens, got 4", ValueError),
        (lambda: vllm.concat_and_cache_mla(kv_c, k_pe, cache, torch.tensor([0]), "fp8", one),
         r"kv_cache must have rows of kv_lora_rank \+ pe_dim = 576 elements", ValueError),
        (lambda: vllm.concat_and_cache_mla(kv_c, k_pe[:2], cache, torch.tensor([0]), "auto", one),
         r"k_pe must have kv_c's 3 tokens", ValueError),
    ):
        raises_writing_nothing(call, cache, message, error)
    vllm.concat_and_cache_mla(kv_c, k_pe, cache, torch.tensor([7]), "fp8_ds_mla", one)  # the last slot
    assert cache[1, 3].any()


def test_concat_mla_q_and_its_rules() -> None:
    nope, pe = torch.randn(3, 2, 16, dtype=torch.bfloat16), torch.randn(3, 2, 4, dtype=torch.bfloat16)
    out = torch.zeros(3, 2, 20, dtype=torch.bfloat16)
    for device in ("cpu", NPU):
        got = out.to(device)
        vllm.concat_mla_q(nope.to(device), pe.to(device), got)
        assert bits_equal(got.cpu(), torch.cat([nope, pe], -1))
    for call, message, error in (
        (lambda: vllm.concat_mla_q(nope, pe, out[..., :19]), r"q_out must have shape \(3, 2, 20\)", ValueError),
        (lambda: vllm.concat_mla_q(nope, pe[:2], out), r"q_pe must have ql_nope's tokens and heads \(3, 2\)",
         ValueError),
        (lambda: vllm.concat_mla_q(nope, pe.float(), out), r"q_pe", TypeError),
    ):
        raises_writing_nothing(call, out, message, error)
    torch.library.opcheck(OPS.concat_mla_q.default, (nope, pe, out))


def test_mla_operators_pass_opcheck_and_compile_equal_eager() -> None:
    kv_c, k_pe = torch.randn(3, 512, dtype=torch.bfloat16), torch.randn(3, 64, dtype=torch.bfloat16)
    for form, entry in (("fp8_ds_mla", 656), ("fp8", 576), ("auto", 576)):
        cache = torch.zeros(2, 4, entry, dtype=torch.bfloat16 if form == "auto" else torch.uint8)
        torch.library.opcheck(OPS.vllm_concat_and_cache_mla.default,
                              (kv_c, k_pe, cache, torch.tensor([5, -1, 0]), form, torch.tensor(0.5)))
    results = []
    for compiled in (False, True):
        cache = torch.zeros(2, 4, 656, dtype=torch.uint8)

        def step(c: torch.Tensor) -> None:
            vllm.concat_and_cache_mla(kv_c, k_pe, c, torch.tensor([5, -1, 0]), "fp8_ds_mla", torch.tensor(1.0))

        torch._dynamo.reset()
        (torch.compile(step, fullgraph=True) if compiled else step)(cache)
        results.append(cache)
    assert bits_equal(results[0], results[1]) and results[1].any()


# ----------------------------------------------------------------------------- DeepSeek-V3.2's indexer cache


@pytest.mark.parametrize("scale_fmt", ["ue8m0", "mxfp8", "fp32"])
@pytest.mark.parametrize("device", ["cpu", NPU])
def test_indexer_cache_write_and_gather_match_the_reference(scale_fmt: str, device: torch.device | str) -> None:
    head_dim = 128 if scale_fmt == "mxfp8" else 256
    nb, bs = 3, 4
    k = (torch.randn(7, head_dim) * 5).to(torch.bfloat16)
    k[0, 0] = float("nan")
    slots = torch.tensor([5, -1, 0, 11, 3, 7])
    cache = random_bits((nb, bs, head_dim + head_dim // 32), torch.uint8, 9)
    want = cache.clone()
    reference.indexer_k_quant_and_cache(k, want, slots, scale_fmt)
    got = cache.to(device)
    assert transfers(lambda: vllm.indexer_k_quant_and_cache(k.to(device), got, slots.to(device), 128, scale_fmt)) == 0
    assert bits_equal(got.cpu(), want)
    table, cu = torch.tensor([[1, 0, 2], [2, 1, 0]], dtype=torch.int32), torch.tensor([0, 9, 12], dtype=torch.int32)
    dst_k = torch.zeros(13, head_dim, dtype=torch.float8_e4m3fn)
    dst_scale = random_bits((13, head_dim // 32), torch.uint8, 10)
    want_k, want_scale = dst_k.clone(), dst_scale.clone()
    reference.cp_gather_indexer_k_quant_cache(want, want_k, want_scale, table, cu)
    got_k, got_scale = dst_k.to(device), dst_scale.to(device)
    assert transfers(lambda: vllm.cp_gather_indexer_k_quant_cache(got, got_k, got_scale, table.to(device),
                                                                   cu.to(device))) == 0
    assert bits_equal(got_k.cpu().view(torch.uint8), want_k.view(torch.uint8)) and bits_equal(got_scale.cpu(), want_scale)


def test_indexer_rules_write_nothing() -> None:
    k = torch.randn(2, 128, dtype=torch.bfloat16)
    cache = torch.zeros(2, 4, 132, dtype=torch.uint8)
    dst_k, dst_scale = torch.zeros(4, 128, dtype=torch.float8_e4m3fn), torch.zeros(4, 4, dtype=torch.uint8)
    for call, message, error in (
        (lambda: vllm.indexer_k_quant_and_cache(k, cache, torch.tensor([7, 8]), 128, "ue8m0"), r"slot_mapping\[1\] = 8",
         ValueError),
        (lambda: vllm.indexer_k_quant_and_cache(k, cache, torch.tensor([0]), 64, "ue8m0"),
         r"quant_block_size must be 128", ValueError),
        (lambda: vllm.indexer_k_quant_and_cache(k, cache[..., :131], torch.tensor([0]), 128, "ue8m0"),
         r"kv_cache must have shape \(num_blocks, block_size, 132\)", ValueError),
        (lambda: vllm.indexer_k_quant_and_cache(k, cache.float(), torch.tensor([0]), 128, "ue8m0"),
         r"kv_cache must have dtype uint8, got float32", TypeError),
        (lambda: vllm.indexer_k_quant_and_cache(k, cache, torch.tensor([0, 1, 2]), 128, "ue8m0"),
         r"slot_mapping must have at most k's 2 tokens, got 3", ValueError),
    ):
        raises_writing_nothing(call, cache, message, error)
    padded_rows = torch.zeros(2, 4, 264, dtype=torch.uint8)[..., :132]  # a block's rows 264 bytes apart
    raises_writing_nothing(lambda: vllm.indexer_k_quant_and_cache(k, padded_rows, torch.tensor([0]), 128, "ue8m0"),
          padded_rows, r"kv_cache must hold each block's bytes contiguously", ValueError)
    vllm.indexer_k_quant_and_cache(k, cache, torch.tensor([7, -1]), 128, "ue8m0")  # the last slot
    for call, message in (
        (lambda: vllm.cp_gather_indexer_k_quant_cache(cache, dst_k, dst_scale[:, :3], torch.tensor([[0, 1]]),
                                                      torch.tensor([0, 4])), r"dst_scale must have shape \(4, 4\)"),
        (lambda: vllm.cp_gather_indexer_k_quant_cache(cache, dst_k, dst_scale, torch.tensor([[0, 1]]),
                                                      torch.tensor([0, 5])), r"cu_seq_lens\[1\] = 5 is past dst's 4 rows"),
        (lambda: vllm.cp_gather_indexer_k_quant_cache(cache, dst_k, dst_scale, torch.tensor([[0, 2]]),
                                                      torch.tensor([0, 5])), r"cu_seq_lens\[1\] = 5 is past"),
    ):
        raises_writing_nothing(call, dst_scale, message)
        assert not dst_k.view(torch.uint8).any()
    vllm.cp_gather_indexer_k_quant_cache(cache, dst_k, dst_scale, torch.tensor([[0, 1]]), torch.tensor([0, 4]))
    assert bits_equal(dst_scale, cache.reshape(2, -1)[0, 512:528].reshape(4, 4))


def test_indexer_operators_pass_opcheck() -> None:
    k = torch.randn(3, 128, dtype=torch.bfloat16)
    cache = torch.zeros(2, 4, 132, dtype=torch.uint8)
    torch.library.opcheck(OPS.vllm_indexer_k_quant_and_cache.default, (k, cache, torch.tensor([5, -1, 0]), 128, "ue8m0"))
    torch.library.opcheck(OPS.vllm_cp_gather_indexer_k_quant_cache.default,
                          (cache, torch.zeros(5, 128, dtype=torch.uint8), torch.zeros(5, 4, dtype=torch.uint8),
                           torch.tensor([[1, 0], [0, 1]], dtype=torch.int32), torch.tensor([0, 3, 5], dtype=torch.int32)))
