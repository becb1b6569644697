// What a structure check is for: an eager call (every rule that needs no index value), or the
// shapes of a traced call (Meta and fake tensors: no addresses, no strides that may be symbolic).
#pragma once

#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ascend_kv {

enum class Check { kCall, kShapes };

/// A data tensor whose dims from `first_dim` on hold one piece the kernels copy whole (a token
/// row, an NZ piece): what the kernels' domain asks of it (rules/kernel_domain.h).
struct Rows {
    std::string name;
    at::Tensor tensor;
    int64_t first_dim;
    std::string what;
};

}  // namespace ascend_kv
