// HOST MODEL of the AscendC vector instructions the quantizing kernels use (included by
// kernel_operator.h inside namespace AscendC; not a header of its own in CANN).
//
// Level-2 forms only (a calCount of elements, no masks or repeat parameters). Every operand is a
// LocalTensor: it must be alive (not freed, not enqueued), start 32-byte aligned in UB and hold
// calCount elements; dst may be src (in place) but may not overlap it otherwise. Each call is one
// PIPE_V instruction: it reads its sources and writes dst as engine V, so data a DataCopy brought
// in needs MTE2_V ordering first and a store needs V_MTE3 after (see kernel_operator.h).
//
// Arithmetic, as documented for Atlas A2/A3 vector cores:
//   - float32: IEEE binary32 with round to nearest even (Add, Sub, Mul, Div, Adds, Muls). The
//     hardware's Div (DivAlgo::INTRINSIC) is accurate to 1 ulp only: the model divides exactly,
//     so a kernel dividing on A2/A3 is declared inexact (QUANT.md §4 item 1), never tested equal.
//     Subnormals are kept (the hardware may flush them: QUANT.md §4 item 3).
//   - half/bfloat16 arithmetic: the float32 operation rounded once to the type (CAST_RINT).
//   - Max/Min/Maxs/Mins on float: the result with a NaN operand is not documented, so a NaN
//     operand stops the kernel (a kernel must remove NaN first, e.g. by a saturating Cast).
//   - Cast<dst, src>(round mode): the pairs of the A2/A3 table the kernels use, each with the
//     round modes the table lists (another pair or mode stops the kernel): half/bfloat16 -> float
//     (CAST_NONE, exact); float -> half (CAST_NONE = RINT, RINT, FLOOR, CEIL, ROUND, TRUNC, ODD;
//     overflow -> +-inf); float -> bfloat16 (RINT, FLOOR, CEIL, ROUND, TRUNC); float -> float
//     (to an integer value: RINT, FLOOR, CEIL, ROUND, TRUNC); float -> int32 (CAST_NONE = RINT, RINT,
//     FLOOR, CEIL, ROUND, TRUNC; saturating, NaN -> 0); int32 -> float (CAST_NONE = RINT, RINT);
//     half -> int8 (CAST_NONE = RINT, RINT, FLOOR, CEIL, ROUND, TRUNC; saturating, NaN -> 0);
//     int8 -> half (CAST_NONE, exact). RINT is round half to even, ROUND half away from zero.
#ifndef ASCEND_KV_HOST_MODEL_VECTOR_H
#define ASCEND_KV_HOST_MODEL_VECTOR_H

enum class RoundMode {
    CAST_NONE = 0,
    CAST_RINT,
    CAST_FLOOR,
    CAST_CEIL,
    CAST_ROUND,
    CAST_TRUNC,
    CAST_ODD,
};

