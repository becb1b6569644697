"""The instrument catches what it must: a kernel with one planted bug is stopped by the host model,
with a message naming the tensor and the offset.

The kernel sources are copied, mutated, built by the sim backend's own builder (ascend_kv/operators/build.py
over ``sim.definition()`` of the copy; cached like any build, by the sources' hash, so a warm machine
builds nothing) and run in a child process (a process can load one ``ascend_kv_host`` library: each
registers the host build's test instruments). The child registers the mutant's kernel table as the
sim backend's and makes the calls through the public functions with the sim requested; the calls
that need index values nobody checked (an out-of-range block) run on the fake NPU of tests/fake_npu,
whose kernel library is the mutant. The child's process ends with it, so the parent's tables are
never replaced.
Mutants: an off-by-one row in each kernel's offsets (reads past new_kv, writes past key in ND and
NZ, writes past key_cache in ND and NZ), a byte stride replaced by the row size (which lands in
the gaps of strided views), an ND row of 14 bytes stored with DataCopy (whole 32-byte blocks only)
instead of DataCopyPad, unaligned rows assumed packed in UB (DataCopyPad starts each on a 32-byte
boundary), reshape_and_cache splitting its tokens over the cores instead of its slots (a slot named
twice is then written by two cores), gather_blocks reading one block too far, block_copy writing one block too far (in both modes), block_copy letting an
out-of-range destination through and block_copy making simultaneous copies one after another (a cycle
then comes out wrong), the staged index window read without its MTE2_S flag, rows moved
in DataCopyPad blocks longer than the documented 65,535 bytes, a kernel that no longer declares
itself vector-only, batch_memcpy moving a copy's tail as a whole UB buffer (past its range) and
copying every chunk on every core (a race), and the state-slot gather writing a slot's rows at the
state's stride instead of packed and letting an out-of-range slot id through. The unmutated
library passes the same calls.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ascend_kv.backends import sim
from ascend_kv.operators.build import build as build_library

pytestmark = pytest.mark.slow  # each mutant is a build of the kernels

MUTANTS = {
    "offsets": [
        ("kernels/kv_cache.cpp", "const uint64_t srcRow = prefix + first;", "const uint64_t srcRow = prefix + first + 1;"),
        ("kernels/paged_cache_load.cpp", "CopyRows(queue_, pair.rows[outRow * pair.rowStride]",
         "CopyRows(queue_, pair.rows[(outRow + 1) * pair.rowStride]"),
        ("kernels/paged_cache_load.cpp", "WriteRows(pair.rows[(outRow + done) * pair.rowStride",
         "WriteRows(pair.rows[(outRow + done + 1) * pair.rowStride"),
        ("kernels/reshape_and_cache.cpp", "block * target.blockStride + (position + done) * target.slotStride;",
         "block * target.blockStride + (position + done + 1) * target.slotStride;"),
    ],
    "strides-and-task-type": [
        ("kernels/kv_cache.cpp", "dstPos * t_.pastSeqStride", "dstPos * t_.rowBytes"),
        ("kernels/paged_cache_load.cpp", "pair.cache[tokenAt], pair.slotStride,", "pair.cache[tokenAt], pair.rowBytes,"),
        ("kernels/kv_cache.cpp", "    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);\n", ""),
        ("kernels/reshape_and_cache.cpp", "WriteRows(target.cache[tokenAt + offset], buffer, target.slotStride, group, bytes);",
         "AscendC::DataCopy(target.cache[tokenAt + offset], buffer, static_cast<uint32_t>(bytes));"),
    ],
    "packed-ub-rows": [
        ("kernels/reshape_and_cache.cpp", "const uint64_t ubRow = UbPitch(target.rowBytes);",
         "const uint64_t ubRow = target.rowBytes;"),
    ],
    "even-token-split": [  # the split of the tokens the kernel had before every slot had one core
        ("kernels/reshape_and_cache.cpp", "if ((block * t_.blockStripes + stripe) % t_.usedCores == core) {",
         "if (i * t_.usedCores / t_.tokens == core) {"),
    ],
    "uncapped-pad-blocks": [  # rows moved in DataCopyPad blocks as long as the 21-bit field holds
        ("tiling.h", "constexpr uint64_t kMaxPadBlockBytes = 65535;", "constexpr uint64_t kMaxPadBlockBytes = 2097151;"),
    ],
    "block-copy-off-by-one": [
        ("kernels/block_copy.cpp", "WriteRows(cache_.gm[to * cache_.blockStride + offset], buffer",
         "WriteRows(cache_.gm[(to + 1) * cache_.blockStride + offset], buffer"),
        ("kernels/block_copy.cpp", "WriteRows(cache_.gm[to * cache_.blockStride + offset], slot",
         "WriteRows(cache_.gm[(to + 1) * cache_.blockStride + offset], slot"),
    ],
    "transfer-off-by-one": [  # gather_blocks reading the block after the one named
        ("kernels/transfer_blocks.cpp", "CopyChunk(static_cast<uint64_t>(id) * t_.cacheBlockStride,",
         "CopyChunk((static_cast<uint64_t>(id) + 1) * t_.cacheBlockStride,"),
    ],
    "block-copy-past-the-cache": [  # an out-of-range destination let through
        ("kernels/block_copy.cpp", "static_cast<uint64_t>(d) >= t_.numBlocks", "static_cast<uint64_t>(d) > t_.numBlocks"),
    ],
    "block-copy-sequential": [  # simultaneous copies made one after another (a chunk written before the next read)
        ("kernels/block_copy.cpp", "                CopyChunkOfEveryCopy(item - first);\n",
         ("                for (uint64_t copy = 0; copy < t_.copies; ++copy) {\n"
          "                    uint64_t from = 0;\n"
          "                    uint64_t to = 0;\n"
          "                    if (Blocks(copy, from, to)) {\n"
          "                        CopyChunk(copy, from, to, item - first);\n"
          "                    }\n"
          "                }\n")),
    ],
    "batch-memcpy-unclamped-tail": [  # every chunk a whole UB buffer, the last one too
        ("kernels/batch_memcpy.cpp", "const uint64_t n = MinU64(t_.chunkBytes, bytes - at);",
         "const uint64_t n = t_.chunkBytes;"),
    ],
    "batch-memcpy-every-core-every-chunk": [  # the chunks not shared out: each core copies all of them
        ("kernels/batch_memcpy.cpp", "uint64_t k = (core + cores - i % cores) % cores;", "uint64_t k = 0;"),
        ("kernels/batch_memcpy.cpp", "for (; k < chunks; k += cores) {", "for (; k < chunks; ++k) {"),
    ],
    "transfer-slots-row-pitch": [  # a gathered slot's rows written at the state's row stride, not packed
        ("kernels/block_copy.cpp", "WriteRows(buffer_[rowAt], buffer, cache_.rowBytes,",
         "WriteRows(buffer_[rowAt], buffer, cache_.rowStride,"),
    ],
    "transfer-slots-past-the-state": [  # an out-of-range slot id let through
        ("kernels/block_copy.cpp", "if (b < 0 || static_cast<uint64_t>(b) >= t_.numBlocks) {",
         "if (b < 0 || static_cast<uint64_t>(b) > t_.numBlocks) {"),
    ],
    "unsynchronised-staging": [
        ("kernels/copy_common.h", ("        AscendC::SetFlag<AscendC::HardEvent::MTE2_S>(after);\n"
                                   "        AscendC::WaitFlag<AscendC::HardEvent::MTE2_S>(after);\n"), ""),
    ],
}

# The calls, run in a child process against one library: prints "ok" or the error message.
CHILD = r"""
import os, sys
from pathlib import Path
import torch
import ascend_kv
from ascend_kv.backends import npu, sim
library, call, tests = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
torch.ops.load_library(str(library))
torch.ops.ascend_kv._use_kernel_library(npu.table_address(library), "sim")  # the sim backend runs this library
sim._loaded = library  # so the policy never loads the real one beside it
os.environ[npu.LIBRARY_ENV] = str(library)  # and on the fake NPU, it is the kernel library
os.environ["ASCEND_KV_SOC"] = "Ascend910B3"
h = torch.float16
def kv_dense():
    ascend_kv.kv_cache(torch.ones(5, 64, dtype=h), 1, torch.zeros(2, 1, 16, 64, dtype=h), torch.tensor([5]), torch.tensor([5]))
