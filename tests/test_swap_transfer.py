"""vLLM's block-transfer forms (docs/semantics.md §11.2-11.3): ``swap_blocks(src, dst, block_size_in_bytes,
block_mapping)`` (operator ``swap_blocks.bytes``) against the spec's byte loop, bit for bit, on the
host and between the host and the fake NPU (non-blocking from pinned memory, runs coalesced, nothing
waited for); every rule at its boundary with nothing written; compiled steps equal to eager."""

from __future__ import annotations

from typing import Any

import fake_npu
import pytest
import torch
from cases import bits_equal, random_bits, require_compiled_as_eager
from hypothesis import given
from hypothesis import strategies as st
from test_block_copy import judge

import ascend_kv
from ascend_kv.tools import reference

fake_npu.install()


@st.composite
def byte_swaps(draw: st.DrawFn) -> tuple[torch.Tensor, torch.Tensor, int, torch.Tensor]:
    """Any dtypes, ``B`` any size (a block's stride or not), pairs with runs and distinct destinations."""
    block = draw(st.sampled_from([1, 6, 64, 256]))
    src_blocks, dst_blocks = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    src_dtype, dst_dtype = (draw(st.sampled_from([torch.float16, torch.int8, torch.float32])) for _ in range(2))
    extra = draw(st.integers(0, 3))                                   # bytes past the last whole block
    src = random_bits((src_blocks * block + extra,), torch.uint8, draw(st.integers(0, 99)))
    dst = random_bits((dst_blocks * block + extra,), torch.uint8, draw(st.integers(100, 199)))
    src = src[: src.numel() // src_dtype.itemsize * src_dtype.itemsize].view(src_dtype)
    dst = dst[: dst.numel() // dst_dtype.itemsize * dst_dtype.itemsize].view(dst_dtype)
    src_count, dst_count = src.nbytes // block, dst.nbytes // block
    if not src_count or not dst_count:
        return src, dst, block, torch.zeros(0, 2, dtype=torch.int64)
    destinations = list(draw(st.permutations(range(dst_count))))[: draw(st.integers(0, dst_count))]
    sources = [draw(st.integers(0, src_count - 1)) for _ in destinations]
    index_dtype = draw(st.sampled_from([torch.int32, torch.int64]))
    return src, dst, block, torch.tensor(list(zip(sources, destinations)), dtype=index_dtype).reshape(-1, 2)


@given(case=byte_swaps())
def test_the_bytes_form_matches_the_reference_on_the_host(case: tuple[Any, ...]) -> None:
    src, dst, block, mapping = case
    expected = dst.clone()
    reference.swap_blocks_bytes(src, expected, block, mapping)
    ascend_kv.swap_blocks(src, dst, block, mapping)
    assert bits_equal(dst, expected)


def test_pages_go_into_halves_of_two_page_host_blocks() -> None:
    """vLLM's offload: GPU pages of 512 bytes into CPU blocks of 2 pages, with B = 512."""
    gpu = random_bits((8, 16, 2, 8), torch.float16, 1)                # 8 pages of 512 bytes
    cpu = random_bits((3, 2, 16, 2, 8), torch.float16, 2)             # 3 blocks of 2 pages
    mapping = torch.tensor([[5, 0], [6, 1], [2, 5], [3, 3]])
    expected = cpu.clone()
    reference.swap_blocks_bytes(gpu, expected, 512, mapping)
    ascend_kv.swap_blocks(gpu, cpu, block_size_in_bytes=512, block_mapping=mapping)
    assert bits_equal(cpu, expected)
    assert bits_equal(cpu[0, 0], gpu[5]) and bits_equal(cpu[2, 1], gpu[2]) and bits_equal(cpu[1, 1], gpu[3])


def test_the_bytes_form_between_pinned_memory_and_the_npu_never_waits() -> None:
    """Out: one non-blocking copy per run (pages 5, 6 to 0, 1 is one run); in: non-blocking uploads.
    No temporary: every copy is a narrow of src to a narrow of dst."""
    cache = random_bits((8, 16, 2, 8), torch.float16, 3)
    on_npu = cache.to("npu:0")
    host = torch.zeros(4, 2, 16, 2, 8, dtype=torch.float16, pin_memory=True)
    out = torch.tensor([[5, 0], [6, 1], [2, 5]])
    with fake_npu.counting() as seen, fake_npu.recording("aten::_copy_from") as copies:
        ascend_kv.swap_blocks(on_npu, host, 512, out)
    flags = [bool(c.args[2]) for c in copies if c.devices[0] != c.devices[1]]
    assert flags == [True, True] and seen.transfers == 2                # two runs, each a queued D2H copy
    assert bits_equal(host[0], cache[5:7]) and bits_equal(host[2, 1], cache[2])
    with fake_npu.counting() as seen:
        ascend_kv.swap_blocks(host, on_npu, 512, torch.tensor([[0, 7], [1, 3]]))
    assert seen.transfers == 0 and seen.blocking_uploads == 0
    assert bits_equal(on_npu[7].cpu(), cache[5]) and bits_equal(on_npu[3].cpu(), cache[6])


def test_the_bytes_form_on_one_npu_reads_nothing_back() -> None:
    source = random_bits((6, 64), torch.int8, 4)
    target = random_bits((3, 32), torch.bfloat16, 5)
    mapping = torch.tensor([[5, 2], [0, 0]], dtype=torch.int32)
    expected = target.clone()
    reference.swap_blocks_bytes(source, expected, 64, mapping)
    src, dst = source.to("npu:0"), target.to("npu:0")
    with fake_npu.counting() as seen:
        ascend_kv.swap_blocks(src, dst, 64, mapping)
    assert seen.transfers == 0 and seen.blocking_uploads == 0
    assert bits_equal(dst.cpu(), expected)


def test_bytes_form_rules_at_their_boundaries() -> None:
    src = random_bits((4, 64), torch.uint8, 6)                        # 256 bytes
    dst = random_bits((2, 50), torch.float16, 7)                      # 200 bytes
    for block, mapping, message in (
        (1, torch.tensor([[255, 199]]), None),
        (0, torch.tensor([[0, 0]]), r"block_size_in_bytes must be a positive number of bytes, got 0"),
        (100, torch.tensor([[1, 1]]), None),                          # (1 + 1) * 100 <= 200
        (100, torch.tensor([[1, 2]]), r"block_mapping\[0, 1\] = 2 is out of range: dst holds 2 blocks of 100 bytes"),
        (64, torch.tensor([[3, 0]]), None),
        (64, torch.tensor([[0, 0], [4, 1]]), r"block_mapping\[1, 0\] = 4 is out of range: src holds 4 blocks of 64"),
        (64, torch.tensor([[-1, 0]]), r"block_mapping\[0, 0\] = -1 is out of range"),
        (64, torch.tensor([[0, 1], [2, 1]]), r"block_mapping\[1, 1\] = 1 repeats block_mapping\[0, 1\]"),
        (64, torch.tensor([0, 1]), r"block_mapping must be a 2-D tensor \[n, 2\]"),
        (200, torch.tensor([[0, 0]]), None),                           # dst's whole 200 bytes: one block
        (201, torch.tensor([[0, 0]]), (r"^block_size_in_bytes = 201 is larger than dst \(200 bytes\): dst holds no "
                                      r"whole block$")),
        (257, torch.tensor([[0, 0]]), r"^block_size_in_bytes = 257 is larger than src \(256 bytes\)"),
    ):
        judge(lambda b=block, m=mapping: ascend_kv.swap_blocks(src, dst, b, m), [dst], message)
    for call, message, error in (
        (lambda: ascend_kv.swap_blocks(src, dst, 8, torch.tensor([[0.0, 1.0]])), r"block_mapping must have dtype",
         TypeError),
        (lambda: ascend_kv.swap_blocks(src, dst, True, torch.tensor([[0, 1]])), r"block_size_in_bytes must be an int",
         TypeError),
        (lambda: ascend_kv.swap_blocks(src, dst, torch.tensor(8), torch.tensor([[0, 1]])),
         r"block_size_in_bytes must be an int", TypeError),
        (lambda: ascend_kv.swap_blocks(src.t(), dst, 8, torch.tensor([[0, 1]])), r"src must be contiguous", ValueError),
        (lambda: ascend_kv.swap_blocks(src, dst[:, :10], 8, torch.tensor([[0, 1]])), r"dst must be contiguous",
         ValueError),
        (lambda: ascend_kv.swap_blocks(src, dst, 8, torch.tensor([[0, 1]], device="npu:0")),
         r"block_mapping must be on the host", ValueError),
        (lambda: ascend_kv.swap_blocks(src, src[2:], 8, torch.tensor([[0, 1]])), r"dst shares memory with src",
         ValueError),
        (lambda: ascend_kv.swap_blocks(src, dst, 8, torch.tensor([[0, 1]]), 3), r"swap_blocks takes 3 or 4 arguments",
         TypeError),
        (lambda: ascend_kv.swap_blocks(src, dst, block_size_in_bytes=8), r"missing argument 'block_mapping'",
         TypeError),
    ):
        judge(call, [dst, src], message, error)


def swap_step(gpu: torch.Tensor, cpu: torch.Tensor, mapping: torch.Tensor) -> torch.Tensor:
    ascend_kv.swap_blocks(gpu, cpu, 512, mapping)
    ascend_kv.copy_blocks([gpu], [], mapping.flip(1), simultaneous=True)
    return cpu[0].flip(0)


def test_compiled_bytes_form_matches_eager() -> None:
    require_compiled_as_eager(swap_step, lambda: [random_bits((8, 16, 2, 8), torch.float16, 1),
                                                  random_bits((3, 2, 16, 2, 8), torch.float16, 2),
                                                  torch.tensor([[5, 0], [0, 5], [2, 1]])])


def test_opcheck_bytes_form() -> None:
    torch.library.opcheck(torch.ops.ascend_kv.swap_blocks.bytes,
                          (torch.randn(6, 4, 16).half(), torch.zeros(3, 4, 16), 128, torch.tensor([[5, 0], [1, 2]])))


# ----------------------------------------------------------------------------- swap_blocks_batch


def pointers(t: torch.Tensor, offsets: list[int]) -> torch.Tensor:
    return torch.tensor([t.data_ptr() + o for o in offsets], dtype=torch.int64)


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[int], list[int], list[int]]:
    """Copies between two 256-byte buffers: destinations pairwise apart (chunks of 16 bytes, each used once)."""
    chunks = list(draw(st.permutations(range(16))))[: draw(st.integers(0, 16))]
    sizes = [draw(st.integers(0, 16)) for _ in chunks]
    sources = [draw(st.integers(0, 240)) for _ in chunks]
    return sources, [16 * c for c in chunks], sizes


@given(case=batches())
def test_the_batch_matches_the_reference(case: tuple[list[int], list[int], list[int]]) -> None:
    sources, destinations, sizes = case
    src, dst = random_bits((256,), torch.uint8, 1), random_bits((256,), torch.uint8, 2)
    expected = dst.clone()
    lengths = torch.tensor(sizes, dtype=torch.int64)
    reference.swap_blocks_batch(pointers(src, sources), pointers(expected, destinations), lengths)
    ascend_kv.swap_blocks_batch(pointers(src, sources), pointers(dst, destinations), lengths)
    assert bits_equal(dst, expected)


@pytest.mark.parametrize("call", ["vLLM", "vllm-ascend 4th positional", "keyword", "facade"])
def test_every_call_form_copies(call: str) -> None:
    src = torch.arange(64, dtype=torch.uint8)
    dst = torch.zeros(64, dtype=torch.uint8)
    args = (pointers(src, [0, 32]), pointers(dst, [8, 40]), torch.tensor([8, 4]))
    if call == "vLLM":
        ascend_kv.swap_blocks_batch(*args, True)
    elif call == "vllm-ascend 4th positional":
        ascend_kv.swap_blocks_batch(*args, 1)
    elif call == "keyword":
        ascend_kv.swap_blocks_batch(*args, direction=2)
    else:
        from ascend_kv.compat import torch_npu
        torch_npu.swap_blocks_batch(*args, 1)
    assert dst[8:16].tolist() == list(range(8)) and dst[40:44].tolist() == [32, 33, 34, 35]
    assert int(dst[:8].sum()) == 0 and int(dst[16:40].sum()) == 0 and int(dst[44:].sum()) == 0


def test_batch_rules_at_their_boundaries() -> None:
    src = random_bits((64,), torch.uint8, 3)
    dst = random_bits((64,), torch.uint8, 4)
    big = torch.tensor([8, 8])
    for sources, destinations, sizes, message in (
        ([0, 8], [0, 8], [8, 8], None),                                          # touching, not meeting
        ([0, 8], [0, 7], [8, 8], r"dst_ptrs\[1\] = 0x[0-9a-f]+ \(8 bytes\) overlaps the destination of copy 0"),
        ([0, 8], [0, 7], [8, 0], None),                                          # a zero-size copy meets nothing
        ([0, 8], [0, 8], [8, -1], r"sizes\[1\] = -1 must be >= 0 bytes"),
    ):
        judge(lambda s=sources, d=destinations, n=sizes: ascend_kv.swap_blocks_batch(
            pointers(src, s), pointers(dst, d), torch.tensor(n)), [dst], message)
    same = dst
    judge(lambda: ascend_kv.swap_blocks_batch(pointers(same, [0, 16]), pointers(same, [16, 40]), big), [same],
          r"dst_ptrs\[0\] = 0x[0-9a-f]+ \(8 bytes\) overlaps the source of copy 1")
    judge(lambda: ascend_kv.swap_blocks_batch(pointers(same, [0, 16]), pointers(same, [8, 24]), big), [same], None)
    for call, message, error in (
        (lambda: ascend_kv.swap_blocks_batch(pointers(src, [0]).int(), pointers(dst, [0]), torch.tensor([1])),
         r"src_ptrs must have dtype int64, got int32", TypeError),
        (lambda: ascend_kv.swap_blocks_batch(pointers(src, [0]), pointers(dst, [0, 8]), torch.tensor([1])),
         r"dst_ptrs must have one entry per copy \(1, as src_ptrs\), got 2", ValueError),
        (lambda: ascend_kv.swap_blocks_batch(pointers(src, [0]), pointers(dst, [0]), torch.tensor([1, 1])),
         r"sizes must have one entry per copy", ValueError),
        (lambda: ascend_kv.swap_blocks_batch(pointers(src, [0]), pointers(dst, [0]), torch.tensor([[1]])),
         r"sizes must be a 1-D tensor", ValueError),
        (lambda: ascend_kv.swap_blocks_batch(pointers(src, [0]), pointers(dst, [0]), torch.tensor([1]), direction=3),
         r"direction must be None, 0 \(host to device\), 1 \(device to host\) or 2 \(device to device\), got 3",
         ValueError),
        (lambda: ascend_kv.swap_blocks_batch(pointers(src, [0]), pointers(dst, [0]), torch.tensor([1]), -2),
         r"direction must be None, 0 .* got -2", ValueError),                   # -1 is the operator's None
        (lambda: ascend_kv.swap_blocks_batch(pointers(src, [0]), pointers(dst, [0]), torch.tensor([1]), 1,
                                             direction=1), r"direction twice", TypeError),
        (lambda: ascend_kv.swap_blocks_batch(pointers(src, [0]), pointers(dst, [0]), torch.tensor([1], device="npu:0")),
         r"sizes must be on the host", ValueError),
    ):
        judge(call, [dst], message, error)


def test_the_batch_reads_and_waits_for_nothing_on_the_fake_npu() -> None:
    src = random_bits((64,), torch.uint8, 5)
    dst = torch.zeros(64, dtype=torch.uint8)
    with fake_npu.counting() as seen:
        ascend_kv.swap_blocks_batch(pointers(src, [0, 16]), pointers(dst, [32, 0]), torch.tensor([16, 8]), 1)
    assert seen.transfers == 0 and seen.blocking_uploads == 0
    assert bits_equal(dst[32:48], src[:16]) and bits_equal(dst[:8], src[16:24])


def test_a_compiled_step_keeps_the_batch_and_copies_what_eager_does() -> None:
    """The operator writes through addresses, not through a tensor: a compiled graph must not drop it."""
    outputs = []
    for compiled in (False, True):
        src, dst = random_bits((64,), torch.uint8, 6), torch.zeros(64, dtype=torch.uint8)
        host = torch.zeros(2, 32, dtype=torch.uint8)

        def step(a: torch.Tensor, b: torch.Tensor, n: torch.Tensor, mapping: torch.Tensor, source: torch.Tensor,
                 target: torch.Tensor) -> None:
            ascend_kv.swap_blocks_batch(a, b, n, 1)
            ascend_kv.swap_blocks(source, target, 16, mapping)

        run = torch.compile(step, fullgraph=True) if compiled else step
        torch._dynamo.reset()
        run(pointers(src, [0, 32]), pointers(dst, [8, 40]), torch.tensor([8, 4]), torch.tensor([[3, 0], [0, 3]]), src,
            host)
        outputs.append((dst, host))
    assert bits_equal(outputs[0][0], outputs[1][0]) and bits_equal(outputs[0][1], outputs[1][1])
    assert int(outputs[1][0][8:16].ne(0).sum()) + int(outputs[1][0][40:44].ne(0).sum()) > 0
