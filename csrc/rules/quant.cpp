#include "csrc/rules/quant.h"

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <ATen/Dispatch.h>

#include "csrc/rules/memory.h"
#include "csrc/rules/tensors.h"
#include "csrc/rules/text.h"

namespace ascend_kv {
namespace {

constexpr at::ScalarType kCodeDtypes[] = {at::kChar, at::kFloat8_e4m3fn, at::kFloat8_e5m2};
constexpr at::ScalarType kQuantFloats[] = {at::kHalf, at::kBFloat16, at::kFloat};
constexpr at::ScalarType kOffsetDtypes[] = {at::kHalf, at::kBFloat16, at::kFloat, at::kChar, at::kInt};

enum class Form { kTensor, kHead, kChannel };

/// Which of docs/semantics.md §13.1's forms `t` has for rows [heads, head_size], if any.
std::optional<Form> FormOf(const at::Tensor& t, const c10::SymInt& heads, const c10::SymInt& head_size)
{
    const auto s = t.sym_sizes();
    const int64_t n = t.dim();
    bool ones = n <= 3;
    for (const c10::SymInt& size : s) {
        ones = ones && size == 1;
    }
    if (ones) {
        return Form::kTensor;
    }
    if ((n == 1 && s[0] == heads) || (n == 2 && s[0] == heads && s[1] == 1) ||
        (n == 3 && s[0] == 1 && s[1] == heads && s[2] == 1)) {
        return Form::kHead;
    }
    if ((n == 1 && s[0] == heads * head_size) || (n == 2 && s[0] == heads && s[1] == head_size) ||
        (n == 3 && s[0] == 1 && s[1] == heads && s[2] == head_size)) {
        return Form::kChannel;
    }
    return std::nullopt;
}

/// The heads an NZ row of `row` elements has by `t`'s shape: a per-head or [H, D]-shaped scale
/// says H; anything else leaves the row as one head (0 when the shape names a count that does not
/// divide the row: the shape rule then raises).
c10::SymInt NzHeads(const at::Tensor& t, const c10::SymInt& row)
{
    const auto s = t.sym_sizes();
    c10::SymInt heads = 1;
    if (t.dim() == 1 && s[0] != row) {
        heads = s[0];
    } else if (t.dim() == 2) {
        heads = s[0];
    } else if (t.dim() == 3) {
        heads = s[1];
    }
    return heads != 0 && row % heads == 0 ? heads : c10::SymInt(1);
}

/// `t` in its normal form [1, 1], [heads, 1] or [heads, head_size].
at::Tensor Normal(const at::Tensor& t, Form form, const c10::SymInt& heads, const c10::SymInt& head_size)
{
    switch (form) {
        case Form::kTensor: return t.reshape_symint({1, 1});
        case Form::kHead: return t.reshape_symint({heads, 1});
        default: return t.reshape_symint({heads, head_size});
    }
}

/// A scale or offset after its rules, in its normal form.
at::Tensor CheckScaleLike(const std::string& name, const at::Tensor& t, c10::ArrayRef<at::ScalarType> dtypes,
                          const QuantSideContext& c, const c10::SymInt& heads, const c10::SymInt& head_size,
                          Check check)
{
    RequireData(name, t, AllowsMeta(check, c.cache));
    RequireDtype(name, t, dtypes);
    const std::optional<Form> form = FormOf(t, heads, head_size);
    TORCH_CHECK_VALUE(form.has_value(), name, " must have one element (per tensor), shape [H], [H, 1] or [1, H, 1] "
                      "(per head) or [H*D], [H, D] or [1, H, D] (per channel), with H = ", heads, ", D = ", head_size,
                      c.nd ? "" : " (an NZ row of H * D elements)", ", got shape ", ShapeOf(t));
    TORCH_CHECK_VALUE(t.device() == c.cache.device(), name, " is on ", t.device(), " but ", c.cache_name, " is on ",
                      c.cache.device(), ": all tensor arguments must be on one device");
    return Normal(t, *form, heads, head_size);
}

/// `value` as Python prints a float that is not finite or is zero.
std::string OddFloat(double value)
{
    if (std::isnan(value)) {
        return "nan";
    }
    if (std::isinf(value)) {
        return value > 0 ? "inf" : "-inf";
    }
    return std::signbit(value) ? "-0.0" : "0.0";
}

/// ValueError naming the first element of host tensor `t` (float16, bfloat16 or float32: integer
/// offsets are always finite) that is not finite, or is zero when `nonzero`; `what` says whose it is.
void RequireFiniteValues(const std::string& name, const at::Tensor& t, bool nonzero, const char* what)
{
    if (!c10::isFloatingType(t.scalar_type()) || t.numel() == 0) {
        return;
    }
    const int64_t n = t.dim();
    std::vector<int64_t> at(static_cast<size_t>(n), 0);  // the element's index, walked in row-major order
    int64_t offset = 0;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, t.scalar_type(), "RequireFiniteValues", [&] {
        const scalar_t* data = t.const_data_ptr<scalar_t>();
        for (int64_t i = 0; i < t.numel(); ++i) {
            const double value = static_cast<double>(data[offset]);
            if (!std::isfinite(value) || (nonzero && value == 0)) {
                std::string index;
                for (size_t d = 0; d < at.size(); ++d) {
                    index += (d ? ", " : "") + std::to_string(at[d]);
                }
                TORCH_CHECK_VALUE(false, name, n ? "[" + index + "]" : "", " = ", OddFloat(value), ": ", what,
                                  std::isfinite(value) ? " must not be zero (the write divides by it)" : " must be finite");
            }
            for (int64_t d = n - 1; d >= 0; --d) {
                offset += t.stride(d);
                if (++at[static_cast<size_t>(d)] < t.size(d)) {
                    break;
                }
                offset -= t.stride(d) * t.size(d);
                at[static_cast<size_t>(d)] = 0;
            }
        }
    });
}

}  // namespace