def kv_strided():
    past = torch.zeros(2, 1, 16, 96, dtype=h)[..., 16:80]
    ascend_kv.kv_cache(torch.ones(5, 64, dtype=h), 1, past, torch.tensor([10]), torch.tensor([5]))
def paged(layout, cache_shape, row_shape):
    cache = torch.ones(cache_shape, dtype=h)
    out = lambda: torch.zeros((7, *row_shape), dtype=h)
    ascend_kv.paged_cache_load(cache, cache, torch.tensor([[1]]), torch.tensor([7]), kv_cache_cfg=layout, key=out(),
                               value=out())
def paged_mla():
    buffer = torch.ones(3, 16, 1, 576, dtype=h)
    ascend_kv.paged_cache_load(buffer[..., :512], buffer[..., 512:], torch.tensor([[1]]), torch.tensor([7]),
                               kv_cache_cfg=1, key=torch.zeros(7, 1, 512, dtype=h), value=torch.zeros(7, 1, 64, dtype=h))
def reshape(layout, cache_shape, head_size, slots=(31, 0, 5, 6)):
    # slot 31 is the caches' last (2 blocks of 16); tokens in slots 31, 0, 5, 6 (runs of 1 and 2)
    cache = torch.zeros(cache_shape, dtype=h)
    key = torch.ones(len(slots), 1, head_size, dtype=h)
    if layout == "nz":
        ascend_kv.reshape_and_cache(key, key.clone(), cache, cache.clone(), torch.tensor(slots), kv_cache_cfg="nz")
    else:
        ascend_kv.reshape_and_cache(key, None, cache, None, torch.tensor(slots))
