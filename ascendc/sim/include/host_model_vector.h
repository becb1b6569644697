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
//     so a kernel dividing on A2/A3 is declared inexact (docs/semantics.md §13.4), never tested equal.
//     Subnormals are kept (the hardware may flush them: docs/semantics.md §13.4).
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

enum class RoundMode : uint8_t {
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

enum class CMPMODE : uint8_t { LT = 0, GT, EQ, LE, GE, NE };
enum class SELMODE : uint8_t { VSEL_CMPMASK_SPR = 0, VSEL_TENSOR_SCALAR_MODE, VSEL_TENSOR_TENSOR_MODE };

namespace host_model {

// Bit i of a bit mask (Compare's dst, Select's selMask): byte i / 8, bit i % 8 (lowest first).
inline bool MaskBit(const uint8_t* bytes, int32_t i) { return (bytes[i / 8] >> (i % 8)) & 1; }

// A reduction's work buffer: the first round's (value, index) pairs of ceil(count / perRepeat)
// repeats, rounded up to whole 32-byte blocks (the documented minimum without calIndex).
template <typename T>
int32_t ReduceWorkElems(int32_t count)
{
    const int32_t perRepeat = 256 / static_cast<int32_t>(sizeof(T));
    const int32_t perBlock = static_cast<int32_t>(kBlockBytes / sizeof(T));
    const int32_t pairs = 2 * ((count + perRepeat - 1) / perRepeat);
    return (pairs + perBlock - 1) / perBlock * perBlock;
}

// Level-2 ReduceMax/ReduceMin (float or half, calIndex false): dst[0] = the extreme of src[0, count).
// src and work start 32-byte aligned; dst only sizeof(T) aligned, as the documented value-only
// result needs (docs/host_model.md, "Signatures against Huawei's headers"); work holds ReduceWorkElems
// elements, is disjoint from src and dst and is left unspecified; a NaN operand stops the kernel
// (the result with NaN is not documented).
template <typename T, typename Pick>
void Reduce(const char* op, const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& work,
            int32_t count, bool calIndex, Pick pick)
{
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, half>, "ReduceMax/ReduceMin: half or float");
    if (calIndex) Fail(op, ": calIndex = true is not modelled");
    if (count < 1) Fail(op, ": count ", count, " must be at least 1");
    const auto& dm = Access::M(dst);
    dm.Live(op);
    if (dm.UbOffset() % sizeof(T) != 0 || dm.size < 1)
        Fail(op, ": dst (", dm.buf->owner, " at byte offset ", dm.byteOff, ") must start ", sizeof(T),
             "-byte aligned and hold an element");
    const uint32_t d = dm.UbOffset();
    const int32_t need = ReduceWorkElems<T>(count);
    const uint32_t w = Operand(work, need, op, "work");
    const uint32_t wb = static_cast<uint32_t>(need) * sizeof(T);
    const uint32_t sb = static_cast<uint32_t>(count) * sizeof(T);
    const uint64_t opNo = Issue(Engine::V);
    ReadOperand(src, count, op, opNo, w, wb);
    const uint32_t so = Access::M(src).UbOffset();
    if (w < d + sizeof(T) && d < w + wb) Fail(op, ": the work buffer overlaps dst");
    if (d < so + sb && so < d + sizeof(T)) Fail(op, ": dst overlaps src");
    if (w < so + sb && so < w + wb) Fail(op, ": the work buffer overlaps src");
    UbAccess(Engine::V, opNo, w, wb, true, op, Access::M(work).buf->owner, Access::M(work).buf->ubOffset);
    UbAccess(Engine::V, opNo, d, sizeof(T), true, op, dm.buf->owner, dm.buf->ubOffset);
    double best = 0.0;
    for (int32_t i = 0; i < count; ++i) {
        const double v = Load(Elem(src, i));
        NoNan<T>(v, v, op);
        best = i == 0 ? v : pick(v, best);
    }
    std::memset(Access::M(work).Bytes(), 0xA5, wb);  // intermediate values: unspecified
    const T out = Store<T>(best);
    std::memcpy(dm.Bytes(), &out, sizeof(T));
}

} // namespace host_model

template <typename T>
__aicore__ inline void ReduceMax(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& work,
                                 const int32_t count, bool calIndex = false)
{
    host_model::Reduce("ReduceMax", dst, src, work, count, calIndex, [](double v, double b) { return v > b ? v : b; });
}