namespace host_model {

inline const char* RoundModeName(RoundMode m)
{
    static const char* names[] = {"CAST_NONE", "CAST_RINT", "CAST_FLOOR", "CAST_CEIL",
                                  "CAST_ROUND", "CAST_TRUNC", "CAST_ODD"};
    return names[static_cast<int>(m)];
}

template <typename T>
const char* TypeName()
{
    if constexpr (std::is_same_v<T, float>) return "float";
    else if constexpr (std::is_same_v<T, half>) return "half";
    else if constexpr (std::is_same_v<T, bfloat16_t>) return "bfloat16_t";
    else if constexpr (std::is_same_v<T, int32_t>) return "int32_t";
    else if constexpr (std::is_same_v<T, int8_t>) return "int8_t";
    else return "an unmodelled type";
}

// q rounded to an integer value in `mode` (CAST_NONE: to nearest even).
inline double RoundInteger(double q, RoundMode mode)
{
    switch (mode) {
        case RoundMode::CAST_NONE:
        case RoundMode::CAST_RINT: return std::nearbyint(q); // half to even (default FP environment)
        case RoundMode::CAST_FLOOR: return std::floor(q);
        case RoundMode::CAST_CEIL: return std::ceil(q);
        case RoundMode::CAST_ROUND: return std::round(q);    // half away from zero
        case RoundMode::CAST_TRUNC: return std::trunc(q);
        case RoundMode::CAST_ODD: {
            double t = std::trunc(q);
            return (t != q && std::fmod(t, 2.0) == 0.0) ? t + (q > 0 ? 1.0 : -1.0) : t;
        }
    }
    return q;
}

// v rounded to a binary format of `mantBits` fraction bits, minimum normal exponent minExp and
// largest finite value maxFinite; overflow gives +-inf, or +-maxFinite for modes rounding toward
// it (as IEEE directed rounding).
inline double RoundFormat(double v, int mantBits, int minExp, double maxFinite, RoundMode mode)
{
    if (std::isnan(v) || std::isinf(v) || v == 0.0) return v;
    int e = std::ilogb(v);
    if (e < minExp) e = minExp;
    double ulp = std::ldexp(1.0, e - mantBits);
    double r = RoundInteger(v / ulp, mode) * ulp;
    if (r == 0.0) return std::copysign(0.0, v);
    if (std::fabs(r) > maxFinite) {
        bool toward = mode == RoundMode::CAST_TRUNC || (mode == RoundMode::CAST_FLOOR && v > 0) ||
                      (mode == RoundMode::CAST_CEIL && v < 0) || mode == RoundMode::CAST_ODD;
        return std::copysign(toward ? maxFinite : std::numeric_limits<double>::infinity(), v);
    }
    return r;
}

inline float HalfToFloat(uint16_t h)
{
    uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, frac = h & 0x3ff;
    double v;
    if (exp == 0x1f) v = frac ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
    else if (exp == 0) v = std::ldexp(static_cast<double>(frac), -24);
    else v = std::ldexp(static_cast<double>(frac | 0x400), static_cast<int>(exp) - 25);
    return static_cast<float>(sign ? -v : v);
}

// An exactly representable half value (already rounded) to its bits; NaN -> quiet NaN.
inline uint16_t HalfBits(double v)
{
    uint16_t sign = std::signbit(v) ? 0x8000 : 0;
    if (std::isnan(v)) return 0x7e00 | sign;
    double a = std::fabs(v);
    if (std::isinf(a)) return sign | 0x7c00;
    if (a < std::ldexp(1.0, -14)) return sign | static_cast<uint16_t>(a * std::ldexp(1.0, 24));
    int e = std::ilogb(a);
    uint16_t frac = static_cast<uint16_t>(std::ldexp(a, 10 - e) - 1024.0);
    return sign | static_cast<uint16_t>((e + 15) << 10) | frac;
}

inline float BfloatToFloat(uint16_t b)
{
    uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
}

// An exactly representable bfloat16 value (already rounded) to its bits.
inline uint16_t BfloatBits(double v)
{
    float f = static_cast<float>(v);
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    if (std::isnan(f)) u |= 0x00400000u;
    return static_cast<uint16_t>(u >> 16);
}

// Element <-> double for arithmetic (exact for every modelled type).
template <typename T>
double Load(const T& x)
{
    if constexpr (std::is_same_v<T, half>) return HalfToFloat(x.bits);
    else if constexpr (std::is_same_v<T, bfloat16_t>) return BfloatToFloat(x.bits);
    else return static_cast<double>(x);
}

// The result of an operation in T: float rounds once to nearest even, half/bfloat16 round the
// float result once more (CAST_RINT), integers are computed exactly (the kernels stay in range).
template <typename T>
T Store(double v)
{
    if constexpr (std::is_same_v<T, float>) return static_cast<float>(v);
    else if constexpr (std::is_same_v<T, half>) {
        T h;
        h.bits = HalfBits(RoundFormat(static_cast<float>(v), 10, -14, 65504.0, RoundMode::CAST_RINT));
        return h;
    } else if constexpr (std::is_same_v<T, bfloat16_t>) {
        T b;
        b.bits = BfloatBits(RoundFormat(static_cast<float>(v), 7, -126, 3.3895313892515355e38, RoundMode::CAST_RINT));
        return b;
    } else {
        return static_cast<T>(v);
    }
}

// Checks one operand of a vector instruction and returns its UB byte offset.
template <typename T>
uint32_t Operand(const LocalTensor<T>& t, int32_t count, const char* op, const char* role)
{
    const auto& m = Access::M(t);
    m.Live(op);
    if (m.UbOffset() % kBlockBytes != 0)
        Fail(op, ": ", role, " (", m.buf->owner, " at byte offset ", m.byteOff, ") is not 32-byte aligned in UB");
    if (count < 0 || static_cast<uint32_t>(count) > m.size)
        Fail(op, ": calCount ", count, " exceeds the ", role, " tensor of ", m.size, " elements in ", m.buf->owner);
    return m.UbOffset();
}

// dst [d, d+db) and a source [s, s+sb) are the same bytes or disjoint.
inline void NoPartialOverlap(uint32_t d, uint32_t db, uint32_t s, uint32_t sb, const char* op)
{
    if (d == s && db == sb) return;
    if (d < s + sb && s < d + db)
        Fail(op, ": dst (UB bytes [", d, ", ", d + db, ")) partly overlaps a source (UB bytes [", s, ", ", s + sb,
             ")): only the same address (in place) is allowed");
}

// A source operand read by V instruction opNo, whose dst is UB bytes [d, d+db).
template <typename T>
void ReadOperand(const LocalTensor<T>& s, int32_t count, const char* op, uint64_t opNo, uint32_t d, uint32_t db)
{
    uint32_t off = Operand(s, count, op, "src");
    uint32_t sb = static_cast<uint32_t>(count) * sizeof(T);
    NoPartialOverlap(d, db, off, sb, op);
    UbAccess(Engine::V, opNo, off, sb, false, op, Access::M(s).buf->owner, Access::M(s).buf->ubOffset);
}

// One PIPE_V instruction: dst[i] = f(i) for i < count, after reading the sources' bytes.
template <typename D, typename F, typename... S>
void VectorOp(const char* op, const LocalTensor<D>& dst, int32_t count, F f, const LocalTensor<S>&... srcs)
{
    uint32_t d = Operand(dst, count, op, "dst");
    uint32_t db = static_cast<uint32_t>(count) * sizeof(D);
    uint64_t opNo = Issue(Engine::V);
    (ReadOperand(srcs, count, op, opNo, d, db), ...);
    UbAccess(Engine::V, opNo, d, db, true, op, Access::M(dst).buf->owner, Access::M(dst).buf->ubOffset);
    std::vector<D> out(static_cast<size_t>(count));
    for (int32_t i = 0; i < count; ++i) out[i] = f(i);
    std::memcpy(Access::M(dst).Bytes(), out.data(), db);
}

template <typename T>
T Elem(const LocalTensor<T>& t, int32_t i)
{
    T v;
    std::memcpy(&v, Access::M(t).Bytes() + static_cast<size_t>(i) * sizeof(T), sizeof(T));
    return v;
}

template <typename T>
void NoNan(double a, double b, const char* op)
{
    if constexpr (!std::is_integral_v<T>) {
        if (std::isnan(a) || std::isnan(b))
            Fail(op, ": a NaN operand (the result of ", op, " with NaN is not documented; remove NaN first)");
    }
}

// Casts: the result of one element, or a failure for a pair/mode outside the modelled table.
template <typename D, typename S>
D CastElem(const S& x, RoundMode mode)
{
    const double v = Load(x);
    using M = RoundMode;
    auto modes = [&](std::initializer_list<M> ok) {
        for (M m : ok)
            if (m == mode) return;
        Fail("Cast<", TypeName<D>(), ", ", TypeName<S>(), ">: round mode ", RoundModeName(mode),
             " is not in the Atlas A2/A3 table for this pair");
    };
    if constexpr (std::is_same_v<D, float> && (std::is_same_v<S, half> || std::is_same_v<S, bfloat16_t>)) {
        modes({M::CAST_NONE});
        return static_cast<float>(v);
    } else if constexpr (std::is_same_v<D, half> && std::is_same_v<S, float>) {
        modes({M::CAST_NONE, M::CAST_RINT, M::CAST_FLOOR, M::CAST_CEIL, M::CAST_ROUND, M::CAST_TRUNC, M::CAST_ODD});
        half h;
        h.bits = HalfBits(RoundFormat(v, 10, -14, 65504.0, mode));
        return h;
    } else if constexpr (std::is_same_v<D, bfloat16_t> && std::is_same_v<S, float>) {
        modes({M::CAST_RINT, M::CAST_FLOOR, M::CAST_CEIL, M::CAST_ROUND, M::CAST_TRUNC});
        bfloat16_t b;
        b.bits = BfloatBits(RoundFormat(v, 7, -126, 3.3895313892515355e38, mode));
        return b;
    } else if constexpr (std::is_same_v<D, float> && std::is_same_v<S, float>) {
        modes({M::CAST_RINT, M::CAST_FLOOR, M::CAST_CEIL, M::CAST_ROUND, M::CAST_TRUNC});
        return std::isfinite(v) ? static_cast<float>(std::copysign(RoundInteger(v, mode), v)) : static_cast<float>(v);
    } else if constexpr ((std::is_same_v<D, int32_t> && std::is_same_v<S, float>) ||
                         (std::is_same_v<D, int8_t> && std::is_same_v<S, half>)) {
        modes({M::CAST_NONE, M::CAST_RINT, M::CAST_FLOOR, M::CAST_CEIL, M::CAST_ROUND, M::CAST_TRUNC});
        if (std::isnan(v)) return 0; // saturating conversion: NaN -> 0
        const double lo = std::numeric_limits<D>::min(), hi = std::numeric_limits<D>::max();
        return static_cast<D>(std::fmin(std::fmax(RoundInteger(v, mode), lo), hi));
    } else if constexpr (std::is_same_v<D, float> && std::is_same_v<S, int32_t>) {
        modes({M::CAST_NONE, M::CAST_RINT});
        return static_cast<float>(v); // round to nearest even
    } else if constexpr (std::is_same_v<D, half> && std::is_same_v<S, int8_t>) {
        modes({M::CAST_NONE});
        return Store<half>(v);
    } else {
        Fail("Cast<", TypeName<D>(), ", ", TypeName<S>(), ">: the pair is not modelled");
    }
}

} // namespace host_model