def block_copy(dst, simultaneous=False):
    # 4 blocks of 2 x 16 float16 (64 bytes each): block 0 to block `dst`, a device index nobody checked, on the
    # fake NPU (a host index out of range is refused before any kernel runs)
    sys.path.insert(0, tests)
    import fake_npu
    fake_npu.install()
    cache = torch.zeros(4, 2, 16, dtype=h, device="npu")
    with ascend_kv.use_backend("npu"):
        ascend_kv.copy_blocks([cache], [], torch.tensor([[0, dst]], device="npu"), simultaneous=simultaneous)
def gather_last():
    # block 3, the last of 4 blocks of 16 x 2 x 16 float16 (1,024 bytes each), of one key-only layer, into NZ
    cache = torch.ones(4, 16, 2, 16, dtype=h)
    ascend_kv.gather_blocks([cache], [], torch.tensor([3]), torch.zeros(1, 1, 1, 2, 16, 16, dtype=h), out_layout="nz")
def block_copy_cycle():
    # blocks 0 and 1 swapped, block 2 to 3 (a chain's tail): every source read before any write
    cache = torch.arange(4, dtype=h).repeat_interleave(32).reshape(4, 2, 16)
    ascend_kv.copy_blocks([cache], [], torch.tensor([[0, 1], [1, 0], [2, 3]]), simultaneous=True)
    got = [int(cache[b, 0, 0]) for b in range(4)]
    if got != [1, 0, 2, 2]:
        raise RuntimeError(f"simultaneous copies wrote {got}, not [1, 0, 2, 2]")
