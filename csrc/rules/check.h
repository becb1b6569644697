// What a structure check is for: an eager call (every rule that needs no index value), or the
// shapes of a traced call (Meta and fake tensors: no addresses, no strides that may be symbolic).
#pragma once

#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ascend_kv {

enum class Check { kCall, kShapes };

/// Whether a check takes meta tensors: a shapes-only check whose first data tensor (the one the
/// call writes, or reads from: past, key_cache, the first cache) is meta. PyTorch runs the Meta
/// kernel for any call with a meta tensor among its arguments, so a call mixing meta tensors with
/// tensors holding data arrives there too: it is refused, naming the tensor without data or the
/// odd device, as the Python rules did.
inline bool AllowsMeta(Check check, const at::Tensor& first) { return check == Check::kShapes && first.is_meta(); }

/// A data tensor whose dims from `first_dim` on hold one piece the kernels copy whole (a token
/// row, an NZ piece): what the kernels' domain asks of it (rules/kernel_domain.h).
struct Rows {
    std::string name;
    at::Tensor tensor;
    int64_t first_dim;
    std::string what;
};

}  // namespace ascend_kv
