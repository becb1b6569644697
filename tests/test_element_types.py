"""Every 1-, 2- or 4-byte element type on every backend, through the public functions, bit for bit.

The operations move bytes, so beyond ATB's float16/bfloat16/int8 they take fp32 (CPU models),
fp8 (KV quantisation), uint8, int16 and int32, with K and V of different types; NZ's E is
``32 // itemsize`` (8 for fp32, 32 for fp8 and int8). Each case runs on the fallback and the
kernels' host build (sim), and on the fake NPU (kernels on an A2 part, the device fallback on a
310P part) with index tensors on the device, and is compared with :mod:`ascend_kv.tools.reference`
on the raw bits (NaN payloads included: every dtype's random bits hold some).
"""

from __future__ import annotations

import pytest
import torch
from cases import ND, NZ, Case, bits_equal, kv_cache_case, paged_case, reshape_and_cache_case
from test_npu_path import NPU, kernel_library, soc, to  # noqa: F401  (fixtures: the kernels' host build, the SoC)

import ascend_kv
from ascend_kv.tools import reference

F8, F8E5 = torch.float8_e4m3fn, torch.float8_e5m2

#: ``(operation, case)`` for each element type beyond ATB's, and the int8-in-NZ ones.
CASES: list[tuple[str, Case]] = []
for _dtype in (torch.float32, F8, F8E5, torch.uint8, torch.int16, torch.int32):
    _e = 32 // _dtype.itemsize
    CASES += [
        ("kv_cache", kv_cache_case(_dtype, [2, 0, 3], [5, 0, 16], hidden=2 * _e)),
        ("paged_cache_load", paged_case(ND, [20, 3], key_dtype=_dtype, head_size_k=_e, head_size_v=2 * _e,
                                        seq_starts=[16, 0], give_outputs=True)),
        ("paged_cache_load", paged_case(NZ, [20, 3], key_dtype=_dtype, head_size_k=_e, head_size_v=_e)),
        ("reshape_and_cache", reshape_and_cache_case("nd", [5, -1, 17, 63], key_dtype=_dtype, head_size_k=3)),
        ("reshape_and_cache", reshape_and_cache_case("nz", [5, -1, 17, 63], key_dtype=_dtype, head_size_k=_e,
                                                     head_size_v=_e)),
    ]
CASES += [  # int8 in NZ: C8's int8 K and V, int8 keys with bfloat16 values, fp32 keys with fp8 values
    ("paged_cache_load", paged_case(NZ, [33, 1], key_dtype=torch.int8, head_size_k=32, head_size_v=32)),
    ("paged_cache_load", paged_case(NZ, [17], key_dtype=torch.int8, value_dtype=torch.bfloat16, head_size_k=32,
                                    head_size_v=16, give_outputs=True)),
    ("reshape_and_cache", reshape_and_cache_case("nz", [0, 31, -1], key_dtype=torch.int8, head_size_k=32,
                                                 head_size_v=32)),
    ("reshape_and_cache", reshape_and_cache_case("nz", [3, 60], key_dtype=torch.float32, value_dtype=F8,
                                                 head_size_k=8, head_size_v=32)),
    ("reshape_and_cache", reshape_and_cache_case("nd", [3, 60], key_dtype=F8, value_dtype=torch.float32)),
]


def case_id(item: tuple[str, Case]) -> str:
    op, case = item
    layout = case.kwargs.get("kv_cache_cfg", "")
    dtypes = "-".join(str(t.dtype).removeprefix("torch.") for t in case.tensors() if t.is_floating_point()
                      or t.dtype in (torch.int8, torch.uint8, torch.int16))
    return f"{op}-{getattr(layout, 'name', layout)}-{dtypes or 'int32'}"


def run(op: str, case: Case) -> list[torch.Tensor]:
    """The tensors the call writes (or returns), after the call."""
    result = getattr(ascend_kv, op)(*case.args, **case.kwargs)
    if op == "kv_cache":
        return [result]
    return [t for t in result if t is not None]


def expected(op: str, case: Case) -> list[torch.Tensor]:
    host = case.cloned()
    host = Case(tuple(a.cpu() if isinstance(a, torch.Tensor) else a for a in host.args),
                {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in host.kwargs.items()})
    result = getattr(reference, op)(*host.args, **host.kwargs)
    if op == "kv_cache":
        return [result]
    return [t for t in result if t is not None]


@pytest.mark.parametrize(("op", "case"), CASES, ids=[case_id(c) for c in CASES])
def test_on_the_host_backends(backend: str, op: str, case: Case) -> None:
    want = expected(op, case)
    got = run(op, case.cloned())
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert bits_equal(g, w)


@pytest.mark.parametrize(("op", "case"), CASES, ids=[case_id(c) for c in CASES])
def test_on_the_fake_npu(soc: str, op: str, case: Case) -> None:  # noqa: F811
    want = expected(op, case)
    got = run(op, to(case.cloned(), NPU, NPU))
    for g, w in zip(got, want):
        assert bits_equal(g.cpu(), w)


def test_the_types_atb_lacks_and_the_ones_refused() -> None:
    from ascend_kv.operators.library import atb_cache_dtypes, cache_dtypes

    ATB_CACHE_DTYPES, CACHE_DTYPES = atb_cache_dtypes(), cache_dtypes()
    assert set(ATB_CACHE_DTYPES) < set(CACHE_DTYPES)
    assert all(d.itemsize in (1, 2, 4) and not d.is_complex and d != torch.bool for d in CACHE_DTYPES)


def test_explain_and_info_say_where_the_types_go_beyond_huawei() -> None:
    from ascend_kv.tools.cli import info_report

    note = ascend_kv.explain("reshape_and_cache", "cpu").element_types
    assert "float8_e4m3fn" in note and "Huawei's ATB documents float16, bfloat16, int8" in note
    report = info_report()
    assert report["element_types"] == note
    assert report["torch_npu_facade"]["module"] == "ascend_kv.compat.torch_npu"
    assert "atb.npu_paged_cache_load" in report["torch_npu_facade"]["functions"]
