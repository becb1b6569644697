/*
 * Vector arithmetic of quantize-on-write and dequantize-on-load (docs/semantics.md §13) on one UB row, for
 * the vector cores of Atlas A2/A3.
 *
 * Compute dtype: float32 operations, each rounded once to half or bfloat16 (CAST_RINT) when the
 * compute dtype is one of them: a float32 +, *, / rounded to a 16-bit type is that type's
 * correctly rounded operation (24 >= 2 * 11 + 2), as torch computes on a CPU.
 * int8 codes: float32 -> int32 with CAST_RINT (round half to even; the conversion saturates and
 * maps NaN to 0), clamped to [-128, 127] in int32, then int32 -> float -> half -> int8, each exact
 * on these integers (A2/A3 have no direct float -> int8 Cast).
 */
#ifndef ASCEND_KV_QUANT_ROW_H
#define ASCEND_KV_QUANT_ROW_H

#include "kernel_operator.h"
#include "../tiling.h"

namespace ascend_kv {

/// UB scratch for rows of up to `count` elements: float work (the row being computed), a 16-bit
/// stage (half or bfloat16 rounding, half before int8) and an int32 stage, each 32-byte aligned.
struct QuantScratch {
    AscendC::LocalTensor<float> work;
    AscendC::LocalTensor<half> narrow;
    AscendC::LocalTensor<int32_t> wide;
};

/// Head sizes (a multiple of) whose amax the vector unit finds: each head starts 32-byte aligned
/// and a row is whole 256-byte repeats, as Compare needs.
constexpr uint64_t kHeadsByVector = 64;

/// Per head h of a row of `heads` * `headSize` elements (headSize a multiple of kHeadsByVector):
/// extremes[8h] = the largest |x| that is no NaN and extremes[8h + 2] = the smallest, -1 when the
/// head holds a NaN (Compare(x, x, EQ) marks the NaN elements, Select puts -1 there; the NaN
/// behaviour of ReduceMax/ReduceMin is not documented, so they never see one). magnitude (|x|) is
/// overwritten; stage (the half scratch row of heads * headSize elements) holds the bit mask and
/// the reductions' work buffer.
__aicore__ inline void HeadExtremes(const AscendC::LocalTensor<float>& extremes,
                                    const AscendC::LocalTensor<float>& magnitude, const AscendC::LocalTensor<float>& x,
                                    const AscendC::LocalTensor<half>& stage, uint64_t heads, uint64_t headSize)
{
    const uint32_t n = static_cast<uint32_t>(heads * headSize);
    const AscendC::LocalTensor<uint8_t> numbers = stage.ReinterpretCast<uint8_t>();
    const AscendC::LocalTensor<float> work = stage.ReinterpretCast<float>()[(n / 32 + 7) / 8 * 8];
    AscendC::Compare(numbers, x, x, AscendC::CMPMODE::EQ, n);
    AscendC::Select(magnitude, numbers, magnitude, -1.0f, AscendC::SELMODE::VSEL_TENSOR_SCALAR_MODE, n);
    const int32_t d = static_cast<int32_t>(headSize);
    for (uint32_t h = 0; h < static_cast<uint32_t>(heads); ++h) {
        AscendC::ReduceMax(extremes[8 * h], magnitude[h * static_cast<uint32_t>(headSize)], work, d);
        AscendC::ReduceMin(extremes[8 * h + 2], magnitude[h * static_cast<uint32_t>(headSize)], work, d);
    }
}

/// Head h's amax from HeadExtremes (read by the scalar unit after V_S): a quiet NaN when the head
/// holds a NaN (docs/semantics.md §13: its codes are 0 and its scale NaN).
__aicore__ inline float HeadAmax(const AscendC::LocalTensor<float>& extremes, uint64_t h)
{
    union {
        uint32_t bits;
        float value;
    } quietNan = {0x7FC00000u};
    const uint32_t at = static_cast<uint32_t>(8 * h);
    return extremes.GetValue(at + 2) < 0.0f ? quietNan.value : extremes.GetValue(at);
}

/// row[h * headSize, (h + 1) * headSize) = value. A head starting 32-byte aligned in UB (headSize a
/// multiple of 8) takes one vector Duplicate; another head is written by the scalar unit, so the
/// caller orders both units around the call (V_S before, S_V after).
__aicore__ inline void FillHead(const AscendC::LocalTensor<float>& row, uint64_t h, uint64_t headSize, float value)
{
    const uint32_t at = static_cast<uint32_t>(h * headSize);
    if (headSize % 8 == 0) {
        AscendC::Duplicate(row[at], value, static_cast<int32_t>(headSize));
        return;
    }
    for (uint32_t d = 0; d < static_cast<uint32_t>(headSize); ++d) {
        row.SetValue(at + d, value);
    }
}

/// v[0, count) rounded in place to the compute dtype through `narrow` (a no-op for float).
__aicore__ inline void RoundToCompute(const AscendC::LocalTensor<float>& v, const AscendC::LocalTensor<half>& narrow,
                                      uint64_t compute, uint32_t count)
{
    if (compute == kComputeHalf) {
        AscendC::Cast(narrow, v, AscendC::RoundMode::CAST_RINT, count);
        AscendC::Cast(v, narrow, AscendC::RoundMode::CAST_NONE, count);
    } else if (compute == kComputeBfloat16) {
        AscendC::LocalTensor<bfloat16_t> b = narrow.ReinterpretCast<bfloat16_t>();
        AscendC::Cast(b, v, AscendC::RoundMode::CAST_RINT, count);
        AscendC::Cast(v, b, AscendC::RoundMode::CAST_NONE, count);
    }
}

/// codes[i] = int8 code of work[i]: round half to even, saturate to [-128, 127], NaN -> 0.
__aicore__ inline void ToInt8Codes(const AscendC::LocalTensor<int8_t>& codes, const QuantScratch& s, uint32_t count)
{
    const int32_t n = static_cast<int32_t>(count);
    AscendC::Cast(s.wide, s.work, AscendC::RoundMode::CAST_RINT, count);
    AscendC::Maxs(s.wide, s.wide, static_cast<int32_t>(-128), n);
    AscendC::Mins(s.wide, s.wide, static_cast<int32_t>(127), n);
    AscendC::Cast(s.work, s.wide, AscendC::RoundMode::CAST_NONE, count);
    AscendC::Cast(s.narrow, s.work, AscendC::RoundMode::CAST_NONE, count);
    AscendC::Cast(codes, s.narrow, AscendC::RoundMode::CAST_NONE, count);
}

/// Static int8 quantization of one row x (float, converted exactly from the input; may be s.work):
/// codes = Q(x / scale + offset) or Q(x * scale + offset), each operation rounded to the compute
/// dtype. scale and offset hold `count` float values already exact in the compute dtype.
__aicore__ inline void QuantizeStaticRow(const AscendC::LocalTensor<int8_t>& codes, const QuantScratch& s,
                                         const AscendC::LocalTensor<float>& x,
                                         const AscendC::LocalTensor<float>& scale,
                                         const AscendC::LocalTensor<float>& offset, bool divide, bool hasOffset,
                                         uint64_t compute, uint32_t count)
{
    const int32_t n = static_cast<int32_t>(count);
    if (divide) {
        AscendC::Div(s.work, x, scale, n);
    } else {
        AscendC::Mul(s.work, x, scale, n);
    }
    RoundToCompute(s.work, s.narrow, compute, count);
    if (hasOffset) {
        AscendC::Add(s.work, s.work, offset, n);  // the zero point goes in before rounding to codes
        RoundToCompute(s.work, s.narrow, compute, count);
    }
    ToInt8Codes(codes, s, count);
}

/// Dynamic int8 quantization of one row x (float; may be s.work), given its float multiplier
/// 127 / amax (computed by the caller on the scalar unit): codes = Q(x * multiplier).
__aicore__ inline void QuantizeDynamicRow(const AscendC::LocalTensor<int8_t>& codes, const QuantScratch& s,
                                          const AscendC::LocalTensor<float>& x, float multiplier, uint32_t count)
{
    AscendC::Muls(s.work, x, multiplier, static_cast<int32_t>(count));
    ToInt8Codes(codes, s, count);
}

/// Dequantization of int8 codes into y as float32: (q - offset) * scale, float32 operations.
__aicore__ inline void DequantizeRow(const AscendC::LocalTensor<float>& y, const QuantScratch& s,
                                     const AscendC::LocalTensor<int8_t>& codes,
                                     const AscendC::LocalTensor<float>& scale,
                                     const AscendC::LocalTensor<float>& offset, bool hasOffset, uint32_t count)
{
    const int32_t n = static_cast<int32_t>(count);
    AscendC::Cast(s.narrow, codes, AscendC::RoundMode::CAST_NONE, count);
    AscendC::Cast(y, s.narrow, AscendC::RoundMode::CAST_NONE, count);
    if (hasOffset) {
        AscendC::Sub(y, y, offset, n);
    }
    AscendC::Mul(y, y, scale, n);
}

}  // namespace ascend_kv

#endif  // ASCEND_KV_QUANT_ROW_H
