// The host paths of quantized caches: reshape_and_cache writing codes (and row scales) and
// paged_cache_load dequantizing them, with the arithmetic of quant_math.h (dense int8 rows by
// quant_avx2.h's loops), over torch's threads
// and the slot loops every host path shares (slot_loops.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "cpu_fallback/copy.h"
#include "cpu_fallback/host.h"
#include "cpu_fallback/quant_avx2.h"
#include "cpu_fallback/quant_math.h"
#include "cpu_fallback/slot_loops.h"

// The element loops below are the CPU paths' arithmetic: vectorised at the cost model of -O3 (the
// library builds at -O2, whose very cheap model leaves them scalar); restored at the end of the file,
// which may share a translation unit.
#pragma GCC push_options
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")

namespace ascend_kv::quant_math {

uint32_t TorchNanBits(c10::ScalarType from, c10::ScalarType to, uint32_t bits)
{
    static std::mutex lock;
    static std::map<std::tuple<c10::ScalarType, c10::ScalarType, uint32_t>, uint32_t> asked;
    const std::lock_guard<std::mutex> guard(lock);
    const auto found = asked.find({from, to, bits});
    if (found != asked.end()) {
        return found->second;
    }
    // A vector's worth: torch's vectorised loop, as on the reference's tensors.
    std::vector<uint32_t> wide(64, bits);
    std::vector<uint16_t> narrow(64, static_cast<uint16_t>(bits));
    const at::Tensor values = from == c10::ScalarType::Float
                                  ? at::from_blob(wide.data(), {64}, at::TensorOptions().dtype(at::kFloat))
                                  : at::from_blob(narrow.data(), {64}, at::TensorOptions().dtype(from));
    const at::Tensor converted = values.to(to).contiguous();
    uint32_t result = 0;
    std::memcpy(&result, converted.const_data_ptr(), c10::elementSize(to));
    asked[{from, to, bits}] = result;
    return result;
}

}  // namespace ascend_kv::quant_math

