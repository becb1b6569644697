// The rules of swap_blocks_batch (vLLM's batched pointer copy, docs/semantics.md): three host
// int64 tables of equal length, sizes >= 0, a known direction, and destination ranges that meet
// neither each other nor any source range (the order of the copies then never matters).
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ascend_kv {

/// A checked batch: copy i moves sizes[i] bytes from address src[i] to address dst[i].
struct BatchCopies {
    std::vector<int64_t> src, dst, sizes;
    int64_t direction = -1;  ///< -1 inferred, 0 host to device, 1 device to host, 2 device to device
};

BatchCopies CheckSwapBlocksBatch(const at::Tensor& src_ptrs, const at::Tensor& dst_ptrs, const at::Tensor& sizes,
                                 int64_t direction);

}  // namespace ascend_kv
