"""The element-type rule (SEMANTICS.md, "Element types"), true to its text, through the public functions.

Every operation only moves bytes, so each takes every 1-, 2- or 4-byte type serving code stores in
a cache: float16, bfloat16, int8 (ATB's list), uint8, int16, uint16, int32, uint32, float32 and
every float8 type torch has (float8_e4m3fn, float8_e5m2, float8_e4m3fnuz, float8_e5m2fnuz,
float8_e8m0fnu), with K and V of different types; NZ's E is ``32 // itemsize``. Each type runs
every operation (kv_cache, paged_cache_load ND and NZ, reshape_and_cache ND and NZ, block_copy,
copy_blocks, swap_blocks) on the fallback and the kernels' host build (sim), and on the fake NPU
(kernels on an A2 part, the device fallback on a 310P part) with index tensors on the device,
compared with :mod:`ascend_kv.tools.reference` on the raw bits (NaN payloads included).

Bool, complex, 8-byte and sub-byte or packed types (whatever this torch has: float4_e2m1fn_x2,
uint1..uint7, int1..int7, the bits types), and quantized ones, are a ``TypeError`` naming the
argument, with nothing written.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from cases import ND, NZ, Case, bits_equal, kv_cache_case, paged_case, random_bits, reshape_and_cache_case
from test_npu_path import NPU, kernel_library, soc  # noqa: F401  (fixtures: the kernels' host build, the SoC)

import ascend_kv
from ascend_kv.operators.library import atb_cache_dtypes, cache_dtypes
from ascend_kv.tools import reference

F8, F8E5 = torch.float8_e4m3fn, torch.float8_e5m2
#: The element types SEMANTICS.md lists, in its order.
SEMANTICS_TYPES = (torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16, torch.uint16, torch.int32,
                   torch.uint32, torch.float32, torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz,
                   torch.float8_e5m2fnuz, torch.float8_e8m0fnu)


def block_cases(dtype: torch.dtype) -> list[tuple[str, Case]]:
    """block_copy (key of ``dtype``, value of another type), copy_blocks over two layers, swap_blocks."""
    other = torch.int8 if dtype.itemsize != 1 else torch.float32
    key, value = random_bits((6, 16, 2, 16), dtype, 1), random_bits((6, 4, 2, 8), other, 2)
    index = torch.tensor([0, 4]), torch.tensor([1, 2, 3]), torch.tensor([2, 3])
    layers = [random_bits((6, 3, 32 // dtype.itemsize), dtype, 3 + i) for i in range(4)]
    return [
        ("block_copy", Case((key, value, *index))),
        ("copy_blocks", Case((layers[:2], layers[2:], torch.tensor([[0, 5], [1, 3]])))),
        ("swap_blocks", Case((random_bits((6, 16, 2, 16), dtype, 7), random_bits((3, 16, 2, 16), dtype, 8),
                              torch.tensor([[5, 0], [1, 2]])))),
    ]


#: ``(operation, case)``: every operation on each element type, and the int8-in-NZ and mixed pairs.
CASES: list[tuple[str, Case]] = []
for _dtype in SEMANTICS_TYPES:
    _e = 32 // _dtype.itemsize
    CASES += [
        ("kv_cache", kv_cache_case(_dtype, [2, 0, 3], [5, 0, 16], hidden=2 * _e)),
        ("paged_cache_load", paged_case(ND, [20, 3], key_dtype=_dtype, head_size_k=_e, head_size_v=2 * _e,
                                        seq_starts=[16, 0], give_outputs=True)),
        ("paged_cache_load", paged_case(NZ, [20, 3], key_dtype=_dtype, head_size_k=_e, head_size_v=_e)),
        ("reshape_and_cache", reshape_and_cache_case("nd", [5, -1, 17, 63], key_dtype=_dtype, head_size_k=3)),
        ("reshape_and_cache", reshape_and_cache_case("nz", [5, -1, 17, 63], key_dtype=_dtype, head_size_k=_e,
                                                     head_size_v=_e)),
        *block_cases(_dtype),
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
    ("reshape_and_cache", reshape_and_cache_case("nd", [3, 60, 8], key_dtype=torch.uint16,
                                                 value_dtype=torch.float8_e8m0fnu)),
    ("paged_cache_load", paged_case(ND, [7, 20], key_dtype=torch.uint32, value_dtype=torch.float8_e5m2fnuz)),
]


def tensors_of(values: Any) -> list[torch.Tensor]:
    """The tensors among ``values``, lists flattened."""
    found: list[torch.Tensor] = []
    for v in values:
        if isinstance(v, torch.Tensor):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            found += tensors_of(v)
    return found


def case_id(item: tuple[str, Case]) -> str:
    op, case = item
    layout = case.kwargs.get("kv_cache_cfg", "")
    dtypes = "-".join(dict.fromkeys(str(t.dtype).removeprefix("torch.") for t in tensors_of(case.args)
                                    if t.dtype not in (torch.int64,) and t.dim() > 1))
    return f"{op}-{getattr(layout, 'name', layout)}-{dtypes}"


def written(op: str, case: Case, result: Any) -> list[torch.Tensor]:
    """The tensors a call writes (or returns)."""
    if op == "kv_cache":
        return [result]
    if op in ("paged_cache_load", "reshape_and_cache"):
        return [t for t in result if t is not None]
    if op == "block_copy":
        return [t for t in case.args[:2] if t is not None]
    if op == "copy_blocks":
        return [*case.args[0], *case.args[1]]
    return [case.args[1]]  # swap_blocks: dst


def run(op: str, case: Case) -> list[torch.Tensor]:
    """The tensors the call writes (or returns), after the call."""
    return written(op, case, getattr(ascend_kv, op)(*case.args, **case.kwargs))


def on_host(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, list):
        return [on_host(v) for v in value]
    return value


def on_npu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(NPU)
    if isinstance(value, list):
        return [on_npu(v) for v in value]
    return value


def expected(op: str, case: Case) -> list[torch.Tensor]:
    host = case.cloned()
    host = Case(tuple(on_host(a) for a in host.args), {k: on_host(v) for k, v in host.kwargs.items()})
    host.args = tuple([t.clone() for t in a] if isinstance(a, list) else a for a in host.args)
    return written(op, host, getattr(reference, op)(*host.args, **host.kwargs))


def cloned(case: Case) -> Case:
    """A deep copy, lists of tensors included."""
    def c(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return x.clone()
        return [t.clone() for t in x] if isinstance(x, list) else x
    return Case(tuple(c(a) for a in case.args), {k: c(v) for k, v in case.kwargs.items()})


def test_the_table_is_the_semantics_list() -> None:
    """The C++ dtype table is exactly SEMANTICS.md's list, ATB's three among them."""
    assert cache_dtypes() == SEMANTICS_TYPES
    assert atb_cache_dtypes() == (torch.float16, torch.bfloat16, torch.int8)
    assert all(d.itemsize in (1, 2, 4) and not d.is_complex and d != torch.bool for d in cache_dtypes())


@pytest.mark.parametrize(("op", "case"), CASES, ids=[case_id(c) for c in CASES])
def test_on_the_host_backends(backend: str, op: str, case: Case) -> None:
    want = expected(op, case)
    got = run(op, cloned(case))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert bits_equal(g, w)


@pytest.mark.parametrize(("op", "case"), CASES, ids=[case_id(c) for c in CASES])
def test_on_the_fake_npu(soc: str, op: str, case: Case) -> None:  # noqa: F811
    want = expected(op, case)
    moved = cloned(case)
    moved = Case(tuple(on_npu(a) for a in moved.args), {k: on_npu(v) for k, v in moved.kwargs.items()})
    if op == "swap_blocks":  # vLLM keeps the mapping on the host
        moved.args = (*moved.args[:2], case.args[2])
    got = run(op, moved)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert bits_equal(g.cpu(), w)


# ----------------------------------------------------------------------------- the types refused

#: Every dtype this torch has that no operation takes: bool, complex, 8-byte, sub-byte and packed,
#: quantized.
REFUSED = sorted({d for d in (getattr(torch, n) for n in dir(torch)) if isinstance(d, torch.dtype)}
                 - set(SEMANTICS_TYPES), key=str)


QUANTIZED = {torch.qint8, torch.quint8, torch.qint32, torch.quint4x2, torch.quint2x4}


def refused_tensor(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Zeros of ``dtype`` in ``shape`` (a view of bytes where torch makes no zeros of that type)."""
    if dtype.is_complex or dtype in (torch.bool, torch.float64, torch.int64, torch.uint64):
        return torch.zeros(shape, dtype=dtype)
    if dtype in QUANTIZED:
        return torch.empty(shape, dtype=dtype)
    return torch.zeros((*shape[:-1], shape[-1] * dtype.itemsize), dtype=torch.uint8).view(dtype)