namespace ascend_kv::host {
namespace {

using quant_math::Round;

/// Where each element (h, d) of a token row [heads, head_size] lies, in bytes from the row's first
/// one: ND rows [.., heads, head_size] by their two strides, NZ rows by the piece (dim 1) and the
/// element in it (dim 3) of element h * head_size + d.
std::vector<int64_t> RowOffsets(const at::Tensor& t, bool nz, int64_t heads, int64_t head_size)
{
    const int64_t size = t.element_size(), dims = t.dim();
    // Element j = outer * inner + k lies at outer * step + k * inner_step.
    int64_t outer = heads, inner = head_size, step = 0, inner_step = 0;
    if (nz) {
        inner = t.size(3);
        outer = heads * head_size / inner;
        step = t.stride(1);
        inner_step = t.stride(3);
    } else if (dims == 2) {  // an NZ load's output row [T]
        outer = 1;
        inner = heads * head_size;
        inner_step = t.stride(1);
    } else {
        step = t.stride(dims - 2);
        inner_step = t.stride(dims - 1);
    }
    std::vector<int64_t> offsets(heads * head_size);
    for (int64_t o = 0; o < outer; ++o) {
        for (int64_t k = 0; k < inner; ++k) {
            offsets[o * inner + k] = (o * step + k * inner_step) * size;
        }
    }
    return offsets;
}

/// Whether a row's elements (as RowOffsets places them) lie in order, one after the other: read off
/// the strides, so a dense row needs no offsets.
bool DenseRow(const at::Tensor& t, bool nz, int64_t heads, int64_t head_size)
{
    const int64_t dims = t.dim();
    if (nz) {
        return t.stride(3) == 1 && (t.size(1) == 1 || t.stride(1) == t.size(3));
    }
    if (dims == 2) {
        return t.stride(1) == 1;
    }
    return t.stride(dims - 1) == 1 && (heads == 1 || t.stride(dims - 2) == head_size);
}

/// One element of `dtype` (float16, bfloat16 or float32) at `at` as a float (exact).
float LoadFloat(at::ScalarType dtype, const char* at)
{
    switch (dtype) {
        case at::kHalf: return quant_math::Widen(*reinterpret_cast<const c10::Half*>(at));
        case at::kBFloat16: return quant_math::Widen(*reinterpret_cast<const c10::BFloat16*>(at));
        default: return *reinterpret_cast<const float*>(at);
    }
}

/// Element (h, d) of [heads, head_size] elements of T at `data`, a size-1 dim broadcast by a zero
/// `step` (elements), into out[h * head_size + d] as floats (exact).
template <typename T>
void BroadcastAs(const void* data, int64_t step_h, int64_t step_d, int64_t heads, int64_t head_size, float* out)
{
    const T* in = static_cast<const T*>(data);
    for (int64_t h = 0; h < heads; ++h) {
        for (int64_t d = 0; d < head_size; ++d) {
            const T v = in[h * step_h + d * step_d];
            if constexpr (std::is_same_v<T, c10::Half> || std::is_same_v<T, c10::BFloat16>) {
                out[h * head_size + d] = quant_math::Widen(v);
            } else {
                out[h * head_size + d] = static_cast<float>(v);
            }
        }
    }
}

/// A normal-form scale or offset ([1, 1], [H, 1] or [H, D]) broadcast to [H * D] floats (exact).
std::vector<float> Broadcast(const at::Tensor& t, int64_t heads, int64_t head_size)
{
    std::vector<float> values(heads * head_size, 0.0f);
    if (!t.defined()) {
        return values;
    }
    // Read in place (no ATen call: a decode step's host cost).
    const int64_t step_h = t.size(0) == 1 ? 0 : t.stride(0), step_d = t.size(1) == 1 ? 0 : t.stride(1);
    const void* data = t.const_data_ptr();
    switch (t.scalar_type()) {
        case at::kChar: BroadcastAs<int8_t>(data, step_h, step_d, heads, head_size, values.data()); break;
        case at::kInt: BroadcastAs<int32_t>(data, step_h, step_d, heads, head_size, values.data()); break;
        case at::kHalf: BroadcastAs<c10::Half>(data, step_h, step_d, heads, head_size, values.data()); break;
        case at::kBFloat16: BroadcastAs<c10::BFloat16>(data, step_h, step_d, heads, head_size, values.data()); break;
        default: BroadcastAs<float>(data, step_h, step_d, heads, head_size, values.data());
    }
    return values;
}

/// The n elements of a row of In at `offsets` (or, `dense`, in order) as floats, as torch widens them.
template <typename In>
void Widened(const char* row, const std::vector<int64_t>& offsets, bool dense, int64_t n, float* out)
{
    const In* in = reinterpret_cast<const In*>(row);
    for (int64_t j = 0; j < n; ++j) {
        const In v = dense ? in[j] : *reinterpret_cast<const In*>(row + offsets[j]);
        if constexpr (std::is_same_v<In, float>) {
            out[j] = v;
        } else {
            out[j] = quant_math::Widen(v);
        }
    }
}

/// A row of n `dtype` elements at `offsets` from `row` (or, `dense`, in order) as floats (exact).
void ToFloat(at::ScalarType dtype, const char* row, const std::vector<int64_t>& offsets, bool dense, int64_t n,
             float* out)
{
    switch (dtype) {
        case at::kHalf: Widened<c10::Half>(row, offsets, dense, n, out); break;
        case at::kBFloat16: Widened<c10::BFloat16>(row, offsets, dense, n, out); break;
        default: Widened<float>(row, offsets, dense, n, out);
    }
}

/// `v` stored as `dtype` (float16, bfloat16 or float32; rounded to nearest even).
void StoreFloat(at::ScalarType dtype, float v, char* at)
{
    switch (dtype) {
        case at::kHalf: *reinterpret_cast<c10::Half*>(at) = quant_math::Narrow<c10::Half>(v); break;
        case at::kBFloat16: *reinterpret_cast<c10::BFloat16*>(at) = quant_math::Narrow<c10::BFloat16>(v); break;
        default: *reinterpret_cast<float*>(at) = v;
    }
}

/// One side of a write: its tokens and cache, and how it quantizes.
struct WriteSide {
    const QuantSide* quant = nullptr;
    at::ScalarType input_dtype = at::kFloat;
    int64_t heads = 0, head_size = 0, element_size = 1;
    const char* tokens = nullptr;
    int64_t token_step = 0;
    std::vector<int64_t> src, dst;  ///< element offsets in a token row, in a cache slot
    bool src_dense = false, dst_dense = false;  ///< offsets that are the elements in order
    char* cache = nullptr;
    int64_t block_step = 0, slot_step = 0;
    std::vector<float> scale, offset;  ///< static: [H * D], exact
    char* scale_cache = nullptr;        ///< dynamic
    int64_t scale_block = 0, scale_slot = 0, scale_head = 0;
    /// Codes of one token row `x` [H * D] floats into `codes`; a dynamic side stores the row scales.
    void (*encode)(const WriteSide&, const float* x, uint8_t* codes, char* scales) = nullptr;
    /// Instead, int8 codes of one dense token row straight into its dense slot (static, AVX2).
    void (*quantize)(const WriteSide&, const char* row, char* slot) = nullptr;
};

#if ASCEND_KV_AVX2
template <typename In, typename Ct, bool kDivide>
void QuantizeRow(const WriteSide& s, const char* row, char* slot)
{
    quant_avx2::QuantizeStatic<In, Ct, kDivide>(reinterpret_cast<const In*>(row), s.scale.data(), s.offset.data(),
                                                reinterpret_cast<int8_t*>(slot), s.heads * s.head_size);
}

template <typename In>
auto RowQuantizer(at::ScalarType compute, bool divide) -> decltype(WriteSide::quantize)
{
    switch (compute) {
        case at::kHalf: return divide ? &QuantizeRow<In, c10::Half, true> : &QuantizeRow<In, c10::Half, false>;
        case at::kBFloat16:
            return divide ? &QuantizeRow<In, c10::BFloat16, true> : &QuantizeRow<In, c10::BFloat16, false>;
        default: return divide ? &QuantizeRow<In, float, true> : &QuantizeRow<In, float, false>;
    }
}

/// The AVX2 row quantizer of a side, when it has one: static int8 codes, dense rows of a multiple of
/// quant_avx2::kStep elements, on an AVX2 CPU.
auto VectorQuantizer(const WriteSide& s, at::ScalarType code) -> decltype(WriteSide::quantize)
{
    if (!s.quant->Static() || code != at::kChar || !s.src_dense || !s.dst_dense ||
        s.heads * s.head_size % quant_avx2::kStep != 0 || !quant_avx2::Available()) {
        return nullptr;
    }
    const bool divide = s.quant->scheme == QuantScheme::kStaticDivide;
    switch (s.input_dtype) {
        case at::kHalf: return RowQuantizer<c10::Half>(s.quant->compute, divide);
        case at::kBFloat16: return RowQuantizer<c10::BFloat16>(s.quant->compute, divide);
        default: return RowQuantizer<float>(s.quant->compute, divide);
    }
}
#endif

template <typename Ct, typename Code, bool kDivide>
void EncodeStatic(const WriteSide& s, const float* x, uint8_t* codes, char*)
{
    const int64_t n = s.heads * s.head_size;
    Code* out = reinterpret_cast<Code*>(codes);
    for (int64_t j = 0; j < n; ++j) {
        float t = kDivide ? Round<Ct>(x[j] / s.scale[j]) : Round<Ct>(x[j] * s.scale[j]);
        if constexpr (std::is_same_v<Code, int8_t>) {
            t = Round<Ct>(t + s.offset[j]);  // zeros without an offset: exact, the same code
        }
        out[j] = quant_math::Encode<Code>(t);
    }
}

template <typename Code>
void EncodeDynamic(const WriteSide& s, const float* x, uint8_t* codes, char* scales)
{
    Code* out = reinterpret_cast<Code*>(codes);
    const at::ScalarType scale_dtype = s.quant->scale_cache.scalar_type();
    for (int64_t h = 0; h < s.heads; ++h) {
        const float* row = x + h * s.head_size;
        Code* q = out + h * s.head_size;
        const float a = quant_math::AbsMax(row, s.head_size);
        float scale;
        if constexpr (std::is_same_v<Code, int8_t>) {
            const float m = 127.0f / a;
            for (int64_t d = 0; d < s.head_size; ++d) {
                q[d] = quant_math::Encode<Code>(row[d] * m);
            }
            scale = a * quant_math::InverseMax<Code>();
        } else {
            scale = a * quant_math::InverseMax<Code>();
            for (int64_t d = 0; d < s.head_size; ++d) {
                const float y = row[d] / scale;
                q[d] = quant_math::Encode<Code>(std::isnan(y) ? 0.0f : y);
            }
        }
        StoreFloat(scale_dtype, scale, scales + h * s.scale_head);
    }
}

template <typename Code>
auto StaticEncoder(at::ScalarType compute, bool divide) -> decltype(WriteSide::encode)
{
    switch (compute) {
        case at::kHalf: return divide ? &EncodeStatic<c10::Half, Code, true> : &EncodeStatic<c10::Half, Code, false>;
        case at::kBFloat16:
            return divide ? &EncodeStatic<c10::BFloat16, Code, true> : &EncodeStatic<c10::BFloat16, Code, false>;
        default: return divide ? &EncodeStatic<float, Code, true> : &EncodeStatic<float, Code, false>;
    }
}

template <typename Code>
auto Encoder(const QuantSide& q) -> decltype(WriteSide::encode)
{
    if (q.scheme == QuantScheme::kDynamic) {
        return &EncodeDynamic<Code>;
    }
    return StaticEncoder<Code>(q.compute, q.scheme == QuantScheme::kStaticDivide);
}

WriteSide MakeWriteSide(const at::Tensor& tokens, const at::Tensor& cache, const QuantSide& q, bool nd)
{
    WriteSide s;
    s.quant = &q;
    s.input_dtype = tokens.scalar_type();
    s.heads = tokens.size(1);
    s.head_size = tokens.size(2);
    s.element_size = cache.element_size();
    s.tokens = static_cast<const char*>(tokens.const_data_ptr());
    s.token_step = tokens.stride(0) * tokens.element_size();
    s.src_dense = DenseRow(tokens, false, s.heads, s.head_size);
    s.dst_dense = DenseRow(cache, !nd, s.heads, s.head_size);
    if (!(q.Quantized() && s.src_dense && s.dst_dense)) {  // else the offsets go unread: not made per call
        s.src = RowOffsets(tokens, false, s.heads, s.head_size);
        s.dst = RowOffsets(cache, !nd, s.heads, s.head_size);
    }
    s.cache = static_cast<char*>(cache.data_ptr());
    s.block_step = cache.stride(0) * s.element_size;
    s.slot_step = cache.stride(nd ? 1 : 2) * s.element_size;
    if (q.Static()) {
        s.scale = Broadcast(q.scale, s.heads, s.head_size);
        s.offset = Broadcast(q.offset, s.heads, s.head_size);
        if (q.compute != at::kFloat) {  // offset.to(compute): rounded once (an int32 zero point)
            for (float& o : s.offset) {
                o = q.compute == at::kHalf ? Round<c10::Half>(o) : Round<c10::BFloat16>(o);
            }
        }
    }
    if (q.scheme == QuantScheme::kDynamic) {
        const at::Tensor& sc = q.scale_cache;
        const int64_t size = sc.element_size();
        s.scale_cache = static_cast<char*>(sc.data_ptr());
        s.scale_block = sc.stride(0) * size;
        s.scale_slot = sc.stride(1) * size;
        s.scale_head = sc.stride(2) * size;
    }
    if (q.Quantized()) {
        switch (cache.scalar_type()) {
            case at::kChar: s.encode = Encoder<int8_t>(q); break;
            case at::kFloat8_e4m3fn: s.encode = Encoder<c10::Float8_e4m3fn>(q); break;
            default: s.encode = Encoder<c10::Float8_e5m2>(q);
        }
#if ASCEND_KV_AVX2
        s.quantize = VectorQuantizer(s, cache.scalar_type());
#endif
    }
    return s;
}

/// One side of a load: its cache and output, and how it dequantizes.
struct LoadSide {
    const QuantSide* quant = nullptr;
    int64_t heads = 0, head_size = 0, in_size = 1, out_size = 1;
    const char* cache = nullptr;
    int64_t block_step = 0, slot_step = 0;
    char* out = nullptr;
    int64_t out_step = 0;
    std::vector<int64_t> src, dst;     ///< element offsets in a cache slot, in an output row
    std::vector<float> scale, offset;  ///< static: [H * D], exact
    const char* scale_cache = nullptr;
    int64_t scale_block = 0, scale_slot = 0, scale_head = 0;
    at::ScalarType scale_dtype = at::kFloat;
    bool dense = false;  ///< src and dst are the elements in order, one after the other
    bool vector = false;  ///< dense int8 rows of a multiple of quant_avx2::kStep, on an AVX2 CPU
    bool stream = false;  ///< vector rows stored past the caches (a large call, 32-byte aligned rows)
    bool tame = false;    ///< static scales finite and offsets far from overflow: (q - offset) * scale is no NaN
    /// One token's output row from its cache slot (`scales`: its row scales, dynamic).
    void (*decode)(const LoadSide&, const char* slot, const char* scales, char* out) = nullptr;
};

/// `v` stored as Out (float32, or rounded to float16/bfloat16, NaN as torch stores it).
template <typename Out>
inline Out Store(float v)
{
    if constexpr (std::is_same_v<Out, float>) {
        return v;
    } else {
        return quant_math::Narrow<Out>(v);
    }
}

/// A non-NaN `v` rounded to Out (to nearest, ties to even): bfloat16 by integer operations the compiler
/// vectorises (c10's rounding, without its NaN test).
template <typename Out>
inline Out Rounded(float v)
{
    if constexpr (std::is_same_v<Out, c10::BFloat16>) {
        uint32_t bits;
        std::memcpy(&bits, &v, sizeof bits);
        return Out(static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16), Out::from_bits());
    } else {
        return static_cast<Out>(v);
    }
}

#if ASCEND_KV_AVX2
/// A dense int8 row dequantized by the AVX2 loops, static in one pass, dynamic head by head; a NaN's
/// bits fixed after, as Decode does (sought only where scales can make one: codes are finite).
template <typename Out, bool kStream>
void DecodeVector(const LoadSide& s, const int8_t* in, const char* scales, Out* out)
{
    const float* offset = s.offset.data();
    const float* scale = s.scale.data();
    if (s.quant->scheme != QuantScheme::kDynamic) {
        const int64_t n = s.heads * s.head_size;
        if (s.tame) {
            quant_avx2::Dequantize<Out, false, kStream, false>(in, offset, scale, 0.0f, out, n);
        } else if (quant_avx2::Dequantize<Out, false, kStream, true>(in, offset, scale, 0.0f, out, n)) {
            for (int64_t j = 0; j < n; ++j) {
                out[j] = Store<Out>((quant_math::Decode(in[j]) - offset[j]) * scale[j]);
            }
        }
        return;
    }
    for (int64_t h = 0, first = 0; h < s.heads; ++h, first += s.head_size) {
        const float row_scale = LoadFloat(s.scale_dtype, scales + h * s.scale_head);
        if (std::isfinite(row_scale)) {  // q * a finite scale: never NaN
            quant_avx2::Dequantize<Out, true, kStream, false>(in + first, nullptr, nullptr, row_scale, out + first,
                                                              s.head_size);
        } else if (quant_avx2::Dequantize<Out, true, kStream, true>(in + first, nullptr, nullptr, row_scale,
                                                                     out + first, s.head_size)) {
            for (int64_t j = first; j < first + s.head_size; ++j) {
                out[j] = Store<Out>(quant_math::Decode(in[j]) * row_scale);
            }
        }
    }
}
#endif

/// One token's output row from its cache slot (`scales`: its row scales, dynamic): dense rows
/// (the usual ND cache and output) by the AVX2 loops or plain ones, others through the element offsets.
template <typename Code, typename Out>
void Decode(const LoadSide& s, const char* slot, const char* scales, char* out)
{
#if ASCEND_KV_AVX2
    if constexpr (std::is_same_v<Code, int8_t>) {
        if (s.vector) {
            const auto* in = reinterpret_cast<const int8_t*>(slot);
            s.stream ? DecodeVector<Out, true>(s, in, scales, reinterpret_cast<Out*>(out))
                     : DecodeVector<Out, false>(s, in, scales, reinterpret_cast<Out*>(out));
            return;
        }
    }
#endif
    const bool dynamic = s.quant->scheme == QuantScheme::kDynamic;
    const Code* dense_in = reinterpret_cast<const Code*>(slot);
    Out* dense_out = reinterpret_cast<Out*>(out);
    const float* offset = s.offset.data();
    const float* scale = s.scale.data();
    for (int64_t h = 0; h < s.heads; ++h) {
        const float row_scale = dynamic ? LoadFloat(s.scale_dtype, scales + h * s.scale_head) : 0.0f;
        const int64_t first = h * s.head_size, last = first + s.head_size;
        const auto value = [&](int64_t j) {
            const float q = quant_math::Decode(s.dense ? dense_in[j] : *reinterpret_cast<const Code*>(slot + s.src[j]));
            return dynamic ? q * row_scale : (q - offset[j]) * scale[j];
        };
        if (!s.dense) {
            for (int64_t j = first; j < last; ++j) {
                const Out v = Store<Out>(value(j));
                std::memcpy(out + s.dst[j], &v, sizeof v);
            }
            continue;
        }
        // Rounded without NaN tests (a NaN's bits fixed after, in the rare row that has one).
        bool nan = false;
        int64_t j = first;
        for (; j < last; ++j) {
            const float y = value(j);
            nan |= y != y;
            dense_out[j] = Rounded<Out>(y);
        }
        for (j = first; nan && j < last; ++j) {
            dense_out[j] = Store<Out>(value(j));
        }
    }
}

template <typename Code>
auto DecoderOf(at::ScalarType out) -> decltype(LoadSide::decode)
{
    switch (out) {
        case at::kHalf: return &Decode<Code, c10::Half>;
        case at::kBFloat16: return &Decode<Code, c10::BFloat16>;
        default: return &Decode<Code, float>;
    }
}

LoadSide MakeLoadSide(const at::Tensor& cache, const at::Tensor& out, const QuantSide& q, bool nd, int64_t tokens)
{
    LoadSide s;
    s.quant = &q;
    if (q.Quantized()) {
        s.heads = q.heads.expect_int();
        s.head_size = q.head_size.expect_int();
    } else {  // bytes as they are: ND rows [heads, head_size], NZ rows [T] as one head
        s.heads = nd ? cache.size(2) : 1;
        s.head_size = nd ? cache.size(3) : cache.size(1) * cache.size(3);
    }
    s.in_size = cache.element_size();
    s.out_size = out.element_size();
    s.cache = static_cast<const char*>(cache.const_data_ptr());
    s.block_step = cache.stride(0) * s.in_size;
    s.slot_step = cache.stride(nd ? 1 : 2) * s.in_size;
    s.out = static_cast<char*>(out.data_ptr());
    s.out_step = out.stride(0) * s.out_size;
    s.dense = DenseRow(cache, !nd, s.heads, s.head_size) && DenseRow(out, false, s.heads, s.head_size);
    if (!(q.Quantized() && s.dense)) {  // else the offsets go unread: not made per call
        s.src = RowOffsets(cache, !nd, s.heads, s.head_size);
        s.dst = RowOffsets(out, false, s.heads, s.head_size);
    }
    s.vector = q.Quantized() && s.dense && cache.scalar_type() == at::kChar &&
               s.head_size % quant_avx2::kStep == 0 && quant_avx2::Available();
    s.stream = s.vector && ShouldStream(tokens * s.heads * s.head_size * s.out_size, kStreamLoads) &&
               reinterpret_cast<uintptr_t>(s.out) % 32 == 0 && s.out_step % 32 == 0;
    if (q.Static()) {
        s.scale = Broadcast(q.scale, s.heads, s.head_size);
        s.offset = Broadcast(q.offset, s.heads, s.head_size);
    }
    if (q.Static() && s.vector) {
        s.tame = std::all_of(s.scale.begin(), s.scale.end(), [](float v) { return std::isfinite(v); }) &&
                 std::all_of(s.offset.begin(), s.offset.end(), [](float v) { return std::fabs(v) < 1e30f; });
    }
    if (q.scheme == QuantScheme::kDynamic) {
        const at::Tensor& sc = q.scale_cache;
        const int64_t size = sc.element_size();
        s.scale_cache = static_cast<const char*>(sc.const_data_ptr());
        s.scale_block = sc.stride(0) * size;
        s.scale_slot = sc.stride(1) * size;
        s.scale_head = sc.stride(2) * size;
        s.scale_dtype = sc.scalar_type();
    }
    if (q.Quantized()) {
        switch (cache.scalar_type()) {
            case at::kChar: s.decode = DecoderOf<int8_t>(q.target); break;
            case at::kFloat8_e4m3fn: s.decode = DecoderOf<c10::Float8_e4m3fn>(q.target); break;
            default: s.decode = DecoderOf<c10::Float8_e5m2>(q.target);
        }
    }
    return s;
}

/// A side copied as bytes, element by element (the other side of a quantized call).
void CopyElements(const char* from, const std::vector<int64_t>& src, char* to, const std::vector<int64_t>& dst,
                  int64_t size)
{
    for (size_t j = 0; j < src.size(); ++j) {
        std::memcpy(to + dst[j], from + src[j], size);
    }
}

}  // namespace