template <typename T>
__aicore__ inline void ReduceMin(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& work,
                                 const int32_t count, bool calIndex = false)
{
    host_model::Reduce("ReduceMin", dst, src, work, count, calIndex, [](double v, double b) { return v < b ? v : b; });
}

// Level-2 Compare (float or half sources, uint8_t dst): bit i of dst = (src0[i] cmpMode src1[i]),
// IEEE comparisons (NaN compares unequal to everything, itself included). count * sizeof(T) must
// be a whole number of 256 bytes; dst holds count / 8 bytes.
template <typename T, typename U>
__aicore__ inline void Compare(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                               CMPMODE cmpMode, uint32_t count)
{
    static_assert(std::is_same_v<U, uint8_t>, "Compare: a uint8_t bit mask");
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, half>, "Compare: half or float sources");
    const char* op = "Compare";
    if (count == 0 || count * sizeof(T) % 256 != 0)
        host_model::Fail(op, ": count ", count, " of ", sizeof(T), "-byte elements is not a whole number of 256 bytes");
    const int32_t n = static_cast<int32_t>(count);
    const int32_t bytes = n / 8;
    const uint32_t d = host_model::Operand(dst, bytes, op, "dst");
    const uint64_t opNo = host_model::Issue(host_model::Engine::V);
    host_model::ReadOperand(src0, n, op, opNo, d, static_cast<uint32_t>(bytes));
    host_model::ReadOperand(src1, n, op, opNo, d, static_cast<uint32_t>(bytes));
    host_model::UbAccess(host_model::Engine::V, opNo, d, static_cast<uint32_t>(bytes), true, op,
                         host_model::Access::M(dst).buf->owner, host_model::Access::M(dst).buf->ubOffset);
    std::vector<uint8_t> out(static_cast<size_t>(bytes), 0);
    for (int32_t i = 0; i < n; ++i) {
        const double a = host_model::Load(host_model::Elem(src0, i));
        const double b = host_model::Load(host_model::Elem(src1, i));
        bool r = false;
        switch (cmpMode) {
            case CMPMODE::LT: r = a < b; break;
            case CMPMODE::GT: r = a > b; break;
            case CMPMODE::EQ: r = a == b; break;
            case CMPMODE::LE: r = a <= b; break;
            case CMPMODE::GE: r = a >= b; break;
            case CMPMODE::NE: r = a != b; break;
        }
        if (r) out[static_cast<size_t>(i / 8)] |= static_cast<uint8_t>(1u << (i % 8));
    }
    std::memcpy(host_model::Access::M(dst).Bytes(), out.data(), out.size());
}

// Level-2 Select, mode VSEL_TENSOR_SCALAR_MODE (the only mode modelled): dst[i] = bit i of selMask
// ? src0[i] : src1 (a scalar), for float or half; selMask holds ceil(count / 8) bytes.
template <typename T, typename U>
__aicore__ inline void Select(const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0,
                              T src1, SELMODE selMode, uint32_t count)
{
    static_assert(std::is_same_v<U, uint8_t>, "Select: a uint8_t bit mask");
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, half>, "Select: half or float");
    const char* op = "Select";
    if (selMode != SELMODE::VSEL_TENSOR_SCALAR_MODE) host_model::Fail(op, ": only VSEL_TENSOR_SCALAR_MODE is modelled");
    const int32_t n = static_cast<int32_t>(count);
    const uint32_t d = host_model::Operand(dst, n, op, "dst");
    const uint32_t db = count * sizeof(T);
    const uint64_t opNo = host_model::Issue(host_model::Engine::V);
    host_model::ReadOperand(selMask, (n + 7) / 8, op, opNo, d, db);
    host_model::ReadOperand(src0, n, op, opNo, d, db);
    host_model::UbAccess(host_model::Engine::V, opNo, d, db, true, op, host_model::Access::M(dst).buf->owner,
                         host_model::Access::M(dst).buf->ubOffset);
    const uint8_t* bits = host_model::Access::M(selMask).Bytes();
    std::vector<T> out(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = host_model::MaskBit(bits, i) ? host_model::Elem(src0, i) : src1;
    std::memcpy(host_model::Access::M(dst).Bytes(), out.data(), db);
}

#endif // ASCEND_KV_HOST_MODEL_VECTOR_H