def raw(t: torch.Tensor) -> torch.Tensor:
    """``t``'s bytes, for any dtype (quantized: its integer representation)."""
    if t.is_quantized:
        return t.int_repr().view(torch.uint8).clone()
    return t.detach().contiguous().view(torch.uint8).clone()


def calls_with(dtype: torch.dtype) -> list[tuple[str, Case, str]]:
    """``(operation, call, argument)``: each operation with one of its element-typed arguments of ``dtype``."""
    h = torch.float16
    found = []
    kv = kv_cache_case(h, [2, 1], [3, 5], hidden=16)
    for name, i in (("past", 2), ("new_kv", 0)):
        args = list(kv.args)
        args[i] = refused_tensor(tuple(args[i].shape), dtype)
        found.append(("kv_cache", Case(tuple(args)), name))
    load = paged_case(ND, [20, 3], give_outputs=True)
    for name, i in (("key_cache", 0), ("value_cache", 1)):
        args = list(load.args)
        args[i] = refused_tensor(tuple(args[i].shape), dtype)
        found.append(("paged_cache_load", Case(tuple(args), dict(load.kwargs)), name))
    for name in ("key", "value"):
        kwargs = dict(load.kwargs, **{name: refused_tensor(tuple(load.kwargs[name].shape), dtype)})
        found.append(("paged_cache_load", Case(load.args, kwargs), name))
    write = reshape_and_cache_case("nd", [5, -1, 17])
    for name, i in (("key", 0), ("value", 1), ("key_cache", 2), ("value_cache", 3)):
        args = list(write.args)
        args[i] = refused_tensor(tuple(args[i].shape), dtype)
        found.append(("reshape_and_cache", Case(tuple(args), dict(write.kwargs)), name))
    cache = random_bits((4, 16, 2, 16), h, 1)
    index = torch.tensor([0]), torch.tensor([1]), torch.tensor([1])
    found.append(("block_copy", Case((refused_tensor((4, 16, 2, 16), dtype), cache, *index)), "key_cache"))
    found.append(("block_copy", Case((cache, refused_tensor((4, 16, 2, 16), dtype), *index)), "value_cache"))
    layers = [random_bits((4, 16, 2, 16), h, 2 + i) for i in range(3)]
    mapping = torch.tensor([[0, 1]])
    found.append(("copy_blocks", Case(([layers[0], refused_tensor((4, 16, 2, 16), dtype)], layers[1:], mapping)),
                  "key_caches[1]"))
    found.append(("copy_blocks", Case(([layers[0]], [refused_tensor((4, 16, 2, 16), dtype)], mapping)),
                  "value_caches[0]"))
    found.append(("swap_blocks", Case((refused_tensor((4, 16, 2, 16), dtype), cache, mapping)), "src"))
    found.append(("swap_blocks", Case((cache, refused_tensor((4, 16, 2, 16), dtype), mapping)), "dst"))
    return found


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
@pytest.mark.filterwarnings("ignore:.*quantized tensor creation functions.*:UserWarning")
@pytest.mark.parametrize("dtype", REFUSED, ids=[str(d).removeprefix("torch.") for d in REFUSED])
def test_every_other_type_is_a_type_error_naming_the_argument(dtype: torch.dtype) -> None:
    assert {torch.bool, torch.complex32, torch.complex64, torch.float64, torch.int64, torch.uint64} <= set(REFUSED)
    name_of = str(dtype).removeprefix("torch.")
    for op, case, argument in calls_with(dtype):
        tensors = tensors_of([*case.args, *case.kwargs.values()])
        before = [raw(t) for t in tensors]
        with pytest.raises(TypeError) as error:
            getattr(ascend_kv, op)(*case.args, **case.kwargs)
        message = str(error.value)
        assert message.startswith(argument), (op, argument, message)
        if dtype in QUANTIZED:
            assert message == f"{argument} must hold data, got a quantized tensor"
        else:
            assert message.endswith((f"got {name_of}", f"got torch.{name_of}")), (op, message)
        assert all(torch.equal(raw(t), b) for t, b in zip(tensors, before)), f"{op} wrote, then raised"


def test_sub_byte_and_packed_types_are_among_the_refused() -> None:
    """Whatever this torch has of them (its version decides which exist)."""
    names = {str(d).removeprefix("torch.") for d in REFUSED}
    sub_byte = {n for n in names if n.startswith(("uint", "int", "bits", "float4")) and n not in ("uint64", "int64")}
    assert sub_byte, names
    assert all(n.rstrip("0123456789x_") in ("uint", "int", "bits", "float4_e2m1fn") for n in sub_byte), sub_byte


def test_explain_and_info_say_where_the_types_go_beyond_huawei() -> None:
    from ascend_kv.tools.cli import info_report

    note = ascend_kv.explain("reshape_and_cache", "cpu").element_types
    assert "float8_e4m3fn" in note and "Huawei's ATB documents float16, bfloat16, int8" in note
    assert all(str(d).removeprefix("torch.") in note for d in SEMANTICS_TYPES)
    report = info_report()
    assert report["element_types"] == note
    assert report["torch_npu_facade"]["module"] == "ascend_kv.compat.torch_npu"
    assert "atb.npu_paged_cache_load" in report["torch_npu_facade"]["functions"]