void ReshapeAndCacheQuant(const ReshapeAndCacheCall& call, const at::Tensor& slots)
{
    const int64_t n = slots.size(0), block_size = call.geometry.block_size.expect_int();
    if (n == 0 || call.geometry.Capacity().expect_int() == 0) {
        return;
    }
    const BatchValues slot_of = SlotsOf(slots);
    const bool nd = call.geometry.Nd();
    std::vector<WriteSide> sides = {MakeWriteSide(call.key, call.key_cache, call.quant.key, nd)};
    if (!call.KeyOnly()) {
        sides.push_back(MakeWriteSide(call.value, call.value_cache, call.quant.value, nd));
    }
    int64_t token_bytes = 0, widest = 0;
    for (const WriteSide& s : sides) {
        token_bytes += s.heads * s.head_size * 4;  // the arithmetic costs more than the bytes
        widest = std::max(widest, s.heads * s.head_size);
    }
    const auto write = [&](int64_t i, int64_t slot) {
        thread_local std::vector<float> x;
        thread_local std::vector<uint8_t> codes;
        x.resize(widest);
        codes.resize(widest);
        const int64_t block = slot / block_size, position = slot % block_size;
        for (const WriteSide& s : sides) {
            const char* row = s.tokens + i * s.token_step;
            char* target = s.cache + block * s.block_step + position * s.slot_step;
            if (s.quantize) {
                s.quantize(s, row, target);
                continue;
            }
            if (!s.encode) {
                CopyElements(row, s.src, target, s.dst, s.element_size);
                continue;
            }
            ToFloat(s.input_dtype, row, s.src, s.src_dense, s.heads * s.head_size, x.data());
            char* scales = s.scale_cache ? s.scale_cache + block * s.scale_block + position * s.scale_slot : nullptr;
            s.encode(s, x.data(), s.dst_dense ? reinterpret_cast<uint8_t*>(target) : codes.data(), scales);
            if (!s.dst_dense) {
                for (size_t j = 0; j < s.dst.size(); ++j) {
                    target[s.dst[j]] = static_cast<char>(codes[j]);
                }
            }
        }
    };
    ForEachSlot(slot_of, block_size, token_bytes, write, [] {});
}

