// The rules of the batched pointer copies (docs/semantics.md §11.3 swap_blocks_batch, §14.3
// batch_memcpy): three 1-D tables of equal length, int64 addresses and byte counts; with the
// tables on the host, sizes >= 0, a known direction, and destination ranges that meet neither
// each other nor any source range (the order of the copies then never matters).
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "csrc/rules/check.h"

namespace ascend_kv {

/// A checked batch: copy i moves sizes[i] bytes from address src[i] to address dst[i].
struct BatchCopies {
    std::vector<int64_t> src, dst, sizes;
    int64_t direction = -1;  ///< -1 inferred, 0 host to device, 1 device to host, 2 device to device
};

/// swap_blocks_batch: int64 tables on the host, checked and read.
BatchCopies CheckSwapBlocksBatch(const at::Tensor& src_ptrs, const at::Tensor& dst_ptrs, const at::Tensor& sizes,
                                 int64_t direction);

/// batch_memcpy's structure: src_ptrs and dst_ptrs int64, sizes int32 or int64 (vLLM keeps them as
/// int32), 1-D, one length, one device (the host, or the device whose memory the addresses name);
/// a meta call (`check` kShapes) on meta tables.
void CheckBatchMemcpy(const at::Tensor& src_ptrs, const at::Tensor& dst_ptrs, const at::Tensor& sizes, Check check);

/// The value rules of batch_memcpy's tables (on the host, or read back once): sizes >= 0 and the
/// ranges apart, as swap_blocks_batch's. Returns the copies.
BatchCopies PlanBatchMemcpy(const at::Tensor& src_ptrs, const at::Tensor& dst_ptrs, const at::Tensor& sizes);

}  // namespace ascend_kv