template <typename T, typename U>
__aicore__ inline void Cast(const LocalTensor<T>& dst, const LocalTensor<U>& src, const RoundMode& round_mode,
                            const uint32_t calCount)
{
    host_model::VectorOp("Cast", dst, static_cast<int32_t>(calCount),
                         [&](int32_t i) { return host_model::CastElem<T>(host_model::Elem(src, i), round_mode); }, src);
}

#define ASCEND_KV_MODEL_BINARY(NAME, EXPR, CHECK_NAN)                                                          \
    template <typename T>                                                                                      \
    __aicore__ inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, \
                                const int32_t& calCount)                                                       \
    {                                                                                                          \
        host_model::VectorOp(#NAME, dst, calCount, [&](int32_t i) {                                            \
            const double a = host_model::Load(host_model::Elem(src0, i));                                      \
            const double b = host_model::Load(host_model::Elem(src1, i));                                      \
            if (CHECK_NAN) host_model::NoNan<T>(a, b, #NAME);                                                  \
            return host_model::Store<T>(EXPR);                                                                 \
        }, src0, src1);                                                                                        \
    }

#define ASCEND_KV_MODEL_SCALAR(NAME, EXPR, CHECK_NAN)                                                          \
    template <typename T>                                                                                      \
    __aicore__ inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue,    \
                                const int32_t& calCount)                                                       \
    {                                                                                                          \
        const double b = host_model::Load(scalarValue);                                                        \
        host_model::VectorOp(#NAME, dst, calCount, [&](int32_t i) {                                            \
            const double a = host_model::Load(host_model::Elem(src, i));                                       \
            if (CHECK_NAN) host_model::NoNan<T>(a, b, #NAME);                                                  \
            return host_model::Store<T>(EXPR);                                                                 \
        }, src);                                                                                               \
    }

