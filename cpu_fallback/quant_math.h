// The element arithmetic of quantized caches (docs/semantics.md §13), once for every CPU path: each operation
// computed in float32 and rounded to the compute type, as torch computes float16/bfloat16 on a CPU,
// so the codes equal the plain-torch reference byte for byte.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include <c10/core/ScalarType.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Float8_e4m3fn.h>
#include <c10/util/Float8_e5m2.h>
#include <c10/util/Half.h>

namespace ascend_kv::quant_math {

/// The bits torch's CPU kernels give a NaN of `bits` (a float16, bfloat16 or float32 pattern)
/// converted from `from` to `to`: its vectorised conversions, which differ from c10's scalar ones
/// (under AVX2 a bfloat16 NaN is 0xffff, a float16 NaN widens to 0x7fffffff), asked of torch once
/// per pattern.
uint32_t TorchNanBits(c10::ScalarType from, c10::ScalarType to, uint32_t bits);

template <typename T>
constexpr c10::ScalarType ScalarTypeOf()
{
    return std::is_same_v<T, c10::Half> ? c10::ScalarType::Half : c10::ScalarType::BFloat16;
}

/// `v` as torch stores it in Out (float16 or bfloat16): rounded to nearest even, NaN as torch's kernels.
template <typename Out>
inline Out Narrow(float v)
{
    if (!std::isnan(v)) {
        return Out(v);
    }
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    const auto narrowed = static_cast<uint16_t>(TorchNanBits(c10::ScalarType::Float, ScalarTypeOf<Out>(), bits));
    return Out(narrowed, typename Out::from_bits_t());
}

/// A float16 or bfloat16 `v` as a float, as torch widens it (exact; NaN as torch's kernels).
template <typename In>
inline float Widen(In v)
{
    const float f = static_cast<float>(v);
    if (!std::isnan(f)) {
        return f;
    }
    const uint32_t bits = TorchNanBits(ScalarTypeOf<In>(), c10::ScalarType::Float, v.x);
    float widened;
    std::memcpy(&widened, &bits, sizeof widened);
    return widened;
}

/// `v` rounded (to nearest, ties to even) to the compute type Ct, as a float.
template <typename Ct>
inline float Round(float v)
{
    if constexpr (std::is_same_v<Ct, float>) {
        return v;
    } else {
        return static_cast<float>(Narrow<Ct>(v));
    }
}

/// The largest finite value of a code type (int8's: 127).
template <typename Code>
constexpr float CodeMax()
{
    if constexpr (std::is_same_v<Code, int8_t>) {
        return 127.0f;
    } else if constexpr (std::is_same_v<Code, c10::Float8_e4m3fn>) {
        return 448.0f;
    } else {
        return 57344.0f;  // float8_e5m2
    }
}

/// Q of docs/semantics.md §13: int8 rounds half to even, saturates to [-128, 127], NaN -> 0; fp8 clamps to
/// +-max (in the compute type, where max is exact) and rounds to nearest even, NaN kept.
template <typename Code>
inline Code Encode(float t)
{
    if constexpr (std::is_same_v<Code, int8_t>) {
        if (std::isnan(t)) {
            return 0;
        }
        const float r = std::nearbyint(t);
        return static_cast<int8_t>(r < -128.0f ? -128.0f : (r > 127.0f ? 127.0f : r));
    } else {
        constexpr float m = CodeMax<Code>();
        return Code(t < -m ? -m : (t > m ? m : t));
    }
}

/// A code as float32 (exact).
template <typename Code>
inline float Decode(Code q)
{
    return static_cast<float>(q);
}

/// 1 / the code type's max, rounded to float32 once: the dynamic scale is amax times this.
template <typename Code>
inline float InverseMax()
{
    return static_cast<float>(1.0 / static_cast<double>(CodeMax<Code>()));
}

/// max |x| over a row of n floats; the default NaN when any element is NaN, as torch's amax gives.
inline float AbsMax(const float* x, int64_t n)
{
    float a = 0.0f;
    bool nan = false;
    for (int64_t j = 0; j < n; ++j) {
        const float v = std::fabs(x[j]);
        nan |= std::isnan(v);
        a = v > a ? v : a;
    }
    return nan ? std::numeric_limits<float>::quiet_NaN() : a;
}

}  // namespace ascend_kv::quant_math