void PagedLoadDequant(const PagedLoadCall& call, const PagedLoadPlan& plan)
{
    int64_t tokens = 0;
    for (const int64_t n : plan.lens) {
        tokens += n;
    }
    if (tokens == 0) {
        return;
    }
    const bool nd = call.geometry.Nd();
    const LoadSide sides[2] = {MakeLoadSide(call.key_cache, call.key, call.quant.key, nd, tokens),
                               MakeLoadSide(call.value_cache, call.value, call.quant.value, nd, tokens)};
    int64_t token_bytes = 0;
    for (const LoadSide& s : sides) {
        token_bytes += s.heads * s.head_size * 8;
    }
    const auto run = [&](int64_t r, int64_t block, int64_t slot, int64_t n, bool valid) {
        for (const LoadSide& s : sides) {
            if (!valid || !s.decode) {
                for (int64_t k = 0; k < n; ++k) {
                    char* out = s.out + (r + k) * s.out_step;
                    if (valid) {
                        CopyElements(s.cache + block * s.block_step + (slot + k) * s.slot_step, s.src, out, s.dst,
                                     s.in_size);
                    } else if (s.dst.empty()) {  // a dense row
                        std::memset(out, 0, s.heads * s.head_size * s.out_size);
                    } else {
                        for (const int64_t at : s.dst) {
                            std::memset(out + at, 0, s.out_size);
                        }
                    }
                }
                continue;
            }
            for (int64_t k = 0; k < n; ++k) {
                const char* scales =
                    s.scale_cache ? s.scale_cache + block * s.scale_block + (slot + k) * s.scale_slot : nullptr;
                s.decode(s, s.cache + block * s.block_step + (slot + k) * s.slot_step, scales,
                         s.out + (r + k) * s.out_step);
            }
        }
    };
    const bool stream = sides[0].stream || sides[1].stream;
    ForEachLoadRun(call, plan, tokens, token_bytes, run, [&] { EndStreaming(stream); });
}

}  // namespace ascend_kv::host

#pragma GCC pop_options