bool IsCodeDtype(at::ScalarType dtype)
{
    return dtype == at::kChar || dtype == at::kFloat8_e4m3fn || dtype == at::kFloat8_e5m2;
}

bool IsQuantFloat(at::ScalarType dtype) { return dtype == at::kHalf || dtype == at::kBFloat16 || dtype == at::kFloat; }

void RequireCodeCache(std::string_view name, const at::Tensor& cache, const char* what)
{
    TORCH_CHECK_TYPE(IsCodeDtype(cache.scalar_type()), name, " must have dtype int8, float8_e4m3fn or float8_e5m2 to ",
                     what, " (a scale is given for its side), got ", DtypeName(cache.scalar_type()));
}

void RequireQuantFloat(std::string_view name, const at::Tensor& t, const char* what)
{
    TORCH_CHECK_TYPE(IsQuantFloat(t.scalar_type()), name, " must have dtype float16, bfloat16 or float32 (",
                     what, "), got ", DtypeName(t.scalar_type()));
}

void RequireQuantCombination(const char* prefix, const QuantArgs& args, bool side_present)
{
    const std::string p = prefix;
    if (!side_present && args.Any()) {
        const char* given = args.scale.defined()       ? "scale"
                            : args.inv_scale.defined() ? "inv_scale"
                            : args.offset.defined()    ? "offset"
                                                       : "scale_cache";
        TORCH_CHECK_VALUE(false, p, given, " is given but the call has no value side (value is None, the key-only "
                          "mode): pass no ", p, "* argument");
    }
    const int schemes = args.scale.defined() + args.inv_scale.defined() + args.scale_cache.defined();
    TORCH_CHECK_VALUE(schemes <= 1, "pass at most one of ", p, "scale, ", p, "inv_scale and ", p,
                      "scale_cache (one scheme per side), got ", schemes);
    TORCH_CHECK_VALUE(!args.offset.defined() || args.scale.defined() || args.inv_scale.defined(), p,
                      "offset needs a static scale (", p, "scale or ", p, "inv_scale)",
                      args.scale_cache.defined() ? std::string(": a dynamic side (") + p + "scale_cache) has no offset"
                                                 : std::string(", got none"));
}

