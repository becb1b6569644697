"""The registered operators (csrc/registration.cpp, loaded by ascend_kv/operators/library.py): schemas,
opcheck on every operator and overload, results, torch.compile."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from block_cases import Copies, caches
from cases import (
    ND,
    NZ,
    Case,
    bits_equal,
    kv_cache_case,
    kv_cache_cases,
    paged_case,
    paged_cases,
    random_bits,
    reshape_and_cache_case,
)
from hypothesis import given
from torch._dynamo.utils import ReinplaceCounters
from torch._inductor.utils import run_and_get_code
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv, free_unbacked_symbols
from torch.utils._python_dispatch import TorchDispatchMode
from transfer_cases import make_case

import ascend_kv
from ascend_kv.tools import reference

OPS = torch.ops.ascend_kv


def mutated_arguments(op: torch._ops.OpOverload) -> list[str]:
    return [a.name for a in op._schema.arguments if a.alias_info is not None and a.alias_info.is_write]


def test_schemas_mark_exactly_the_written_arguments() -> None:
    assert mutated_arguments(OPS.kv_cache.default) == ["past"]
    assert mutated_arguments(OPS.paged_cache_load.default) == []
    assert mutated_arguments(OPS.paged_cache_load.into) == ["key", "value"]
    assert len(OPS.kv_cache.default._schema.returns) == 0
    assert len(OPS.paged_cache_load.default._schema.returns) == 2
    assert len(OPS.paged_cache_load.into._schema.returns) == 0


def test_one_implementation_serves_every_device_and_autograd_falls_through() -> None:
    for name in ("ascend_kv::kv_cache", "ascend_kv::paged_cache_load"):
        for key in ("CPU", "CUDA", "PrivateUse1"):
            assert torch._C._dispatch_has_computed_kernel_for_dispatch_key(name, key), (name, key)
        assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "Autograd")


# ----------------------------------------------------------------------------- opcheck


def op_arguments(case: Case) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A public call's arguments as the operator takes them (ints for layer_id and the layout)."""
    args, kwargs = list(case.args), dict(case.kwargs)
    if isinstance(args[1], torch.Tensor) and args[1].numel() == 1:  # kv_cache's layer_id
        args[1] = int(args[1].item())
    if "kv_cache_cfg" in kwargs and not isinstance(kwargs["kv_cache_cfg"], str):  # reshape_and_cache's is "nd"/"nz"
        kwargs["kv_cache_cfg"] = int(kwargs["kv_cache_cfg"])
    return tuple(args), kwargs