def batch_memcpy(size):
    # one copy of `size` bytes between two host tensors 96 bytes longer (the kernel over host addresses)
    src, dst = torch.ones(size + 96, dtype=torch.uint8), torch.zeros(size + 96, dtype=torch.uint8)
    ptrs = lambda t, at: torch.tensor([t.data_ptr() + at])
    ascend_kv.batch_memcpy(ptrs(src, 0), ptrs(dst, 16), torch.tensor([size], dtype=torch.int32))
    if not bool(dst[16:16 + size].eq(1).all()) or bool(dst[:16].any()) or bool(dst[16 + size:].any()):
        raise RuntimeError("batch_memcpy copied the wrong bytes")
def gather_slot_strided():
    # slot 3 of a state whose rows are the first 16 of 64 bytes (a column slice) into a packed buffer row
    state = torch.ones(4, 2, 32, dtype=h)[:, :, :8]
    ascend_kv.gather_state_slots([state], torch.tensor([3]), torch.zeros(1, 32, dtype=torch.uint8))
def gather_slot_on_device(slot):
    # slot `slot` of 4 (a device id nobody checked) on the fake NPU: 4 is out of range and skipped
    sys.path.insert(0, tests)
    import fake_npu
    fake_npu.install()
    state = torch.ones(4, 16, dtype=h, device="npu")
    with ascend_kv.use_backend("npu"):
        ascend_kv.gather_state_slots([state], torch.tensor([slot], device="npu"),
                                     torch.zeros(1, 32, dtype=torch.uint8, device="npu"))
CALLS = {"kv_dense": kv_dense, "batch_memcpy_small": lambda: batch_memcpy(70),
         "batch_memcpy_large": lambda: batch_memcpy(200000), "gather_slot_strided": gather_slot_strided,
         "gather_slot_last": lambda: gather_slot_on_device(3), "gather_slot_past": lambda: gather_slot_on_device(4), "gather_last": gather_last, "block_copy_cycle": block_copy_cycle,
         "block_copy_last_simultaneous": lambda: block_copy(3, simultaneous=True), "block_copy_last": lambda: block_copy(3), "block_copy_past": lambda: block_copy(4), "kv_strided": kv_strided, "paged_mla": paged_mla,
         "paged_nd": lambda: paged(1, (3, 16, 2, 16), (2, 16)), "paged_nz": lambda: paged(0, (3, 2, 16, 16), (32,)),
         "reshape_nd_unaligned": lambda: reshape("nd", (2, 16, 1, 7), 7),
         "reshape_nz": lambda: reshape("nz", (2, 2, 16, 16), 32),
         # one run of 4096 rows of 14 bytes: more than a UB buffer holds at 32 bytes a row
         "reshape_nd_long_run": lambda: reshape("nd", (1, 4096, 1, 7), 7, range(4096)),
         # slot 3 twice, by the first token and the last: with two cores, in the shares of both (the operator
         # refuses a host slot_mapping naming a slot twice: device slots, on the fake NPU)
         "reshape_nd_twice": lambda: reshape_on_device((3, 9, 20, 3)),
         "reshape_nd_distinct": lambda: reshape_on_device((3, 9, 20, 4)),
         # rows of 131,072 bytes: segments of a UB buffer (93,696 bytes), each more than one DataCopyPad block
         "reshape_nd_long_rows": lambda: reshape("nd", (2, 16, 1, 65536), 65536, (0, 5))}
def reshape_on_device(slots):
    sys.path.insert(0, tests)
    import fake_npu
    fake_npu.install()
    cache = torch.zeros((2, 16, 1, 7), dtype=h, device="npu")
    with ascend_kv.use_backend("npu"):
        ascend_kv.reshape_and_cache(torch.ones(len(slots), 1, 7, dtype=h, device="npu"), None, cache, None,
                                    torch.tensor(slots, device="npu"))