// Computed in double and rounded once to T: for +, -, *, / of float operands the double result
// rounded to float is the correctly rounded float result (53 >= 2 * 24 + 2).
ASCEND_KV_MODEL_BINARY(Add, a + b, false)
ASCEND_KV_MODEL_BINARY(Sub, a - b, false)
ASCEND_KV_MODEL_BINARY(Mul, a * b, false)
ASCEND_KV_MODEL_BINARY(Div, a / b, false)
ASCEND_KV_MODEL_BINARY(Max, (a > b ? a : b), true)
ASCEND_KV_MODEL_BINARY(Min, (a < b ? a : b), true)
ASCEND_KV_MODEL_SCALAR(Adds, a + b, false)
ASCEND_KV_MODEL_SCALAR(Muls, a * b, false)
ASCEND_KV_MODEL_SCALAR(Maxs, (a > b ? a : b), true)
ASCEND_KV_MODEL_SCALAR(Mins, (a < b ? a : b), true)

#undef ASCEND_KV_MODEL_BINARY
#undef ASCEND_KV_MODEL_SCALAR

template <typename T>
__aicore__ inline void Abs(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t& calCount)
{
    host_model::VectorOp("Abs", dst, calCount,
                         [&](int32_t i) { return host_model::Store<T>(std::fabs(host_model::Load(host_model::Elem(src, i)))); },
                         src);
}

template <typename T>
__aicore__ inline void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, const int32_t& calCount)
{
    host_model::VectorOp("Duplicate", dst, calCount, [&](int32_t) { return scalarValue; });
}

#endif // ASCEND_KV_HOST_MODEL_VECTOR_H
