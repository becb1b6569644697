// The quantization of a reshape_and_cache write and of a paged_cache_load read (docs/semantics.md §13,
// docs/semantics.md "Quantized caches"): the arguments of one side as given, their rules, and the
// parameters every backend reads (the CPU paths, the device fallback, the kernels).
#pragma once

#include <string>

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>

#include "csrc/rules/check.h"
#include "csrc/rules/tensors.h"

namespace ascend_kv {

/// How one side is quantized (write) or dequantized (load).
enum class QuantScheme : int64_t {
    kNone = 0,            ///< bytes copied as today
    kStaticDivide = 1,    ///< write Q(x / scale [+ offset]); load (q [- offset]) * scale
    kStaticMultiply = 2,  ///< write Q(x * inv_scale [+ offset]) (writes only)
    kDynamic = 3,         ///< per (token, head): write codes and the row's scale to scale_cache; load q * scale
};

/// One side's quantization arguments as the caller gave them; an undefined tensor is absent.
struct QuantArgs {
    at::Tensor scale, inv_scale, offset, scale_cache;
    bool Any() const { return scale.defined() || inv_scale.defined() || offset.defined() || scale_cache.defined(); }
};

/// One side's checked parameters. The token row is seen as [heads, head_size]: ND rows as they
/// are, NZ rows [T] as [H, T // H] with H given by the scale's shape or the scale cache (1 for
/// per-tensor and flat per-channel scales).
struct QuantSide {
    QuantScheme scheme = QuantScheme::kNone;
    c10::SymInt heads = 1, head_size = 1;
    /// Static: the scale (kStaticDivide) or inverse scale (kStaticMultiply) as [1, 1], [heads, 1]
    /// or [heads, head_size] (docs/semantics.md §13.1's per()), its own dtype; a view of the given tensor when
    /// one exists (else a copy).
    at::Tensor scale;
    at::Tensor offset;       ///< static, int8 codes: the zero point, same forms as scale; or undefined
    at::Tensor scale_cache;  ///< dynamic: [num_blocks, block_size, heads], the given memory, any strides
    /// Write, static: promote_types(input, scale[, offset]), each operation rounded to it;
    /// dynamic writes and every load: float32.
    at::ScalarType compute = at::kFloat;
    /// Write: the cache's dtype (int8, float8_e4m3fn, float8_e5m2); load: the output's dtype.
    at::ScalarType target = at::kFloat;

    bool Quantized() const { return scheme != QuantScheme::kNone; }
    bool Static() const { return scheme == QuantScheme::kStaticDivide || scheme == QuantScheme::kStaticMultiply; }
};

/// Both sides of a call; a call without quantization has two kNone sides.
struct QuantParams {
    QuantSide key, value;
    bool Any() const { return key.Quantized() || value.Quantized(); }
};

/// The dtypes a cache of codes may have: int8, float8_e4m3fn, float8_e5m2.
bool IsCodeDtype(at::ScalarType dtype);
/// float16, bfloat16, float32: inputs of a quantizing write, outputs of a dequantizing load, scales.
bool IsQuantFloat(at::ScalarType dtype);

/// TypeError unless `cache` holds codes (IsCodeDtype); `what` is "quantize" or "dequantize".
void RequireCodeCache(std::string_view name, const at::Tensor& cache, const char* what);
/// TypeError unless `t` is float16, bfloat16 or float32; `what` says what `t` is.
void RequireQuantFloat(std::string_view name, const at::Tensor& t, const char* what);

/// The rules on the combination of one side's arguments, before any tensor rule: at most one of
/// scale / inv_scale / scale_cache, an offset only with a static scale, nothing for the value side
/// of a key-only call. `prefix` is "k_" or "v_".
void RequireQuantCombination(const char* prefix, const QuantArgs& args, bool side_present);

/// One side's parameters after its rules: `tokens` the side's token rows as [rows, heads,
/// head_size] in ND (undefined in NZ reads, where `row` is the row's element count), `cache` its
/// data cache, `data_device` the call's device, `target` the codes' (write) or output's (load)
/// dtype, `input_dtype` the tokens' dtype (writes; the load passes kFloat). Every written
/// or read tensor of the call in `apart` is checked to share no byte with the scale cache.
struct QuantSideContext {
    const char* prefix;        ///< "k_" or "v_"
    const char* side;          ///< "key" or "value"
    const char* cache_name;    ///< "key_cache" or "value_cache"
    const at::Tensor& cache;
    bool nd;
    c10::SymInt heads, head_size;  ///< ND: the row's; NZ: 0 and the row's element count T
    c10::SymInt num_blocks, block_size;
    at::ScalarType input_dtype;
    bool load;
};
QuantSide CheckQuantSide(const QuantSideContext& context, const QuantArgs& args, Check check);

/// Aliasing: each scale cache shares no byte with `others` (data caches, inputs) nor the other.
void RequireQuantApart(const QuantParams& quant, c10::ArrayRef<Named> others);

/// Most elements of a token row the quantizing kernels hold in UB (its rows, stages and
/// per-channel parameters: ascendc/host/tiling.cpp); longer rows go to the device fallback.
constexpr int64_t kMaxQuantKernelRowElems = 4096;

/// Why the quantizing kernels do not take one side whose codes have dtype `codes` (empty when
/// they do, or when the side is not quantized).
std::string QuantKernelSideReason(const QuantSide& side, at::ScalarType codes);

/// Why the write kernel does not take a quantizing reshape_and_cache (empty when it does): codes
/// other than int8 (Atlas A2/A3 have no fp8 Cast, docs/semantics.md §13.4) or a row longer than
/// kMaxQuantKernelRowElems.
std::string QuantWriteOutsideReason(const QuantParams& quant);

}  // namespace ascend_kv