runs = torch.ops.ascend_kv._runs()
try:
    with ascend_kv.use_backend("sim"):
        CALLS[call]()
    ran = [a - b for a, b in zip(torch.ops.ascend_kv._runs(), runs)]
    assert ran in ([0, 1, 0, 0], [0, 0, 1, 0]), f"ran {ran}: not on the kernels"
    print("ok")
except RuntimeError as error:
    print(str(error).splitlines()[0])
"""


def build(name: str, root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The host library of ``MUTANTS[name]`` applied to a copy of the sources, built by the sim backend's builder."""
    copy = root / name
    shutil.copytree(sim.source_root(), copy)
    for path, original, mutated in MUTANTS[name]:
        text = (copy / path).read_text()
        assert text.count(original) == 1, f"{path} changed: update the mutation {original!r}"
        (copy / path).write_text(text.replace(original, mutated))
    with monkeypatch.context() as patch:
        patch.setattr(sim, "source_root", lambda: copy)
        library = sim.definition()
        assert all(copy in source.parents for source in library.sources)
        return build_library(library)


@pytest.fixture(scope="module")
def libraries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("mutants")
    with pytest.MonkeyPatch.context() as monkeypatch:
        built = {name: build(name, root, monkeypatch) for name in MUTANTS}
    return {**built, "unmutated": sim.library_path()}


