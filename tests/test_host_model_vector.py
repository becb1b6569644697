"""The host model's vector instructions and the kernels' quantization row arithmetic.

One C++ driver (ascendc/sim/tests/vector_cases.cpp) runs a small kernel on one core of the model:
each Cast pair the kernels use against torch's conversion (round half to even, saturation, NaN),
and the rows of ascendc/kernels/quant_row.h against the plain torch reference of docs/semantics.md §13
(static int8 with every compute dtype, dynamic int8, dequantization, the per-head amax of the
vector unit). Each misuse of a vector instruction is stopped with its message. Three planted bugs
must be caught: the model's CAST_RINT rounding half away from zero, the kernels' zero point added
after rounding to integers, and a per-head amax that loses a head's NaN.
"""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
OK, MODEL_ERROR = 0, 1
RINT, FLOOR, CEIL, ROUND, TRUNC = 1, 2, 3, 4, 5
NAMES = {torch.float32: "float", torch.float16: "half", torch.bfloat16: "bfloat16", torch.int32: "int32",
         torch.int8: "int8"}
COMPUTE = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


def build(source_root: Path, out: Path) -> Path:
    """The driver compiled against ``source_root``'s ascendc/ tree."""
    cxx = shutil.which("g++")
    assert cxx is not None, "the host-model tests need g++ on PATH"
    include = source_root / "ascendc" / "sim" / "include"
    driver = source_root / "ascendc" / "sim" / "tests" / "vector_cases.cpp"
    cmd = [cxx, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-I", str(include), str(driver), "-o", str(out)]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(ROOT, tmp_path_factory.mktemp("vector") / "vector_cases")


def run(driver: Path, *args: object) -> dict[str, str]:
    done = subprocess.run([str(driver), *map(str, args)], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    out = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    return out


def save(path: Path, t: torch.Tensor) -> Path:
    path.write_bytes(t.contiguous().view(torch.uint8).numpy().tobytes())
    return path


def load(path: Path, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    return torch.frombuffer(bytearray(path.read_bytes()), dtype=torch.uint8).view(dtype).reshape(shape)


def cast(driver: Path, tmp: Path, x: torch.Tensor, dst: torch.dtype, mode: int) -> torch.Tensor:
    n = x.numel()
    padded = torch.cat([x, x.new_zeros(-n % 32)])  # whole 32-byte blocks for DataCopy
    out = run(driver, "cast", NAMES[dst], NAMES[x.dtype], mode, padded.numel(), save(tmp / "in", padded), tmp / "out")
    assert (out["rc"], out["msg"]) == (str(OK), "")
    return load(tmp / "out", dst, (padded.numel(),))[:n]


def specials(n: int) -> torch.Tensor:
    """n float32 values: ties at .5 of both parities, saturating, +-inf, NaN, -0, random."""
    g = torch.Generator().manual_seed(n)
    fixed = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, 127.5, -127.5, -128.5, 200.0, -300.0, 1e9, -1e9,
             float("inf"), float("-inf"), float("nan"), -0.0, 0.0, 3.4e38, 0.49999997, 1e-40]
    rest = (torch.randn(n - len(fixed), generator=g) * 100).tolist()
    return torch.tensor(fixed + rest, dtype=torch.float32)


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal element for element, NaN equal to NaN (any payload)."""
    if a.dtype.is_floating_point:
        both_nan = torch.isnan(a.float()) & torch.isnan(b.float())
        return bool(((a.float() == b.float()) | both_nan).all()) and bool(
            (torch.signbit(a.float()) == torch.signbit(b.float()))[~both_nan].all())
    return torch.equal(a, b)


# ---- Cast ----------------------------------------------------------------------------------------


def int_saturate(r: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    """A saturating float -> integer conversion of already rounded values: NaN -> 0."""
    return torch.where(torch.isnan(r), torch.zeros_like(r), r).clamp(lo, hi)


def round_away(x: torch.Tensor) -> torch.Tensor:
    return torch.tensor([math.copysign(math.floor(abs(v) + 0.5), v) if math.isfinite(v) else v
                         for v in x.double().tolist()], dtype=torch.float64)


@pytest.mark.parametrize("mode", [RINT, FLOOR, CEIL, ROUND, TRUNC])
def test_float_to_int32_rounds_by_mode_and_saturates(driver: Path, tmp_path: Path, mode: int) -> None:
    x = specials(64)
    rounded = {RINT: torch.round(x.double()), FLOOR: torch.floor(x.double()), CEIL: torch.ceil(x.double()),
               ROUND: round_away(x), TRUNC: torch.trunc(x.double())}[mode]
    want = int_saturate(rounded, -(2**31), 2**31 - 1).to(torch.int64)
    assert torch.equal(cast(driver, tmp_path, x, torch.int32, mode).long(), want)


@pytest.mark.parametrize("mode", [RINT, ROUND, TRUNC])
def test_half_to_int8_rounds_by_mode_and_saturates(driver: Path, tmp_path: Path, mode: int) -> None:
    x = specials(64).to(torch.float16)
    xd = x.double()
    rounded = {RINT: torch.round(xd), ROUND: round_away(x.float()), TRUNC: torch.trunc(xd)}[mode]
    want = int_saturate(rounded, -128, 127).to(torch.int8)
    assert torch.equal(cast(driver, tmp_path, x, torch.int8, mode), want)


@pytest.mark.parametrize("mode", [RINT, FLOOR, CEIL, ROUND, TRUNC])
def test_float_to_float_rounds_to_integers(driver: Path, tmp_path: Path, mode: int) -> None:
    x = specials(64)
    f = {RINT: torch.round, FLOOR: torch.floor, CEIL: torch.ceil, TRUNC: torch.trunc}
    want = round_away(x).float() if mode == ROUND else f[mode](x)
    assert bits_equal(cast(driver, tmp_path, x, torch.float32, mode), want)


@pytest.mark.parametrize("dst", [torch.float16, torch.bfloat16])
def test_float_to_16_bits_rounds_half_to_even(driver: Path, tmp_path: Path, dst: torch.dtype) -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.cat([specials(64), torch.randn(64, generator=g) * 1e5, torch.randn(64, generator=g) * 1e-6])
    # ties of each 16-bit type: a representable value plus half its ulp
    base = torch.tensor([1.0, 2.0, 1000.0, 3.0], dtype=dst).float()
    ulp = torch.nextafter(base.to(dst), torch.tensor(float("inf"), dtype=dst)).float() - base
    x = torch.cat([x, base + ulp / 2, base + 3 * ulp / 2, -(base + ulp / 2)])
    assert bits_equal(cast(driver, tmp_path, x, dst, RINT), x.to(dst))


@pytest.mark.parametrize("src", [torch.float16, torch.bfloat16, torch.int32, torch.int8])
def test_conversions_to_float_and_half(driver: Path, tmp_path: Path, src: torch.dtype) -> None:
    g = torch.Generator().manual_seed(2)
    if src in (torch.float16, torch.bfloat16):
        x, dst, mode = specials(64).to(src), torch.float32, 0
    elif src == torch.int32:
        x, dst, mode = torch.randint(-(2**31), 2**31 - 1, (64,), generator=g, dtype=torch.int32), torch.float32, RINT
    else:
        x, dst, mode = torch.arange(-128, 128, dtype=torch.int8), torch.float16, 0
    assert bits_equal(cast(driver, tmp_path, x, dst, mode), x.to(dst))


# ---- quantization rows (docs/semantics.md §13) -------------------------------------------------------------


def q_int8(t: torch.Tensor) -> torch.Tensor:
    r = torch.round(t).clamp(-128, 127)
    return torch.where(torch.isnan(r), torch.zeros_like(r), r).to(torch.int8)


def static_reference(x: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor | None, divide: bool) -> torch.Tensor:
    ct = torch.promote_types(x.dtype, scale.dtype)
    if offset is not None:
        ct = torch.promote_types(ct, offset.dtype)
    t = x.to(ct) / scale.to(ct) if divide else x.to(ct) * scale.to(ct)
    if offset is not None:
        t = t + offset.to(ct)
    return q_int8(t)


def row_inputs(dtype: torch.dtype, rows: int, n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(rows * n)
    x = (torch.randn(rows, n, generator=g) * 60).to(dtype)
    x[0, :16] = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, 3.0, 5.0, -7.0, 1e4, -1e4, float("inf"), float("-inf"),
                              float("nan"), -0.0, 253.0, 255.0])
    x[1] = 0
    return x


def quantize(driver: Path, tmp: Path, x: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor | None,
             divide: bool) -> torch.Tensor:
    rows, n = x.shape
    ct = torch.promote_types(x.dtype, scale.dtype)
    if offset is not None:
        ct = torch.promote_types(ct, offset.dtype)
    s = scale.to(ct).float().expand(n).contiguous()
    o = (offset.to(ct).float() if offset is not None else torch.zeros(1)).expand(n).contiguous()
    out = run(driver, "quant", NAMES[x.dtype], COMPUTE[ct], int(divide), int(offset is not None), rows, n,
              save(tmp / "x", x), save(tmp / "s", s), save(tmp / "o", o), tmp / "q")
    assert (out["rc"], out["msg"]) == (str(OK), "")
    return load(tmp / "q", torch.int8, (rows, n))


STATIC = [  # (x dtype, scale, offset or None, divide)
    (torch.bfloat16, torch.tensor([0.5], dtype=torch.bfloat16), torch.tensor([3], dtype=torch.bfloat16), False),
    (torch.bfloat16, torch.tensor([0.37], dtype=torch.bfloat16), torch.tensor([-5], dtype=torch.int8), False),
    (torch.float16, torch.tensor([0.5], dtype=torch.float16), torch.tensor([1], dtype=torch.int8), False),
    (torch.float16, torch.tensor([0.013], dtype=torch.float16), torch.tensor([7], dtype=torch.int8), True),
    (torch.float16, torch.tensor([2.0]), None, True),
    (torch.float32, torch.tensor([0.5]), torch.tensor([1.25]), False),
    (torch.bfloat16, torch.tensor([0.1]), torch.tensor([3], dtype=torch.int32), True),
    (torch.float32, torch.tensor([3.0]), None, True),
]


@pytest.mark.parametrize(("dtype", "scale", "offset", "divide"), STATIC)
def test_static_rows_equal_the_reference(driver: Path, tmp_path: Path, dtype: torch.dtype, scale: torch.Tensor,
                                         offset: torch.Tensor | None, divide: bool) -> None:
    x = row_inputs(dtype, 4, 64)
    want = static_reference(x, scale, offset, divide)
    assert torch.equal(quantize(driver, tmp_path, x, scale, offset, divide), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_dynamic_rows_equal_the_reference(driver: Path, tmp_path: Path, dtype: torch.dtype) -> None:
    x = row_inputs(dtype, 6, 32)
    x[2, 3] = float("nan")
    x[3, 5] = float("inf")
    x[4] = torch.tensor([1.0, 127.0, -63.5, 0.5] * 8, dtype=dtype)
    out = run(driver, "dynamic", NAMES[dtype], 6, 32, save(tmp_path / "x", x), tmp_path / "q", tmp_path / "s")
    assert (out["rc"], out["msg"]) == (str(OK), "")
    xf = x.float()
    a = xf.abs().amax(-1, keepdim=True)
    a = torch.where(torch.isnan(xf).any(-1, keepdim=True), torch.full_like(a, float("nan")), a)
    assert torch.equal(load(tmp_path / "q", torch.int8, (6, 32)), q_int8(xf * torch.div(torch.full_like(a, 127.0), a)))
    assert bits_equal(load(tmp_path / "s", torch.float32, (6,)), (a * torch.tensor(1 / 127, dtype=torch.float32))[:, 0])


@pytest.mark.parametrize(("heads", "head_size"), [(1, 64), (3, 128), (2, 256)])
def test_head_amax_by_the_vector_unit(driver: Path, tmp_path: Path, heads: int, head_size: int) -> None:
    """Compare + Select + ReduceMax/ReduceMin: a head's amax, NaN when it holds one, inf kept, 0 for zeros."""
    x = specials(heads * head_size)[torch.randperm(heads * head_size, generator=torch.Generator().manual_seed(3))]
    x = x.reshape(heads, head_size)
    x[0] = torch.where(torch.isnan(x[0]), torch.ones_like(x[0]), x[0])  # head 0: inf without NaN
    x[0, 1] = float("inf")
    if heads > 1:
        x[1] = -0.0  # an all-zero head
    out = run(driver, "amax", heads, head_size, save(tmp_path / "x", x), tmp_path / "a")
    assert (out["rc"], out["msg"]) == (str(OK), "")
    a = x.abs().amax(-1)
    a = torch.where(torch.isnan(x).any(-1), torch.full_like(a, float("nan")), a)
    assert bits_equal(load(tmp_path / "a", torch.float32, (heads,)), a)


@pytest.mark.parametrize("with_offset", [False, True])
def test_dequant_rows_are_float32(driver: Path, tmp_path: Path, with_offset: bool) -> None:
    q = torch.arange(-128, 128, dtype=torch.int8).reshape(4, 64)
    scale = torch.linspace(0.001, 3.0, 64)
    offset = torch.arange(64, dtype=torch.float32) - 30
    out = run(driver, "dequant", int(with_offset), 4, 64, save(tmp_path / "q", q), save(tmp_path / "s", scale),
              save(tmp_path / "o", offset), tmp_path / "y")
    assert (out["rc"], out["msg"]) == (str(OK), "")
    y = q.float() - offset if with_offset else q.float()
    assert bits_equal(load(tmp_path / "y", torch.float32, (4, 64)), y * scale)


# ---- misuse --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "fragment"),
    [
        ("unaligned", "Adds: dst (TBuf<VECCALC> #0 at byte offset 4) is not 32-byte aligned in UB"),
        ("count_past_end", "Muls: calCount 40 exceeds the dst tensor of 32 elements"),
        ("partial_overlap", "Add: dst (UB bytes [32, 96)) partly overlaps a source"),
        ("nan_max", "Maxs: a NaN operand"),
        ("bad_round_mode", "Cast<bfloat16_t, float>: round mode CAST_NONE is not in the Atlas A2/A3 table"),
        ("unordered_read", "Muls on TBuf<VECCALC> #0: V reads its bytes [0, 32) still being written by MTE2"),
        ("scalar_read_unordered", "GetValue on TBuf<VECCALC> #0: S reads its bytes [0, 32) still being written by V"),
        ("reduce_max_work_over_dst", "ReduceMax: the work buffer overlaps dst"),
        ("reduce_min_nan", "ReduceMin: a NaN operand"),
        ("reduce_dst_at_float_134", "ReduceMin: dst (TBuf<VECCALC> #0 at byte offset 134) must start 4-byte aligned"),
        ("reduce_dst_at_half_129", "ReduceMax: dst (TBuf<VECCALC> #0 at byte offset 129) must start 2-byte aligned"),
        ("compare_count", "Compare: count 32 of 4-byte elements is not a whole number of 256 bytes"),
        ("select_mode", "Select: only VSEL_TENSOR_SCALAR_MODE is modelled"),
    ],
)
def test_vector_misuse_is_stopped(driver: Path, case: str, fragment: str) -> None:
    out = run(driver, case)
    assert out["rc"] == str(MODEL_ERROR)
    assert fragment in out["msg"]


@pytest.mark.parametrize("case", ["reduce_dst_at_float_132", "reduce_dst_at_float_136", "reduce_dst_at_half_130"])
def test_reduce_dst_needs_only_element_alignment(driver: Path, case: str) -> None:
    """ReduceMax/ReduceMin's value-only dst (calIndex false) may start at any element of UB: Huawei's
    ReduceRepeat table 3 (ORDER_ONLY_VALUE: 4 bytes for float, 2 for half), which ReduceMin/ReduceMax
    name for dst; the kernels' extremes[8 * h + 2] sits 8 bytes past a 32-byte boundary. One byte
    off is rejected (test_vector_misuse_is_stopped)."""
    out = run(driver, case)
    assert out["rc"] == str(OK), out["msg"]


# ---- planted bugs --------------------------------------------------------------------------------

MUTANTS = {
    "cast-rint-rounds-half-away": (
        "ascendc/sim/include/host_model_vector.h",
        "return std::nearbyint(q); // half to even",
        "return std::round(q); // half to even",
    ),
    "offset-after-rounding": (
        "ascendc/kernels/quant_row.h",
        "        AscendC::Add(s.work, s.work, offset, n);",
        ("        AscendC::Cast(s.work, s.work, AscendC::RoundMode::CAST_RINT, count);\n"
         "        AscendC::Add(s.work, s.work, offset, n);"),
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_planted_rounding_bugs_are_caught(tmp_path: Path, mutant: str) -> None:
    rel, old, new = MUTANTS[mutant]
    copy = tmp_path / "src"
    shutil.copytree(ROOT / "ascendc", copy / "ascendc")
    target = copy / rel
    text = target.read_text()
    assert text.count(old) == 1, f"{mutant}: the mutated line moved"
    target.write_text(text.replace(old, new))
    exe = build(copy, tmp_path / "vector_cases")
    dtype, scale, offset, divide = STATIC[0]  # bf16 x * 0.5 + 3: ties at .5 with an odd zero point
    x = row_inputs(dtype, 4, 64)
    assert not torch.equal(quantize(exe, tmp_path, x, scale, offset, divide), static_reference(x, scale, offset, divide))


@pytest.mark.slow
def test_planted_amax_nan_bug_is_caught(tmp_path: Path) -> None:
    """HeadAmax ignoring ReduceMin's NaN marker gives a finite amax for a head holding a NaN."""
    copy = tmp_path / "src"
    shutil.copytree(ROOT / "ascendc", copy / "ascendc")
    target = copy / "ascendc" / "kernels" / "quant_row.h"
    old = "extremes.GetValue(at + 2) < 0.0f ? quietNan.value"
    text = target.read_text()
    assert text.count(old) == 1, "the mutated line moved"
    target.write_text(text.replace(old, "extremes.GetValue(at + 2) < -2.0f ? quietNan.value"))
    exe = build(copy, tmp_path / "vector_cases")
    x = torch.ones(2, 64)
    x[1, 7] = float("nan")
    out = run(exe, "amax", 2, 64, save(tmp_path / "x", x), tmp_path / "a")
    assert (out["rc"], out["msg"]) == (str(OK), "")
    assert not bits_equal(load(tmp_path / "a", torch.float32, (2,)), torch.tensor([1.0, float("nan")]))