def without_nans(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Zero NaN payloads in place: opcheck compares with ``assert_close``, where NaN != NaN."""
    for t in (*args, *kwargs.values()):
        if isinstance(t, torch.Tensor) and t.dtype.is_floating_point:
            t.nan_to_num_(nan=0.0)


def column_major(case: Case, index: int) -> Case:
    """``case`` with positional argument ``index`` stored with its first two dims swapped in memory."""
    args = list(case.args)
    args[index] = args[index].transpose(0, 1).contiguous().transpose(0, 1)
    return Case(tuple(args), case.kwargs)


KV_CASES = {
    "decode-int32": kv_cache_case(torch.float16, [1, 1, 1], [3, 16, 9]),
    "layer-major-past": column_major(kv_cache_case(torch.float16, [2, 1, 0], [3, 16, 9], layers=3), 2),
    "prefill-int64-bf16": kv_cache_case(torch.bfloat16, [4, 0, 2], [4, 5, 16], index_dtype=torch.int64),
    "4d-int8": kv_cache_case(torch.int8, [2, 3], [2, 7], hidden=64, new_kv_4d=True),
}
LOAD_CASES = {
    "nd": paged_case(ND, [20, 3, 0]),
    "nd-cumsum-starts": paged_case(ND, [5, 17], cumsum_base=2, seq_starts=[3, 16], index_dtype=torch.int64),
    "nz-int8-key": paged_case(NZ, [16, 33], key_dtype=torch.int8, value_dtype=torch.float16, head_size_k=32),
    "nd-column-major-table": column_major(paged_case(ND, [20, 3, 40]), 2),
}


@pytest.mark.parametrize("name", KV_CASES)
def test_opcheck_kv_cache(name: str) -> None:
    args, kwargs = op_arguments(KV_CASES[name].cloned())
    without_nans(args, kwargs)
    args[0].requires_grad_(args[0].dtype.is_floating_point)  # new_kv: exercises the autograd registration
    torch.library.opcheck(OPS.kv_cache.default, args, kwargs)


@pytest.mark.parametrize("name", KV_CASES)
def test_opcheck_kv_cache_with_a_layer_tensor(name: str) -> None:
    """The ``layer_tensor`` overload: the layer as a one-element integer tensor (int32 or int64)."""
    args, kwargs = op_arguments(KV_CASES[name].cloned())
    without_nans(args, kwargs)
    args = (args[0].requires_grad_(args[0].dtype.is_floating_point),
            torch.tensor([args[1]], dtype=args[3].dtype), *args[2:])
    torch.library.opcheck(OPS.kv_cache.layer_tensor, args, kwargs)


@pytest.mark.parametrize("outputs", ["allocated", "given"])
@pytest.mark.parametrize("name", LOAD_CASES)
def test_opcheck_paged_cache_load(name: str, outputs: str) -> None:
    args, kwargs = op_arguments(LOAD_CASES[name].cloned())
    without_nans(args, kwargs)
    for cache in args[:2]:  # exercises the autograd registration
        cache.requires_grad_(cache.dtype.is_floating_point)
    if outputs == "given":
        kwargs["key"], kwargs["value"] = [torch.zeros_like(t) for t in ascend_kv.paged_cache_load(*args, **kwargs)]
        torch.library.opcheck(OPS.paged_cache_load.into, args, kwargs)
    else:
        torch.library.opcheck(OPS.paged_cache_load.default, args, kwargs)


RESHAPE_CASES = {
    "nd": reshape_and_cache_case("nd", [5, -1, 17, 0, 63], num_tokens=6, head_size_k=7, head_size_v=9),
    "nd-key-only": reshape_and_cache_case("nd", [40, 3, 17], num_tokens=5, key_only=True, index_dtype=torch.int64),
    "nd-strided": reshape_and_cache_case("nd", [5, 60, -1, 2], strided=True),
    "nz-int8-bf16": reshape_and_cache_case("nz", [3, 60, 17], key_dtype=torch.int8, value_dtype=torch.bfloat16,
                                           head_size_k=32, head_size_v=16, block_size=32),
}


@pytest.mark.parametrize("name", RESHAPE_CASES)
def test_opcheck_reshape_and_cache(name: str) -> None:
    args, kwargs = op_arguments(RESHAPE_CASES[name].cloned())
    without_nans(args, kwargs)
    args[0].requires_grad_(args[0].dtype.is_floating_point)  # key: exercises the autograd registration
    torch.library.opcheck(OPS.reshape_and_cache.default, args, kwargs)


def block_copy_arguments(storage: str, value: bool) -> tuple[Any, ...]:
    key, value_cache = caches(storage, "nd" if storage == "column slices" else "nz", 8, torch.float16,
                              torch.bfloat16 if storage == "plain" else torch.float16, seed=4)
    for t in (key, value_cache):
        t.nan_to_num_(nan=0.0)
    return (key, value_cache if value else None, *Copies([0, 4], [1, 2, 3], [2, 3]).tensors(torch.int32))


@pytest.mark.parametrize("storage", ["plain", "column slices", "interleaved"])
@pytest.mark.parametrize("value", [True, False], ids=["key and value", "key only"])
def test_opcheck_block_copy(storage: str, value: bool) -> None:
    torch.library.opcheck(OPS.block_copy.default, block_copy_arguments(storage, value))


@pytest.mark.parametrize("key_only", [False, True])
def test_opcheck_copy_blocks(key_only: bool) -> None:
    """Per-layer views of one vLLM-style ``[layers, 2, num_blocks, ...]`` buffer."""
    buf = torch.randn(3, 2, 6, 16, 2, 16).half()
    keys, values = [buf[i, 0] for i in range(3)], [] if key_only else [buf[i, 1] for i in range(3)]
    torch.library.opcheck(OPS.copy_blocks.default, (keys, values, torch.tensor([[0, 2], [1, 3], [0, 5]])))


@pytest.mark.parametrize("target", ["contiguous", "column slice"])
def test_opcheck_swap_blocks(target: str) -> None:
    src = torch.randn(6, 16, 2, 16).bfloat16()
    dst = torch.zeros(3, 16, 2, 16).bfloat16() if target == "contiguous" else torch.zeros(3, 16, 2, 24).bfloat16()[..., 4:20]
    torch.library.opcheck(OPS.swap_blocks.default, (src, dst, torch.tensor([[5, 0], [1, 2]], dtype=torch.int32)))


def test_opcheck_swap_blocks_bytes() -> None:
    """vLLM's 4-argument form: 512-byte blocks of a bfloat16 source into an int8 destination."""
    src, dst = torch.randn(6, 16, 2, 16).bfloat16(), torch.zeros(4096, dtype=torch.int8)
    torch.library.opcheck(OPS.swap_blocks.bytes, (src, dst, 512, torch.tensor([[5, 0], [1, 7]])))


def test_opcheck_swap_blocks_batch() -> None:
    """Raw addresses: two copies between host tensors (the tables are read, never written)."""
    src, dst = torch.arange(64, dtype=torch.uint8), torch.zeros(64, dtype=torch.uint8)
    table = (torch.tensor([src.data_ptr(), src.data_ptr() + 32]), torch.tensor([dst.data_ptr() + 32, dst.data_ptr()]),
             torch.tensor([16, 8]))
    torch.library.opcheck(OPS.swap_blocks_batch.default, (*table, False, -1))


@pytest.mark.parametrize(("cache_layout", "buffer_layout", "splits"), [("nd", "nz", 1), ("nz", "nd", 2), ("hnd", "hnd", 1)])
@pytest.mark.parametrize("key_only", [False, True])
def test_opcheck_gather_and_scatter_blocks(cache_layout: str, buffer_layout: str, splits: int, key_only: bool) -> None:
    """Per-layer views of one buffer, relaid out on the way (finite values: opcheck compares with allclose)."""
    case = make_case(cache_layout, buffer_layout, splits=splits, kv=1 if key_only else 2, one_buffer=True)
    for t in [*case.caches(), case.buffer]:
        t.view(torch.int16).bitwise_and_(0x3BFF)
    options = (cache_layout, buffer_layout, splits)
    torch.library.opcheck(OPS.gather_blocks.default, (case.keys, case.values, case.block_ids(), case.buffer, *options))
    torch.library.opcheck(OPS.scatter_blocks.default,
                          (case.buffer, case.keys, case.values, case.block_ids(), buffer_layout, cache_layout, splits))


def test_every_operator_and_overload_has_an_opcheck_test() -> None:
    """The public operators of the library, overload by overload, each with its opcheck test above
    (the underscored ones are the library's own plumbing; the functional_* twins are the compile
    rule's, run by the compile tests; the quantizing overloads' are in tests/test_quant.py, the state
    caches' in tests/test_state_slots.py, test_state_transfer.py and test_batch_memcpy.py,
    scatter_nd_update's in tests/test_scatter_nd.py, vLLM's cache ops' in tests/test_vllm_cache_ops.py,
    block_ranges' in tests/test_block_ranges.py)."""
    tested = {"kv_cache.default", "kv_cache.layer_tensor", "paged_cache_load.default", "paged_cache_load.into",
              "reshape_and_cache.default", "reshape_and_cache.quant", "paged_cache_load.dequant",
              "paged_cache_load.dequant_into", "block_copy.default", "copy_blocks.default", "swap_blocks.default",
              "swap_blocks.bytes", "swap_blocks_batch.default", "gather_blocks.default", "scatter_blocks.default",
              "copy_state_slots.default", "gather_state_slots.default", "scatter_state_slots.default",
              "batch_memcpy.default", "scatter_nd_update.default", "vllm_reshape_and_cache.default",
              "vllm_reshape_and_cache_flash.default", "convert_fp8.default", "gather_cache.default",
              "vllm_concat_and_cache_mla.default", "concat_mla_q.default", "vllm_indexer_k_quant_and_cache.default",
              "vllm_cp_gather_indexer_k_quant_cache.default", "block_ranges.default"}
    public = {f"{name}.{overload}" for name in dir(OPS) if not name.startswith(("_", "functional_"))
              and isinstance(getattr(OPS, name), torch._ops.OpOverloadPacket)
              for overload in getattr(OPS, name).overloads()}
    assert public == tested


# ----------------------------------------------------------------------------- eager results


@given(kv_cache_cases())
def test_kv_cache_operator_matches_reference(case: Case) -> None:
    expected = reference.kv_cache(*case.cloned().args)
    args, _ = op_arguments(case)
    assert OPS.kv_cache(*args) is None
    assert bits_equal(args[2], expected)


@given(paged_cases())
def test_paged_cache_load_operator_matches_reference(case: Case) -> None:
    expected = reference.paged_cache_load(*case.cloned().args, **case.cloned().kwargs)
    args, kwargs = op_arguments(case)
    if "key" in kwargs:
        assert OPS.paged_cache_load(*args, **kwargs) is None
        got = kwargs["key"], kwargs["value"]
    else:
        got = OPS.paged_cache_load(*args, **kwargs)
    assert all(bits_equal(g, e) for g, e in zip(got, expected))


def test_operator_raises_the_checks_error_and_writes_nothing() -> None:
    args, _ = op_arguments(kv_cache_case(torch.float16, [2, 1], [2, 17]))
    before = args[2].clone()
    with pytest.raises(ValueError, match=r"token_offset\[1\] = 17 exceeds max_seq_len = 16"):
        OPS.kv_cache(*args)
    assert bits_equal(args[2], before)


class _OperatorCalls(TorchDispatchMode):
    """Records the ``ascend_kv`` operators the dispatcher runs (the overloads' names)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func.namespace == "ascend_kv":
            name = func.__name__.removeprefix(f"{func._opname}.").replace("default", "")
            self.seen.append(func._opname + (f".{name}" if name else ""))
        return func(*args, **(kwargs or {}))


def test_public_function_is_one_operator_call() -> None:
    """The public function is a thin door into the operator: every call goes through torch.ops."""
    case = KV_CASES["decode-int32"].cloned()
    args = list(case.args)
    args[1] = torch.tensor(args[1])
    with _OperatorCalls() as calls:
        ascend_kv.kv_cache(*case.args)
        ascend_kv.kv_cache(*args)
    assert calls.seen == ["kv_cache", "kv_cache.layer_tensor"]


def test_operators_do_not_record_autograd() -> None:
    new_kv, layer, past, offsets, lens = op_arguments(KV_CASES["decode-int32"].cloned())[0]
    OPS.kv_cache(new_kv.requires_grad_(), layer, past, offsets, lens)
    assert not past.requires_grad and past.grad_fn is None
    args, kwargs = op_arguments(LOAD_CASES["nd"].cloned())
    key, value = OPS.paged_cache_load(args[0].requires_grad_(), *args[1:], **kwargs)
    assert not key.requires_grad and not value.requires_grad


def test_fake_paged_cache_load_has_data_dependent_rows() -> None:
    args, kwargs = op_arguments(LOAD_CASES["nz-int8-key"])
    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        fake_args = [mode.from_tensor(a) for a in args]
        key, value = OPS.paged_cache_load(*fake_args, **kwargs)
    assert key.dtype == torch.int8 and value.dtype == torch.float16
    assert key.shape[1:] == (64,) and value.shape[1:] == (32,)
    assert free_unbacked_symbols(key.shape[0]) and key.shape[0].node.expr == value.shape[0].node.expr


def test_fake_paged_cache_load_checks_the_caches() -> None:
    args, kwargs = op_arguments(LOAD_CASES["nd"])
    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        fake_args = [mode.from_tensor(a) for a in args]
        with pytest.raises(TypeError, match="key_cache must have dtype"):
            OPS.paged_cache_load(fake_args[0].double(), *fake_args[1:], **kwargs)
        with pytest.raises(ValueError, match=r"value_cache.shape\[0\] \(num_blocks\)"):
            OPS.paged_cache_load(fake_args[0], fake_args[1][:3], *fake_args[2:], **kwargs)


# ----------------------------------------------------------------------------- torch.compile

HEADS, HEAD_SIZE, NUM_BLOCKS, BLOCK_SIZE = 2, 32, 6, 16
HIDDEN = HEADS * HEAD_SIZE


def decode_step(
    new_k: torch.Tensor, new_v: torch.Tensor, k_past: torch.Tensor, v_past: torch.Tensor,
    token_offset: torch.Tensor, seq_len: torch.Tensor, block_table: torch.Tensor, context_lens: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Write new tokens into a cache, then gather sequences from it as a paged ND cache.

    ``k_past`` ``[1, NUM_BLOCKS, BLOCK_SIZE, HIDDEN]`` is read by ``kv_cache`` as one layer of
    ``NUM_BLOCKS`` sequences, and by ``paged_cache_load`` as ``NUM_BLOCKS`` blocks.
    """
    OPS.kv_cache(new_k, 0, k_past, token_offset, seq_len)
    OPS.kv_cache(new_v, 0, v_past, token_offset, seq_len)
    k_blocks = k_past[0].unflatten(-1, (HEADS, HEAD_SIZE))
    v_blocks = v_past[0].unflatten(-1, (HEADS, HEAD_SIZE))
    key, value = OPS.paged_cache_load(k_blocks, v_blocks, block_table, context_lens, kv_cache_cfg=1)
    return key, value.flip(0)


def decode_step_into(
    new_k: torch.Tensor, new_v: torch.Tensor, k_past: torch.Tensor, v_past: torch.Tensor,
    token_offset: torch.Tensor, seq_len: torch.Tensor, block_table: torch.Tensor, context_lens: torch.Tensor,
    key: torch.Tensor, value: torch.Tensor,
) -> torch.Tensor:
    """:func:`decode_step` into given outputs (cumsum mode), then reads one of them."""
    OPS.kv_cache(new_k, 0, k_past, token_offset, seq_len)
    OPS.kv_cache(new_v, 0, v_past, token_offset, seq_len)
    k_blocks = k_past[0].unflatten(-1, (HEADS, HEAD_SIZE))
    v_blocks = v_past[0].unflatten(-1, (HEADS, HEAD_SIZE))
    OPS.paged_cache_load(k_blocks, v_blocks, block_table, context_lens, kv_cache_cfg=1, cumsum=True,
                         key=key, value=value)
    return torch.cat([key[:4], value[-4:]]).flip(0)


def decode_inputs(seed: int, context_lens: list[int]) -> list[torch.Tensor]:
    """Inputs of :func:`decode_step` with random bits; 8 new tokens over 6 sequences."""
    seed = 4 * seed
    return [
        random_bits((8, HIDDEN), torch.float16, seed), random_bits((8, HIDDEN), torch.float16, seed + 1),
        random_bits((1, NUM_BLOCKS, BLOCK_SIZE, HIDDEN), torch.float16, seed + 2),
        random_bits((1, NUM_BLOCKS, BLOCK_SIZE, HIDDEN), torch.float16, seed + 3), torch.tensor([3, 5, 16, 0, 9, 1]),
        torch.tensor([1, 2, 3, 0, 1, 1]), torch.tensor([[2, 0, 1], [5, 4, -1]], dtype=torch.int32),
        torch.tensor(context_lens, dtype=torch.int32),
    ]


def clones(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    return [t.clone() for t in tensors]


def run_compiled(fn: Callable[..., Any], args: list[torch.Tensor]) -> tuple[Any, str, int]:
    """``fn`` compiled with fullgraph=True on ``args``: result, Inductor's code, and how many operator
    calls ran on the host paths (``torch.ops.ascend_kv._runs()``) while it ran."""
    torch._dynamo.reset()
    ReinplaceCounters.clear()
    before = torch.ops.ascend_kv._runs()[0]
    result, code = run_and_get_code(torch.compile(fn, fullgraph=True), *args)
    return result, "\n".join(code), torch.ops.ascend_kv._runs()[0] - before


def test_compiled_step_matches_eager_bit_for_bit_and_writes_the_cache_in_place() -> None:
    eager_args = decode_inputs(0, [40, 20])
    compiled_args = clones(eager_args)
    pointers = [t.data_ptr() for t in compiled_args[2:4]]
    eager = decode_step(*eager_args)
    compiled, code, ran = run_compiled(decode_step, compiled_args)
    assert all(bits_equal(c, e) for c, e in zip(compiled, eager))
    assert all(bits_equal(c, e) for c, e in zip(compiled_args, eager_args))
    # in place: the caller's caches (same memory) hold the eager bits, the three operator calls ran
    # once each (the compiled code has no cache-sized copy to write them through)
    assert [t.data_ptr() for t in compiled_args[2:4]] == pointers
    assert ran == 3
    assert ReinplaceCounters.get_total_missed() == 0
    assert "clone" not in code and ".copy_(" not in code
    assert "torch.ops.ascend_kv.kv_cache.default(" in code


def test_compiled_step_follows_data_dependent_rows() -> None:
    compiled = torch.compile(decode_step, fullgraph=True)
    torch._dynamo.reset()
    for seed, context_lens in enumerate([[40, 20], [7, 0], [0, 0], [48, 32]]):
        eager_args = decode_inputs(seed, context_lens)
        compiled_args = clones(eager_args)
        eager = decode_step(*eager_args)
        got = compiled(*compiled_args)
        assert got[0].shape[0] == sum(context_lens)
        assert all(bits_equal(c, e) for c, e in zip(got, eager))
        assert all(bits_equal(c, e) for c, e in zip(compiled_args, eager_args))


def test_compiled_step_into_given_outputs_matches_eager_and_keeps_them_in_place() -> None:
    eager_args = decode_inputs(3, [2, 30, 50])
    eager_args += [torch.full((60, HEADS, HEAD_SIZE), 7.0, dtype=torch.float16) for _ in range(2)]
    compiled_args = clones(eager_args)
    pointers = [t.data_ptr() for t in compiled_args[2:4]]
    eager = decode_step_into(*eager_args)
    compiled, code, ran = run_compiled(decode_step_into, compiled_args)
    assert bits_equal(compiled, eager)
    assert all(bits_equal(c, e) for c, e in zip(compiled_args, eager_args))  # rows 0, 1 and 50.. kept
    assert [t.data_ptr() for t in compiled_args[2:4]] == pointers
    assert ran == 3
    assert ReinplaceCounters.get_total_missed() == 0
    assert "clone" not in code and ".copy_(" not in code


def test_compiled_with_dynamic_shapes_matches_eager() -> None:
    """Symbolic sizes reach the fake implementations (their shape checks guard, never fail)."""
    torch._dynamo.reset()
    compiled = torch.compile(decode_step, fullgraph=True, dynamic=True)
    for seed, context_lens in enumerate([[40, 20], [3, 17]]):
        eager_args = decode_inputs(seed, context_lens)
        eager_args[0], eager_args[1] = eager_args[0][: 8 - seed], eager_args[1][: 8 - seed]
        eager_args[5] = torch.tensor([1, 2, 3, 0, 1, 1 - seed])
        compiled_args = clones(eager_args)
        eager = decode_step(*eager_args)
        got = compiled(*compiled_args)
        assert all(bits_equal(c, e) for c, e in zip(got, eager))
        assert all(bits_equal(c, e) for c, e in zip(compiled_args, eager_args))