def run(library: Path, call: str, cores: int = 1) -> str:
    env = {**os.environ, "ASCEND_KV_SIM_CORES": str(cores)}
    env.pop("ASCEND_KV_SIM_UB_BYTES", None)
    env.pop("ASCEND_KV_BACKEND", None)
    done = subprocess.run([sys.executable, "-c", CHILD, str(library), call, str(Path(__file__).parent)],
                          capture_output=True, text=True, env=env, check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def overrun(message: str, access: str, tensor: str) -> tuple[int, int, int]:
    """``(buffer, offset, count)`` of the model's report, which must name ``tensor``."""
    found = re.search(rf"GM {access} out of bounds: tensor '{tensor}' \(buffer of (\d+) elements\) offset (\d+) "
                      rf"count (\d+)", message)
    assert found is not None, message
    return tuple(int(n) for n in found.groups())  # type: ignore[return-value]


def test_kv_cache_row_off_by_one_reads_past_new_kv(libraries: dict[str, Path]) -> None:
    """5 rows of 64 float16 = 640 bytes; the shifted copy reads them from byte 128 (one row late)."""
    assert overrun(run(libraries["offsets"], "kv_dense"), "read", "new_kv") == (640, 128, 640)


@pytest.mark.parametrize("call", ["paged_nd", "paged_nz"])
def test_paged_row_off_by_one_writes_past_key(libraries: dict[str, Path], call: str) -> None:
    """7 rows of 32 float16 = 448 bytes; the shifted store writes past the end of ``key``."""
    buffer, offset, count = overrun(run(libraries["offsets"], call), "write", "key")
    assert buffer == 448 and offset >= 64 and offset + count > buffer


def test_kv_cache_row_size_for_the_position_stride_lands_in_a_gap(libraries: dict[str, Path]) -> None:
    """past is [.., 16:80] of 96-wide rows: positions are 192 bytes apart, not 128 (rows 5..9 written)."""
    message = run(libraries["strides-and-task-type"], "kv_strided")
    assert "write to byte" in message and "of GM tensor 'past', which belongs to none of its elements" in message


def test_paged_row_size_for_the_slot_stride_reads_the_value_columns(libraries: dict[str, Path]) -> None:
    """MLA: key_cache is the first 512 of 576 columns; slots 1152 bytes apart, rows 1024 bytes."""
    message = run(libraries["strides-and-task-type"], "paged_mla")
    assert "read of byte" in message and "of GM tensor 'key_cache', which belongs to none of its elements" in message


def test_kernel_without_its_task_type_is_stopped(libraries: dict[str, Path]) -> None:
    message = run(libraries["strides-and-task-type"], "kv_dense")
    assert "did not declare KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY)" in message


@pytest.mark.parametrize("call", ["kv_dense", "paged_nd"])
def test_staged_indices_read_without_mte2_s_are_stopped(libraries: dict[str, Path], call: str) -> None:
    message = run(libraries["unsynchronised-staging"], call)
    assert "LocalTensor::GetValue" in message and "S reads its bytes" in message and "MTE2_S" in message


@pytest.mark.parametrize("call", ["reshape_nd_unaligned", "reshape_nz"])
def test_reshape_slot_off_by_one_writes_past_key_cache(libraries: dict[str, Path], call: str) -> None:
    """Slot 31 is the last of key_cache (2 x 16 slots); one slot further is past its end."""
    buffer, offset, count = overrun(run(libraries["offsets"], call), "write", "key_cache")
    assert buffer == 2 * 16 * (14 if call == "reshape_nd_unaligned" else 64) and offset + count > buffer


def test_reshape_unaligned_row_stored_with_data_copy_is_stopped(libraries: dict[str, Path]) -> None:
    """A 7-element float16 row is 14 bytes: DataCopy moves whole 32-byte blocks only."""
    message = run(libraries["strides-and-task-type"], "reshape_nd_unaligned")
    assert "DataCopy: count 14 * sizeof(T) 1 = 14 bytes is not a multiple of 32" in message


def test_reshape_unaligned_rows_assumed_packed_in_ub_are_stopped(libraries: dict[str, Path]) -> None:
    """Rows of 14 bytes counted 14 bytes apart in UB, not 32 (DataCopyPad starts each on a 32-byte
    boundary): a buffer seems to hold more rows than it does, and the strided read overruns it."""
    message = run(libraries["packed-ub-rows"], "reshape_nd_long_run")
    assert "DataCopyPad: UB side spans" in message and "bytes but the LocalTensor" in message


def test_reshape_even_token_split_with_a_slot_named_twice_is_a_race(libraries: dict[str, Path]) -> None:
    """Splitting the tokens instead of the slots is right for distinct slots; a slot named by tokens
    of two cores' shares is written by both, a cross-core race on the hardware."""
    assert run(libraries["even-token-split"], "reshape_nd_distinct", cores=2) == "ok"
    message = run(libraries["even-token-split"], "reshape_nd_twice", cores=2)
    assert ("cross-core race on GM tensor 'key_cache' bytes [42, 56): written by core 0 and written by core 1"
            in message)


def test_pad_blocks_beyond_the_documented_65535_bytes_are_stopped(libraries: dict[str, Path]) -> None:
    """DataCopyPad's blockLen is documented up to 65,535 bytes; the kernels split longer rows."""
    message = run(libraries["uncapped-pad-blocks"], "reshape_nd_long_rows")
    assert "DataCopyPad: DataCopyExtParams.blockLen 93696 bytes out of range [0, 65535]" in message


def test_block_copy_off_by_one_block_writes_past_the_cache(libraries: dict[str, Path]) -> None:
    """Block 3 is the last of 4 blocks of 64 bytes; one block further is past the cache's 256 bytes."""
    message = run(libraries["block-copy-off-by-one"], "block_copy_last")
    buffer, offset, count = overrun(message, "write", re.escape("caches[0]"))
    assert (buffer, offset, count) == (256, 256, 64)


def test_transfer_off_by_one_block_reads_past_the_cache(libraries: dict[str, Path]) -> None:
    """Block 3 is the last of 4 blocks of 1,024 bytes; the block after it is past the cache's 4,096 bytes."""
    message = run(libraries["transfer-off-by-one"], "gather_last")
    # the first chunk of the NZ gather: 16 tokens' first 32-byte piece, 64 bytes apart
    assert overrun(message, "read", re.escape("caches[0]")) == (4096, 4096, 992)


def test_simultaneous_block_copy_off_by_one_block_writes_past_the_cache(libraries: dict[str, Path]) -> None:
    """The same in the simultaneous mode's write from its UB slot."""
    message = run(libraries["block-copy-off-by-one"], "block_copy_last_simultaneous")
    assert overrun(message, "write", re.escape("caches[0]")) == (256, 256, 64)


def test_block_copy_of_an_out_of_range_destination_is_stopped(libraries: dict[str, Path]) -> None:
    """dst = 4 = num_blocks (a device index nobody checked) must be skipped; let through, it lands past the cache."""
    assert run(libraries["block-copy-past-the-cache"], "block_copy_last") == "ok"
    message = run(libraries["block-copy-past-the-cache"], "block_copy_past")
    buffer, offset, count = overrun(message, "write", re.escape("caches[0]"))
    assert (buffer, offset, count) == (256, 256, 64)


@pytest.mark.parametrize("cores", [1, 2])
def test_block_copy_made_sequential_breaks_a_cycle(libraries: dict[str, Path], cores: int) -> None:
    """Copies one after another: block 1 takes block 0, then block 0 takes block 1's new bytes (block 0's)."""
    assert run(libraries["block-copy-sequential"], "block_copy_cycle", cores) == (
        "simultaneous copies wrote [0, 0, 2, 2], not [1, 0, 2, 2]")


def test_batch_memcpy_tail_as_a_whole_buffer_reads_past_the_source(libraries: dict[str, Path]) -> None:
    """A copy of 70 bytes moved as one whole UB buffer: the read runs past the 70-byte source range."""
    buffer, offset, count = overrun(run(libraries["batch-memcpy-unclamped-tail"], "batch_memcpy_small"), "read",
                                    re.escape("src_ptrs[0]"))
    assert (buffer, offset) == (70, 0) and count > buffer


def test_batch_memcpy_chunks_copied_by_every_core_race(libraries: dict[str, Path]) -> None:
    """Chunks not shared out: right on one core, a cross-core race on the destination with two."""
    assert run(libraries["batch-memcpy-every-core-every-chunk"], "batch_memcpy_large", cores=1) == "ok"
    message = run(libraries["batch-memcpy-every-core-every-chunk"], "batch_memcpy_large", cores=2)
    assert "cross-core race on GM tensor 'dst_ptrs[0]'" in message


def test_gathered_slot_rows_at_the_state_stride_overrun_the_buffer(libraries: dict[str, Path]) -> None:
    """Two rows of 16 bytes packed into a 32-byte buffer row; at the state's 64-byte stride the second lands past it."""
    message = run(libraries["transfer-slots-row-pitch"], "gather_slot_strided")
    assert "out of bounds: tensor 'out'" in message or "overruns" in message, message


def test_a_slot_id_past_the_state_is_stopped(libraries: dict[str, Path]) -> None:
    """slot 4 of 4 (a device id nobody checked) must be skipped; let through, the read lands past the state."""
    assert run(libraries["transfer-slots-past-the-state"], "gather_slot_last") == "ok"
    message = run(libraries["transfer-slots-past-the-state"], "gather_slot_past")
    assert overrun(message, "read", re.escape("caches[0]")) == (128, 128, 32)


@pytest.mark.parametrize("cores", [1, 2])
@pytest.mark.parametrize("call", ["batch_memcpy_small", "batch_memcpy_large", "gather_slot_strided",
                                  "gather_slot_last", "gather_slot_past", "gather_last", "block_copy_cycle", "block_copy_last_simultaneous", "block_copy_last", "block_copy_past", "kv_dense", "kv_strided", "paged_nd", "paged_nz",
                                  "paged_mla", "reshape_nd_unaligned", "reshape_nz", "reshape_nd_long_run",
                                  "reshape_nd_twice", "reshape_nd_distinct", "reshape_nd_long_rows"])
def test_the_unmutated_kernels_pass_the_same_calls(libraries: dict[str, Path], call: str, cores: int) -> None:
    assert run(libraries["unmutated"], call, cores) == "ok"
