"""The public ``block_copy`` (ATB BlockCopyOperation), ``copy_blocks`` and ``swap_blocks`` (vLLM's):
against the reference of the spec's loop bit for bit, every host rule at its boundary (nothing
written on an error), the device fallback (on the fake NPU of tests/fake_npu) on unchecked
values, and the graph tools."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import fake_npu
import pytest
import torch
from block_cases import BlockCase, Copies, block_cases, caches
from cases import bits_equal, random_bits, require_compiled_as_eager
from hypothesis import given
from hypothesis import strategies as st
from torch.fx.experimental.proxy_tensor import make_fx

import ascend_kv
from ascend_kv.tools import reference

OPS = torch.ops.ascend_kv
HOST_PATHS, DEVICE_FALLBACK = 0, 3  # positions in torch.ops.ascend_kv._runs()
fake_npu.install()


def on_the_device_fallback(call: Callable[..., None], *args: Any) -> None:
    """``call(*args)`` on the fake NPU's device fallback: every tensor there with its host layout (index
    tensors too, so no value is checked), nothing read back; then the device memory is copied back
    over the host tensors."""
    mirror = fake_npu.same_layout(list(args))
    before = torch.ops.ascend_kv._runs()[DEVICE_FALLBACK]
    with ascend_kv.use_backend("fallback"), fake_npu.counting() as seen:
        call(*mirror.values)
    assert seen.transfers == 0 and seen.blocking_uploads == 0
    assert torch.ops.ascend_kv._runs()[DEVICE_FALLBACK] == before + 1
    mirror.copy_back()


def untouched(before: torch.Tensor, after: torch.Tensor, destinations: list[int]) -> bool:
    """Every block not among ``destinations`` kept its bits."""
    kept = [b for b in range(before.shape[0]) if b not in set(destinations)]
    return bits_equal(before[kept], after[kept])


@given(case=block_cases())
def test_block_copy_matches_the_reference_in_place(backend: str, case: BlockCase) -> None:
    expected = case.cloned_args()
    reference.block_copy(*expected)
    before = case.key_cache.clone()
    pointer = case.key_cache.data_ptr()
    assert ascend_kv.block_copy(*case.args()) is None
    assert bits_equal(case.key_cache, expected[0]) and case.key_cache.data_ptr() == pointer
    assert case.value_cache is None or bits_equal(case.value_cache, expected[1])
    assert untouched(before, case.key_cache, case.copies.destinations)


@given(case=block_cases())
def test_the_device_fallback_matches_the_reference(case: BlockCase) -> None:
    expected = case.cloned_args()
    reference.block_copy(*expected)
    on_the_device_fallback(ascend_kv.block_copy, *case.args())
    assert bits_equal(case.key_cache, expected[0])
    assert case.value_cache is None or bits_equal(case.value_cache, expected[1])


@st.composite
def garbage_block_copies(draw: st.DrawFn) -> tuple[torch.Tensor, list[int], list[int], list[int]]:
    num_blocks = draw(st.integers(1, 8))
    values = st.one_of(st.integers(-3, num_blocks + 2), st.sampled_from([-(2**63), 2**63 - 1, 2**31]))
    sources = draw(st.lists(values, max_size=5))
    ends = draw(st.lists(st.one_of(st.integers(-2, 8), values), min_size=len(sources), max_size=len(sources)))
    return random_bits((num_blocks, 3, 4), torch.float16, draw(st.integers(0, 99))), sources, \
        draw(st.lists(values, max_size=8)), ends


def safe_copy(cache: torch.Tensor, sources: list[int], destinations: list[int], ends: list[int]) -> torch.Tensor:
    """What the device fallback promises for values nobody checked: destination ``j`` takes the first
    source whose end exceeds ``j`` (when ``ends`` never decreases), copies out of range skipped,
    every source read before any write (so with the ATB rules kept, exactly the reference)."""
    out, original, nb = cache.clone(), cache.clone(), cache.shape[0]
    for j, d in enumerate(destinations):
        i = next((i for i, e in enumerate(ends) if e > j), len(sources))
        if i < len(sources) and 0 <= sources[i] < nb and 0 <= d < nb:
            out[d] = original[sources[i]]
    return out


@given(case=garbage_block_copies())
def test_the_device_fallback_skips_out_of_range_blocks(case: tuple[torch.Tensor, list[int], list[int], list[int]]) -> None:
    cache, sources, destinations, ends = case
    ends = sorted(ends)                         # a decreasing cum_sum only promises "some order"
    nb = cache.shape[0]
    written = [d for j, d in enumerate(destinations) if 0 <= d < nb]
    if len(set(written)) != len(written):       # a destination twice: some order, not a fixed result
        return
    expected = safe_copy(cache, sources, destinations, ends)
    index = [torch.tensor(v, dtype=torch.int64) for v in (sources, destinations, ends)]
    on_the_device_fallback(ascend_kv.block_copy, cache, None, *index)
    assert bits_equal(cache, expected)


def test_one_source_fans_out_and_the_other_blocks_keep_their_bytes(backend: str) -> None:
    key, value = caches("plain", "nd", 10, torch.float16, torch.bfloat16, seed=3)
    before_key, before_value = key.clone(), value.clone()
    copies = Copies([7, 2], [0, 1, 4, 9, 5], [4, 5])   # block 7 to four blocks, block 2 to one
    ascend_kv.block_copy(key, value, *copies.tensors(torch.int32))
    for src, dst in copies.pairs():
        assert bits_equal(key[dst], before_key[src]) and bits_equal(value[dst], before_value[src])
    assert untouched(before_key, key, copies.destinations) and untouched(before_value, value, copies.destinations)


@pytest.mark.parametrize("copies", [Copies([], [], []), Copies([3, 1], [], [0, 0])], ids=["no source", "no destination"])
def test_empty_copies_write_nothing(backend: str, copies: Copies) -> None:
    key, value = caches("plain", "nz", 4, torch.int8, torch.float16, seed=5)
    before = key.clone(), value.clone()
    ascend_kv.BlockCopyOperation(ascend_kv.BlockCopyParam())(key, value, *copies.tensors(torch.int64))
    assert bits_equal(key, before[0]) and bits_equal(value, before[1])


@pytest.mark.parametrize("storage", ["column slices, 10-byte rows", "interleaved NZ", "7-D, every dim strided"])
def test_host_paths_copy_every_block_layout(storage: str) -> None:
    """Blocks of rows that are not whole 32-byte pieces (once the indexed path), K and V block by block
    (once the copier), and blocks of six strided dims (more loops than the copy primitive holds):
    each copied exactly on the host paths, nothing else changed."""
    if storage.startswith("column"):
        key, value = caches("column slices", "nd", 4, torch.float16, torch.float16, seed=1, head_size=5)
    elif storage.startswith("interleaved"):
        key, value = caches("interleaved", "nz", 4, torch.bfloat16, torch.bfloat16, seed=1)
    else:
        key = random_bits((4, 4, 4, 4, 4, 4, 4), torch.float32, 1)[:, ::2, ::2, ::2, ::2, ::2, ::2]
        value = random_bits((4, 3, 4, 5, 2, 3, 2), torch.int8, 2)[:, :, ::2, ::3]
    bases = [t._base if t._base is not None else t for t in (key, value)]
    buffers = list({id(b): b for b in bases}.values())                          # K and V may share one
    expected = {id(b): b.clone() for b in buffers}
    views = [expected[id(b)].as_strided(t.shape, t.stride(), t.storage_offset()) for b, t in zip(bases, (key, value))]
    index = Copies([0, 3], [1, 2], [1, 2]).tensors(torch.int32)
    reference.block_copy(*views, *index)
    before = torch.ops.ascend_kv._runs()[HOST_PATHS]
    with ascend_kv.use_backend("fallback"):
        ascend_kv.block_copy(key, value, *index)
    assert torch.ops.ascend_kv._runs()[HOST_PATHS] == before + 1
    assert all(bits_equal(b, expected[id(b)]) for b in buffers)
    if storage.startswith("7-D"):
        target = random_bits((3, 2, 2, 2, 2, 2, 2), torch.float32, 3)
        want = target.clone()
        reference.swap_blocks(key, want, torch.tensor([[3, 0], [1, 2]]))
        ascend_kv.swap_blocks(key, target, torch.tensor([[3, 0], [1, 2]]))
        assert bits_equal(target, want)


# ----------------------------------------------------------------------------- copy_blocks


@pytest.mark.parametrize("storage", ["one buffer per layer", "per-layer views of one buffer", "key only"])
def test_copy_blocks_over_32_layers_is_one_operator_and_matches_the_reference(backend: str, storage: str) -> None:
    layers, num_blocks = 32, 6
    if storage == "per-layer views of one buffer":   # vLLM: kv[layer][0] / kv[layer][1]
        buf = random_bits((layers, 2, num_blocks, 4, 2, 8), torch.float16, 0)
        keys, values = [buf[i, 0] for i in range(layers)], [buf[i, 1] for i in range(layers)]
    else:
        keys = [random_bits((num_blocks, 4, 2, 8), torch.bfloat16, i) for i in range(layers)]
        values = [] if storage == "key only" else [random_bits((num_blocks, 4, 2, 16), torch.bfloat16, 99 + i)
                                                   for i in range(layers)]
    mapping = torch.tensor([[0, 3], [0, 4], [2, 5]])
    expected_keys, expected_values = [k.clone() for k in keys], [v.clone() for v in values]
    reference.copy_blocks(expected_keys, expected_values, mapping)

    def step(*tensors: torch.Tensor) -> None:
        ascend_kv.copy_blocks(list(tensors[:layers]), list(tensors[layers:-1]), tensors[-1])

    graph = make_fx(step)(*keys, *values, mapping)
    ours = [str(n.target) for n in graph.graph.nodes if n.op == "call_function" and str(n.target).startswith("ascend_kv")]
    assert ours == ["ascend_kv.copy_blocks.default"]
    ascend_kv.copy_blocks(keys, values, mapping)
    assert all(bits_equal(a, b) for a, b in zip([*keys, *values], [*expected_keys, *expected_values]))


def test_copy_blocks_rules_name_the_pair_and_the_layer() -> None:
    keys = [torch.zeros(4, 2, 8, dtype=torch.float16) for _ in range(3)]
    values = [k.clone() for k in keys]
    for mapping, message in (
        (torch.tensor([[3, 0]]), None),
        (torch.tensor([[4, 0]]), r"block_mapping\[0, 0\] = 4 is out of range: the caches hold 4 blocks"),
        (torch.tensor([[0, 1], [2, -1]]), r"block_mapping\[1, 1\] = -1 is out of range"),
        (torch.tensor([[0, 1], [2, 1]]), r"block_mapping\[1, 1\] = 1 repeats block_mapping\[0, 1\]"),
        (torch.tensor([[0, 1], [1, 2]]), r"block_mapping\[0, 1\] = 1 is also a source \(block_mapping\[1, 0\]\)"),
        (torch.tensor([0, 1]), r"block_mapping must be a 2-D tensor \[n, 2\]"),
    ):
        judge(lambda m=mapping: ascend_kv.copy_blocks(keys, values, m), [*keys, *values], message)
    judge(lambda: ascend_kv.copy_blocks(keys, values[:2], torch.tensor([[0, 1]])), keys,
          r"value_caches must have one cache per layer \(3, as key_caches\) or none")
    judge(lambda: ascend_kv.copy_blocks(keys, [*values[:2], torch.zeros(5, 2, 8, dtype=torch.float16)],
                                        torch.tensor([[0, 1]])), keys,
          r"value_caches\[2\].shape\[0\] \(num_blocks\) = 5 must equal key_caches\[0\].shape\[0\] = 4")
    judge(lambda: ascend_kv.copy_blocks(keys, [values[0], keys[1][:, :1], values[2]], torch.tensor([[0, 1]])), keys,
          r"shares memory with key_caches\[1\]")                       # overlaid, not identical: refused
    with pytest.raises(TypeError, match=r"key_caches must be a list of tensors"):
        ascend_kv.copy_blocks(keys[0], values, torch.tensor([[0, 1]]))  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- rules at their boundaries


def judge(call: Callable[[], Any], written: list[torch.Tensor], message: str | None,
          error: type[Exception] = ValueError) -> None:
    """``call()`` is accepted (``message`` None) or raises ``error`` matching ``message``, writing nothing."""
    before = [t.clone() for t in written]
    if message is None:
        call()
        return
    with pytest.raises(error, match=message):
        call()
    assert all(bits_equal(a, b) for a, b in zip(written, before)), "a rejected call wrote"


@pytest.mark.parametrize(("sources", "destinations", "ends", "message"), [
    ([7], [0], [1], None),
    ([8], [0], [1], r"src_block_indices\[0\] = 8 is out of range: the caches hold 8 blocks"),
    ([0], [-1], [1], r"dst_block_indices\[0\] = -1 is out of range"),
    ([0, 1], [2, 3], [1, 1], r"cum_sum\[-1\] = 1, but dst_block_indices has 2 entries"),
    ([0, 1], [2, 3], [2, 2], None),
    ([0, 1], [2, 3], [1, 3], r"cum_sum\[-1\] = 3, but dst_block_indices has 2 entries"),
    ([0, 1], [2, 3], [2, 1], r"cum_sum\[1\] = 1 is less than cum_sum\[0\] = 2"),
    ([0, 1], [], [0, 0], None),
    ([0, 1], [], [-1, 0], r"cum_sum\[0\] = -1 is less than 0"),
    ([], [2], [], r"cum_sum is empty, which means 0 destinations, but dst_block_indices has 1 entries"),
    ([0, 1], [2, 3], [1], r"cum_sum must have 2 entries"),
    ([0], [2, 2], [2], r"dst_block_indices\[1\] = 2 repeats dst_block_indices\[0\]"),
    ([0, 2], [2, 3], [1, 2], r"dst_block_indices\[0\] = 2 is also a source \(src_block_indices\[1\]\)"),
    ([0, 0], [2, 3], [1, 2], None),                                  # one source named twice: fine
])
def test_block_copy_value_rules_at_their_boundaries(sources: list[int], destinations: list[int], ends: list[int],
                                                    message: str | None) -> None:
    key, value = caches("plain", "nd", 8, torch.float16, torch.int8, seed=2)
    index = [torch.tensor(v, dtype=torch.int32) for v in (sources, destinations, ends)]
    judge(lambda: ascend_kv.block_copy(key, value, *index), [key, value], message)


def test_block_copy_structure_rules() -> None:
    key, value = caches("plain", "nd", 4, torch.float16, torch.float16, seed=2)
    index = Copies([0], [1], [1]).tensors(torch.int64)
    cases: list[tuple[Callable[[], Any], str, type[Exception]]] = [
        (lambda: ascend_kv.block_copy(key.bool(), None, *index), r"key_cache must have dtype", TypeError),
        (lambda: ascend_kv.block_copy(key, value, index[0].short(), *index[1:]),
         r"src_block_indices must have dtype int32 or int64, got int16", TypeError),
        (lambda: ascend_kv.block_copy(key, value, index[0], index[1].reshape(1, 1), index[2]),
         r"dst_block_indices must be a 1-D tensor", ValueError),
        (lambda: ascend_kv.block_copy(key[:, 0, 0, 0], None, *index),
         (r"key_cache must be a tensor \[num_blocks, \.\.\.\] of at least 2 dimensions"), ValueError),
        (lambda: ascend_kv.block_copy(key, value[:3], *index),
         (r"value_cache.shape\[0\] \(num_blocks\) = 3 must equal key_cache.shape\[0\] = 4"), ValueError),
        (lambda: ascend_kv.block_copy(key, key[:, :8], *index), r"value_cache shares memory with key_cache", ValueError),
        (lambda: ascend_kv.block_copy(key[:, :1].expand(4, 16, 2, 16), None, *index), r"maps several elements to one place",
         ValueError),
        (lambda: ascend_kv.block_copy(key, [value], *index), r"value_cache must be a torch.Tensor, got a list",  # type: ignore[arg-type]
         TypeError),
    ]
    for call, message, error in cases:
        judge(call, [key, value], message, error)
    buf = torch.zeros(4, 2, 16, 2, 16, dtype=torch.float16)             # K and V block by block: apart
    judge(lambda: ascend_kv.block_copy(buf[:, 0], buf[:, 1], *index), [buf], None)


# ----------------------------------------------------------------------------- swap_blocks


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_swap_blocks_on_the_host_matches_the_reference(index_dtype: torch.dtype) -> None:
    device_cache = random_bits((8, 16, 2, 16), torch.bfloat16, 1)
    host_cache = random_bits((5, 16, 2, 16), torch.bfloat16, 2)
    mapping = torch.tensor([[7, 0], [2, 4], [3, 1]], dtype=index_dtype)
    expected = host_cache.clone()
    reference.swap_blocks(device_cache, expected, mapping)
    ascend_kv.swap_blocks(device_cache, host_cache, mapping)
    assert bits_equal(host_cache, expected)
    strided = random_bits((5, 16, 2, 32), torch.bfloat16, 3)[..., :16]  # a column slice takes the indexed path
    expected = strided.clone()
    reference.swap_blocks(device_cache, expected, mapping)
    ascend_kv.swap_blocks(device_cache, strided, mapping)
    assert bits_equal(strided, expected)


def test_swap_blocks_rules() -> None:
    src, dst = torch.zeros(8, 4, 16, dtype=torch.float16), torch.zeros(3, 4, 16, dtype=torch.float16)
    for mapping, message, error in (
        (torch.tensor([[7, 2]]), None, ValueError),
        (torch.tensor([[8, 2]]), r"block_mapping\[0, 0\] = 8 is out of range: src holds 8 blocks", ValueError),
        (torch.tensor([[0, 3]]), r"block_mapping\[0, 1\] = 3 is out of range: dst holds 3 blocks", ValueError),
        (torch.tensor([[0, 1], [2, 1]]), r"block_mapping\[1, 1\] = 1 repeats block_mapping\[0, 1\]", ValueError),
        (torch.tensor([[0, 1]], dtype=torch.float32), r"block_mapping must have dtype int32 or int64", TypeError),
    ):
        judge(lambda m=mapping: ascend_kv.swap_blocks(src, dst, m), [dst], message, error)
    judge(lambda: ascend_kv.swap_blocks(src, dst.bfloat16(), torch.tensor([[0, 1]])), [dst],
          r"dst.dtype must equal src.dtype", TypeError)
    judge(lambda: ascend_kv.swap_blocks(src, dst[:, :2], torch.tensor([[0, 1]])), [dst],
          r"dst.shape\[1:\] \(one block\) = \(2, 16\) must equal src.shape\[1:\] = \(4, 16\)")
    judge(lambda: ascend_kv.swap_blocks(src, src[4:], torch.tensor([[0, 1]])), [src], r"dst shares memory with src")


# ----------------------------------------------------------------------------- graph tools


def fork(key: torch.Tensor, value: torch.Tensor, src: torch.Tensor, dst: torch.Tensor,
         ends: torch.Tensor) -> torch.Tensor:
    ascend_kv.block_copy(key, value, src, dst, ends)
    return key[1].flip(0)


def copy_layers(buf: torch.Tensor, mapping: torch.Tensor) -> torch.Tensor:
    ascend_kv.copy_blocks([buf[0, 0], buf[1, 0]], [buf[0, 1], buf[1, 1]], mapping)
    return buf[1, 1, 2].flip(0)


def swap(src: torch.Tensor, dst: torch.Tensor, mapping: torch.Tensor) -> torch.Tensor:
    ascend_kv.swap_blocks(src, dst, mapping)
    return dst[0].flip(0)


def fork_inputs() -> list[torch.Tensor]:
    key, value = caches("plain", "nd", 6, torch.float16, torch.bfloat16, seed=4)
    return [key, value, *Copies([0, 4], [1, 2, 3], [2, 3]).tensors(torch.int32)]


STEPS: dict[str, tuple[Callable[..., Any], Callable[[], list[torch.Tensor]], str]] = {
    "block_copy": (fork, fork_inputs, "ascend_kv.block_copy.default"),
    "copy_blocks over views of one buffer": (
        copy_layers, lambda: [random_bits((2, 2, 6, 4, 16), torch.float16, 5), torch.tensor([[0, 2], [1, 3]])],
        "ascend_kv.copy_blocks.default"),
    "swap_blocks": (swap, lambda: [random_bits((6, 4, 16), torch.int8, 6), torch.zeros(3, 4, 16, dtype=torch.int8),
                                   torch.tensor([[5, 0], [1, 2]])], "ascend_kv.swap_blocks.default"),
}


@pytest.mark.parametrize("name", STEPS)
def test_compiled_call_matches_eager_and_writes_in_place(name: str) -> None:
    step, inputs, _ = STEPS[name]
    require_compiled_as_eager(step, inputs)


@pytest.mark.parametrize("name", STEPS)
def test_make_fx_records_the_call_as_one_operator(name: str) -> None:
    step, inputs, target = STEPS[name]
    graph = make_fx(step)(*inputs())
    ours = [str(n.target) for n in graph.graph.nodes if n.op == "call_function" and str(n.target).startswith("ascend_kv")]
    assert ours == [target]


def test_block_operators_pass_opcheck() -> None:
    key, value, *index = fork_inputs()
    for t in (key, value):
        t.nan_to_num_(nan=0.0)
    torch.library.opcheck(OPS.block_copy.default, (key, value, *index))
    torch.library.opcheck(OPS.block_copy.default, (key, None, *index))
    layers = [torch.randn(6, 4, 16).half() for _ in range(3)]
    torch.library.opcheck(OPS.copy_blocks.default, (layers, [t.clone() for t in layers], torch.tensor([[0, 2], [1, 3]])))
    torch.library.opcheck(OPS.copy_blocks.default, (layers, [], torch.tensor([[0, 2]], dtype=torch.int32)))
    torch.library.opcheck(OPS.swap_blocks.default, (torch.randn(6, 4, 16).half(), torch.zeros(3, 4, 16).half(),
                                                    torch.tensor([[5, 0], [1, 2]])))


def test_explain_names_the_block_operation_and_its_backend() -> None:
    for name in ("block_copy", "copy_blocks", "BlockCopyOperation"):
        decision = ascend_kv.explain(name, "cpu")
        assert (decision.op, decision.backend) == ("BlockCopyOperation", "fallback")
        assert ascend_kv.explain(name, "cpu", backend="sim").backend == "sim"
