#include "cpu_fallback/quant_aten.h"

#include <limits>

#include <ATen/ATen.h>

namespace ascend_kv::on_device {
namespace {

/// The largest finite code of `dtype` (127 for int8).
double CodeMax(at::ScalarType dtype)
{
    switch (dtype) {
        case at::kFloat8_e4m3fn: return 448.0;
        case at::kFloat8_e5m2: return 57344.0;
        default: return 127.0;
    }
}

/// Q: int8 rounds half to even, saturates, NaN -> 0; fp8 clamps to +-max and rounds to nearest even.
at::Tensor Encode(const at::Tensor& t, at::ScalarType dtype)
{
    if (dtype == at::kChar) {
        const at::Tensor r = at::round(t).clamp(-128, 127);
        return at::where(at::isnan(r), at::zeros_like(r), r).to(at::kChar);
    }
    const double m = CodeMax(dtype);
    return t.clamp(-m, m).to(dtype);
}

/// A normal-form scale or offset [1, 1], [H, 1] or [H, D] in `dtype`.
at::Tensor Per(const at::Tensor& t, at::ScalarType dtype) { return t.to(dtype); }

/// 1 / max rounded to float32 once, as a 0-dim float32 tensor on `like`'s device.
at::Tensor InverseMax(at::ScalarType dtype, const at::Tensor& like)
{
    return at::scalar_tensor(static_cast<float>(1.0 / CodeMax(dtype)), like.options().dtype(at::kFloat));
}

}  // namespace

std::pair<at::Tensor, at::Tensor> Quantize(const QuantSide& side, const at::Tensor& x)
{
    if (side.Static()) {
        const at::ScalarType ct = side.compute;
        at::Tensor t = side.scheme == QuantScheme::kStaticDivide ? x.to(ct) / Per(side.scale, ct)
                                                                  : x.to(ct) * Per(side.scale, ct);
        if (side.offset.defined()) {
            t = t + Per(side.offset, ct);
        }
        return {Encode(t, side.target), at::Tensor()};
    }
    const at::Tensor xf = x.to(at::kFloat);
    const at::Tensor a = xf.abs().amax(-1, /*keepdim=*/true);  // NaN propagates
    const at::Tensor s = a * InverseMax(side.target, a);
    at::Tensor codes;
    if (side.target == at::kChar) {
        codes = Encode(xf * (at::full_like(a, 127.0) / a), side.target);
    } else {
        const at::Tensor y = xf / s;
        codes = Encode(at::where(at::isnan(y), at::zeros_like(y), y), side.target);
    }
    return {codes, s.squeeze(-1).to(side.scale_cache.scalar_type())};
}

at::Tensor Dequantize(const QuantSide& side, const at::Tensor& codes, const at::Tensor& row_scales)
{
    at::Tensor y = codes.to(at::kFloat);
    if (side.scheme == QuantScheme::kDynamic) {
        return (y * row_scales.to(at::kFloat).unsqueeze(-1)).to(side.target);
    }
    if (side.offset.defined()) {
        y = y - side.offset.to(at::kFloat);
    }
    return (y * side.scale.to(at::kFloat)).to(side.target);
}

}  // namespace ascend_kv::on_device
