// AVX2 row loops of the quantized caches' two hot paths over dense rows (int8 codes): quantizing a
// token row with a static scale and dequantizing a cache row. Each gives, element for element, the
// bytes of quant_math.h's scalar arithmetic (the same float32 operations, rounded to nearest even);
// the CPU is asked once at run time (Available), and other targets build the scalar paths only.
#pragma once

#include <cstdint>
#include <type_traits>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ASCEND_KV_AVX2 1
#define ASCEND_KV_AVX2_TARGET __attribute__((target("avx2,f16c")))
#else
#define ASCEND_KV_AVX2 0
#endif

namespace ascend_kv::quant_avx2 {

/// Elements per step of the loops below: the row lengths they take are multiples of it.
constexpr int64_t kStep = 16;

/// Whether this CPU runs the loops below (AVX2 and F16C).
inline bool Available()
{
#if ASCEND_KV_AVX2
    static const bool available = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    return available;
#else
    return false;
#endif
}

#if ASCEND_KV_AVX2

/// 8 floats rounded to Ct (float16, bfloat16 or float32; nearest even) and widened back; NaN kept.
template <typename Ct>
ASCEND_KV_AVX2_TARGET inline __m256 RoundTo(__m256 v)
{
    if constexpr (std::is_same_v<Ct, c10::Half>) {
        return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    } else if constexpr (std::is_same_v<Ct, c10::BFloat16>) {
        const __m256i bits = _mm256_castps_si256(v);
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
        const __m256i sum = _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), lsb);
        const __m256i rounded = _mm256_and_si256(sum, _mm256_set1_epi32(static_cast<int>(0xffff0000u)));
        return _mm256_blendv_ps(_mm256_castsi256_ps(rounded), v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    } else {
        return v;
    }
}

/// 8 elements of In at `x` widened to float (exact; a NaN stays a NaN, its bits aside).
template <typename In>
ASCEND_KV_AVX2_TARGET inline __m256 Widen8(const In* x)
{
    if constexpr (std::is_same_v<In, c10::Half>) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
    } else if constexpr (std::is_same_v<In, c10::BFloat16>) {
        const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
    } else {
        return _mm256_loadu_ps(reinterpret_cast<const float*>(x));
    }
}

/// 8 int8 codes of final values t: rounded half to even, saturated to [-128, 127], NaN -> 0
/// (quant_math::Encode<int8_t>), as int32 lanes.
ASCEND_KV_AVX2_TARGET inline __m256i Codes8(__m256 t)
{
    const __m256 r = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 clamped = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-128.0f)), _mm256_set1_ps(127.0f));
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(t, t, _CMP_UNORD_Q));
    return _mm256_andnot_si256(nan, _mm256_cvttps_epi32(clamped));
}

/// Two vectors of 8 int32 lanes packed in order into 16 int16 lanes (signed saturation, exact for
/// values in range) or, `Unsigned`, unsigned saturation (for 16-bit patterns).
template <bool Unsigned>
ASCEND_KV_AVX2_TARGET inline __m256i Pack16(__m256i a, __m256i b)
{
    const __m256i packed = Unsigned ? _mm256_packus_epi32(a, b) : _mm256_packs_epi32(a, b);
    return _mm256_permute4x64_epi64(packed, 0xD8);  // the lanes' halves back in order
}

/// Static quantization of a dense row of n (a multiple of kStep) elements to int8 codes: code j =
/// Q(round_Ct(round_Ct(x[j] op scale[j]) + offset[j])), op dividing or multiplying (EncodeStatic).
template <typename In, typename Ct, bool kDivide>
ASCEND_KV_AVX2_TARGET void QuantizeStatic(const In* x, const float* scale, const float* offset, int8_t* codes,
                                          int64_t n)
{
    for (int64_t j = 0; j < n; j += kStep) {
        __m256i half[2];
        for (int k = 0; k < 2; ++k) {
            const int64_t at = j + 8 * k;
            const __m256 v = Widen8(x + at), s = _mm256_loadu_ps(scale + at);
            const __m256 t = RoundTo<Ct>(kDivide ? _mm256_div_ps(v, s) : _mm256_mul_ps(v, s));
            half[k] = Codes8(RoundTo<Ct>(_mm256_add_ps(t, _mm256_loadu_ps(offset + at))));
        }
        const __m256i words = Pack16<false>(half[0], half[1]);
        const __m128i bytes = _mm_packs_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + j), bytes);
    }
}

/// 32 bytes stored at `at`: `kStream`, past the caches (`at` 32-byte aligned).
template <bool kStream>
ASCEND_KV_AVX2_TARGET inline void Store32(__m256i v, void* at)
{
    if constexpr (kStream) {
        _mm256_stream_si256(static_cast<__m256i*>(at), v);
    } else {
        _mm256_storeu_si256(static_cast<__m256i*>(at), v);
    }
}

/// 16 floats stored as Out (float32, or float16/bfloat16 rounded to nearest even; a NaN's bits are
/// the caller's to fix).
template <typename Out, bool kStream>
ASCEND_KV_AVX2_TARGET inline void Store16(const __m256 (&y)[2], Out* out)
{
    if constexpr (std::is_same_v<Out, c10::Half>) {
        const int mode = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
        Store32<kStream>(_mm256_set_m128i(_mm256_cvtps_ph(y[1], mode), _mm256_cvtps_ph(y[0], mode)), out);
    } else if constexpr (std::is_same_v<Out, c10::BFloat16>) {
        __m256i bits[2];
        for (int k = 0; k < 2; ++k) {  // RoundTo's integer rounding, without its NaN test: the upper halves
            const __m256i x = _mm256_castps_si256(y[k]);
            const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
            bits[k] = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
        }
        Store32<kStream>(Pack16<true>(bits[0], bits[1]), out);
    } else {
        Store32<kStream>(_mm256_castps_si256(y[0]), out);
        Store32<kStream>(_mm256_castps_si256(y[1]), out + 8);
    }
}

/// Dequantization of a dense row of n (a multiple of kStep) int8 codes: out[j] = (q[j] - offset[j]) *
/// scale[j] (static) or q[j] * row_scale (kDynamic: offset and scale unused), stored as Out (`kStream`:
/// past the caches, `out` 32-byte aligned). Returns whether a value was NaN (its stored bits then
/// need fixing; the streamed stores are then fenced), or, !kCheckNan (the caller knows there is none),
/// false.
template <typename Out, bool kDynamic, bool kStream, bool kCheckNan>
ASCEND_KV_AVX2_TARGET bool Dequantize(const int8_t* q, const float* offset, const float* scale, float row_scale,
                                      Out* out, int64_t n)
{
    __m256 nan = _mm256_setzero_ps();
    const __m256 row = _mm256_set1_ps(row_scale);
    for (int64_t j = 0; j < n; j += kStep) {
        __m256 y[2];
        for (int k = 0; k < 2; ++k) {
            const int64_t at = j + 8 * k;
            const __m128i codes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + at));
            const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(codes));
            y[k] = kDynamic ? _mm256_mul_ps(v, row)
                            : _mm256_mul_ps(_mm256_sub_ps(v, _mm256_loadu_ps(offset + at)),
                                            _mm256_loadu_ps(scale + at));
            if constexpr (kCheckNan) {
                nan = _mm256_or_ps(nan, _mm256_cmp_ps(y[k], y[k], _CMP_UNORD_Q));
            }
        }
        Store16<Out, kStream>(y, out + j);
    }
    const bool any = !_mm256_testz_ps(nan, nan);
    if (kStream && any) {
        _mm_sfence();
    }
    return any;
}

#endif

}  // namespace ascend_kv::quant_avx2
