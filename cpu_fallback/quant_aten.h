// The arithmetic of quantized caches (docs/semantics.md §13) as ATen operations on any device: the device
// fallback's, reading nothing back to the host.
#pragma once

#include <utility>

#include <ATen/core/Tensor.h>

#include "csrc/rules/quant.h"

namespace ascend_kv::on_device {

/// The codes of tokens `x` [n, heads, head_size] in `side.target`, and for a dynamic side the row
/// scales [n, heads] in the scale cache's dtype (undefined otherwise).
std::pair<at::Tensor, at::Tensor> Quantize(const QuantSide& side, const at::Tensor& x);

/// Codes [n, heads, head_size] dequantized into `side.target` (float32 arithmetic, one rounding);
/// `row_scales` [n, heads] for a dynamic side.
at::Tensor Dequantize(const QuantSide& side, const at::Tensor& codes, const at::Tensor& row_scales);

}  // namespace ascend_kv::on_device