QuantSide CheckQuantSide(const QuantSideContext& c, const QuantArgs& args, Check check)
{
    QuantSide side;
    if (!args.Any()) {
        return side;
    }
    const std::string p = c.prefix;
    const at::ScalarType code = c.cache.scalar_type();
    RequireCodeCache(c.cache_name, c.cache, c.load ? "dequantize" : "quantize");
    TORCH_CHECK_VALUE(!args.offset.defined() || code == at::kChar, p, "offset is for int8 codes, but ", c.cache_name,
                      " is ", DtypeName(code), ": fp8 codes have no zero point");
    side.target = c.load ? c.input_dtype : code;
    if (args.scale_cache.defined()) {
        const std::string name = p + "scale_cache";
        const at::Tensor& sc = args.scale_cache;
        RequireData(name, sc, AllowsMeta(check, c.cache));
        RequireDtype(name, sc, kQuantFloats);
        const bool shaped = (sc.dim() == 3 || (sc.dim() == 4 && sc.sym_sizes()[3] == 1));
        TORCH_CHECK_VALUE(shaped, name, " must be [num_blocks, block_size, H] or [num_blocks, block_size, H, 1], got "
                          "shape ", ShapeOf(sc));
        side.heads = c.nd ? c.heads : sc.sym_sizes()[2];
        const c10::SymInt row = c.nd ? c.heads * c.head_size : c.head_size;
        TORCH_CHECK_VALUE(c.nd || (side.heads != 0 && row % side.heads == 0), name, ".shape[2] (H) = ", side.heads,
                          " must divide the NZ row of ", row, " elements");
        side.head_size = c.nd ? c.head_size : row / side.heads;
        const char* what[] = {"num_blocks", "block_size", "H"};
        const c10::SymInt expected[] = {c.num_blocks, c.block_size, side.heads};
        for (int64_t d = 0; d < 3; ++d) {
            TORCH_CHECK_VALUE(sc.sym_sizes()[d] == expected[d], name, ".shape[", d, "] (", what[d], ") = ",
                              sc.sym_sizes()[d], " must be ", expected[d]);
        }
        TORCH_CHECK_VALUE(sc.device() == c.cache.device(), name, " is on ", sc.device(), " but ", c.cache_name,
                          " is on ", c.cache.device(), ": all tensor arguments must be on one device");
        if (!c.load) {
            RequireWritable(name, sc);
        }
        side.scheme = QuantScheme::kDynamic;
        side.scale_cache = sc.dim() == 4 ? sc.select(3, 0) : sc;
        side.compute = at::kFloat;
        return side;
    }
    const bool divide = args.scale.defined();
    const at::Tensor& scale = divide ? args.scale : args.inv_scale;
    const std::string scale_name = p + (divide ? "scale" : "inv_scale");
    side.heads = c.heads;
    side.head_size = c.head_size;
    if (!c.nd) {  // an NZ read: the heads from the scale's (or offset's) shape
        const c10::SymInt row = c.head_size;
        side.heads = NzHeads(scale, row);
        if (side.heads == 1 && args.offset.defined()) {
            side.heads = NzHeads(args.offset, row);
        }
        side.head_size = row / side.heads;
    }
    side.scheme = divide ? QuantScheme::kStaticDivide : QuantScheme::kStaticMultiply;
    side.scale = CheckScaleLike(scale_name, scale, kQuantFloats, c, side.heads, side.head_size, check);
    side.compute = c.load ? at::kFloat : at::promoteTypes(c.input_dtype, scale.scalar_type());
    if (args.offset.defined()) {
        side.offset = CheckScaleLike(p + "offset", args.offset, kOffsetDtypes, c, side.heads, side.head_size, check);
        if (!c.load) {
            side.compute = at::promoteTypes(side.compute, args.offset.scalar_type());
        }
    }
    if (!c.load && check == Check::kCall && scale.is_cpu()) {  // device values are not read (docs/semantics.md §13.3)
        RequireFiniteValues(scale_name, scale, divide, "a quantizing write's scale");
        if (args.offset.defined()) {
            RequireFiniteValues(p + "offset", args.offset, false, "a quantizing write's offset");
        }
    }
    return side;
}

void RequireQuantApart(const QuantParams& quant, c10::ArrayRef<Named> others)
{
    const at::Tensor& k = quant.key.scale_cache;
    const at::Tensor& v = quant.value.scale_cache;
    if (k.defined()) {
        RequireApart("k_scale_cache", k, others);
    }
    if (v.defined()) {
        RequireApart("v_scale_cache", v, others);
    }
    if (k.defined() && v.defined()) {
        RequireSeparateOutputs("k_scale_cache", k, "v_scale_cache", v);
    }
}

std::string QuantKernelSideReason(const QuantSide& side, at::ScalarType codes)
{
    if (!side.Quantized()) {
        return "";
    }
    if (codes != at::kChar) {
        return std::string("float8 codes (") + c10::toString(codes) +
               ") need an fp8 Cast, which the vector cores of Atlas A2/A3 lack: the device fallback runs them";
    }
    const int64_t row = (side.heads * side.head_size).expect_int();
    if (row > kMaxQuantKernelRowElems) {
        return "a quantized token row of " + std::to_string(row) +
               " elements is longer than the quantizing kernels hold in UB (" +
               std::to_string(kMaxQuantKernelRowElems) + ")";
    }
    return "";
}

std::string QuantWriteOutsideReason(const QuantParams& quant)
{
    const std::string key = QuantKernelSideReason(quant.key, quant.key.target);
    return key.empty() ? QuantKernelSideReason(quant.value, quant.value.target) : key;
}

}  // namespace ascend_kv
