"""The AscendC host model (ascendc/sim/include) is a test instrument: it must run correct kernels
bit-exactly and reject each misuse with a message naming the tensor/buffer, the offset and the rule.

One C++ driver (ascendc/sim/tests/model_cases.cpp) holds every case; it is compiled once per
session and run as ``model_cases <case> [numBlocks] [ubBytes]``.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INCLUDE = ROOT / "ascendc" / "sim" / "include"
DRIVER = ROOT / "ascendc" / "sim" / "tests" / "model_cases.cpp"

OK, MODEL_ERROR, CPP_ERROR, BAD_ARGUMENTS = 0, 1, 2, 3


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cxx = shutil.which("g++")
    assert cxx is not None, "the host-model tests need g++ on PATH"
    exe = tmp_path_factory.mktemp("host_model") / "model_cases"
    cmd = [cxx, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-I", str(INCLUDE), str(DRIVER), "-o", str(exe)]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return exe


def run(driver: Path, case: str, blocks: int = 1, ub: int | None = None) -> dict[str, str]:
    args = [str(driver), case, str(blocks)] + ([str(ub)] if ub is not None else [])
    done = subprocess.run(args, check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    out = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    out["rc"] = int(out["rc"])
    return out


@pytest.mark.parametrize(
    ("case", "blocks"),
    [
        ("queue_copy", 1),
        ("queue_copy", 2),
        ("queue_copy", 4),
        ("flag_copy", 1),
        ("flag_copy", 8),
        ("gap_copy", 1),
        ("pad_copy", 1),
        ("pad_fill", 1),
        ("view_copy", 1),
    ],
)
def test_correct_kernels_copy_bit_exactly(driver: Path, case: str, blocks: int) -> None:
    out = run(driver, case, blocks)
    assert (out["rc"], out["msg"], out["equal"]) == (OK, "", "1")


def test_ub_capacity_is_set_by_the_launcher(driver: Path) -> None:
    # queue_copy takes 2 buffers of 1 KB: fits in 2 KB of UB, not in 2 KB - 32 B
    assert run(driver, "queue_copy", 2, ub=2048)["equal"] == "1"
    out = run(driver, "queue_copy", 2, ub=2048 - 32)
    assert out["rc"] == MODEL_ERROR
    assert "UB over-allocation" in out["msg"] and "2016 UB bytes" in out["msg"]


MISUSE = {
    # case: (numBlocks, fragments the message must contain)
    "ub_overalloc": (1, ["UB over-allocation", "num=2, len=102400", "needs 204800 bytes", "of 188160 UB bytes"]),
    "misaligned_ub": (1, ["DataCopy", "UB address not 32-byte aligned", "buffer 0 at byte offset 16"]),
    "count_not_32b": (1, ["DataCopy", "count 12", "48 bytes is not a multiple of 32"]),
    "gm_read_oob": (1, ["DataCopy GM read out of bounds: tensor 'src' (buffer of 4096 elements) offset 4080 count 32"]),
    "gm_write_oob": (
        1,
        ["DataCopy GM write out of bounds: tensor 'dst' (buffer of 4096 elements) offset 4088 count 32"],
    ),
    "gm_getvalue_oob": (1, ["GlobalTensor::GetValue GM read out of bounds: tensor 'src'", "offset 4096 count 1"]),
    "gm_setvalue_oob": (1, ["GlobalTensor::SetValue GM write out of bounds: tensor 'dst'", "offset 4096 count 1"]),
    "block_count_4096": (1, ["DataCopyParams.blockCount 4096 out of range [0, 4095]"]),
    "count_over_blocklen": (1, ["DataCopy: count 524288 moves 65536 blocks of 32 B, more than 65535"]),
    "ub_overrun": (1, ["UB side spans 2048 bytes", "has 1024 bytes"]),
    "unpaired_setflag": (1, ["kernel returned with SetFlag<HardEvent::MTE2_MTE3>(0) never waited"]),
    "wait_without_set": (1, ["WaitFlag<HardEvent::MTE3_MTE2>(1) without a matching SetFlag"]),
    "wrong_flag_id": (1, ["WaitFlag<HardEvent::MTE2_MTE3>(1) without a matching SetFlag"]),
    "double_setflag": (1, ["SetFlag<HardEvent::MTE2_MTE3>(2) while the previous SetFlag"]),
    "event_id_8": (1, ["SetFlag<HardEvent::MTE2_MTE3>(8): event id out of range [0, 7]"]),
    "deque_empty": (1, ["DeQue from an empty queue", "TQueBind<VECIN,VECOUT,1> #0"]),
    "alloc_beyond_num": (1, ["AllocTensor on TQueBind<VECIN,VECOUT,1> #0: all 2 buffers are in use"]),
    "enque_beyond_depth": (1, ["EnQue on TQueBind<VECIN,VECOUT,1> #0", "its depth is 1"]),
    "free_foreign": (1, ["FreeTensor on TQueBind<VECIN,VECOUT,1> #0", "belongs to TQueBind<VECIN,VECOUT,1> #1"]),
    "not_freed": (1, ["kernel returned with TQueBind<VECIN,VECOUT,1> #0 buffer 0 not freed"]),
    "use_after_free": (1, ["DataCopy", "buffer 0 used after FreeTensor"]),
    "use_while_enqueued": (1, ["DataCopy", "buffer 0 used while enqueued"]),
    "raw_no_sync": (1, ["MTE3 reads its bytes [0, 32) still being written by MTE2", "HardEvent::MTE2_MTE3"]),
    "war_no_sync": (1, ["MTE2 overwrites its bytes [0, 32) still being read by MTE3", "HardEvent::MTE3_MTE2"]),
    "scalar_read_no_sync": (1, ["LocalTensor::GetValue", "S reads its bytes", "written by MTE2", "MTE2_S"]),
    "write_input": (1, ["write into input GM tensor 'src' at byte 0"]),
    "setglobalbuffer_outside": (1, ["SetGlobalBuffer", "at byte 32 of GM tensor 'src'", "overruns the allocation"]),
    # two cores write the same bytes (they may end up mixing both writes), or one reads what another writes
    "cross_core_race": (2, ["cross-core race on GM tensor 'dst' bytes [0, 128): written by core 0 and written by core 1"]),
    "cross_core_read_race": (2, ["cross-core race on GM tensor 'dst' bytes [0, 128): written by core 0 and read by core 1"]),
    "pad_over_32": (1, ["DataCopyPad", "rightPadding 9 elements exceed 32 bytes"]),
    "pad_len_not_elem": (1, ["DataCopyPad", "blockLen 6 bytes is not a whole number of 4-byte elements"]),
    "getvalue_ub_oob": (1, ["LocalTensor::GetValue: index 256 out of bounds", "256 elements"]),
    "gm_misaligned": (1, ["DataCopy: GM address of tensor 'src'", "not aligned to the 4-byte element type"]),
    "vecin_copy_out": (1, ["DataCopy on TQue<VECIN,1>", "MTE3 reads its bytes [0, 32)", "written by MTE2"]),
    "cube_event": (1, ["SetFlag<HardEvent::MTE3_MTE1>: event not available on a vector core"]),
    "second_tpipe": (1, ["a second TPipe object on one core"]),
    "position_limit": (1, ["InitBuffer(TQue<VECIN,1>, num=3)", "would hold 9 buffers; at most 8 per position"]),
    # a staged window refilled while the scalar unit still reads it (the old form had a barrier)
    "restage_without_s_mte2": (1, ["MTE2 overwrites its bytes [0, 32) still being read by S", "HardEvent::S_MTE2"]),
    "task_type_aic": (1, ["KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY): the host model runs vector cores only"]),
    "undeclared_task_type": (1, ["did not declare KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY)"]),
    # strided views: two views of one buffer, interleaved block by block
    "view_gap_read": (1, ["DataCopy: read of byte 32 of GM tensor 'k', which belongs to none of its elements"]),
    "view_write_through_other": (1, ["DataCopyPad: write to byte 32 of GM tensor 'k', which belongs to none of its"]),
}


@pytest.mark.parametrize("case", sorted(MISUSE))
def test_misuse_is_rejected_with_a_precise_message(driver: Path, case: str) -> None:
    blocks, fragments = MISUSE[case]
    out = run(driver, case, blocks)
    assert out["rc"] == MODEL_ERROR, out
    for fragment in fragments:
        assert fragment in out["msg"], (fragment, out["msg"])


def test_pad_block_length_is_capped_at_the_documented_65535_bytes(driver: Path) -> None:
    """DataCopyPad's blockLen is at most 65535 bytes (docs/host_model.md): the limit itself copies
    bit-exactly; one byte more is refused on the read side and on the write side, writing nothing."""
    out = run(driver, "pad_len_limit")
    assert (out["rc"], out["msg"], out["equal"]) == (OK, "", "1")
    for case in ("pad_read_over_limit", "pad_write_over_limit"):
        out = run(driver, case)
        assert out["rc"] == MODEL_ERROR and out["equal"] == "0", out
        assert "DataCopyPad: DataCopyExtParams.blockLen 65536 bytes out of range [0, 65535]" in out["msg"], out


def test_error_names_the_core(driver: Path) -> None:
    assert run(driver, "gm_read_oob", 3)["msg"].startswith("core 0 of 3: ")


def test_model_stops_before_the_bad_access_writes(driver: Path) -> None:
    # the out-of-bounds write is rejected before anything reaches GM
    assert run(driver, "gm_write_oob")["dst0"] == "11111111"


def test_written_views_may_not_share_elements(driver: Path) -> None:
    """Interleaved views are fine (view_copy); a written view whose elements another view also
    holds is refused before the kernel runs."""
    out = run(driver, "view_overlapping_outputs")
    assert out["rc"] == BAD_ARGUMENTS and "GM regions 'k' and 'v' overlap (their elements share byte 32 of 'k')" in out["msg"]


@pytest.mark.parametrize("case", ["scalar_read_synced", "barrier_all", "vv_flag_is_a_barrier", "alloc_event_id",
                                  "restage_synced"])
def test_ordered_accesses_are_accepted(driver: Path, case: str) -> None:
    out = run(driver, case)
    assert (out["rc"], out["msg"]) == (OK, "")


def test_fresh_ub_holds_garbage(driver: Path) -> None:
    out = run(driver, "garbage")
    assert (out["rc"], out["dst0"]) == (OK, "a5a5a5a5")


def test_other_cpp_exceptions_become_a_return_code(driver: Path) -> None:
    out = run(driver, "cpp_exception")
    assert out["rc"] == CPP_ERROR and "C++ exception: boom" in out["msg"]


@pytest.mark.parametrize(("blocks", "ub", "fragment"), [(0, None, "numBlocks 0"), (1, 1000, "ubBytes 1000")])
def test_bad_launch_arguments(driver: Path, blocks: int, ub: int | None, fragment: str) -> None:
    out = run(driver, "queue_copy", blocks, ub)
    assert out["rc"] == BAD_ARGUMENTS and fragment in out["msg"]
