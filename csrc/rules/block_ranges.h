// The rules of block_ranges (docs/semantics.md §17.2): the address lists of a block transfer
// between two block-indexed memories (a local and a remote cache, or a cache and a staging
// buffer), one row per (segment, layer). Every table is read on the host; the lists come back
// merged (runs of consecutive blocks as one range) and sorted by destination address.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ascend_kv {

/// One side of a transfer: row r's block b is bytes [bases[r] + b * strides[r], + lengths[r]).
struct BlockSide {
    const char* name;  ///< "src" or "dst": the prefix of its tables' names
    std::vector<int64_t> bases, strides, lengths, ids;
    int64_t blocks = 0;  ///< how many blocks each row holds
};

/// The merged transfer: range i moves lengths[i] bytes from src[i] to dst[i].
struct RangeLists {
    std::vector<int64_t> src, dst, lengths;
};

/// Checks every table (int64 rows, int32/int64 ids, 1-D, on the host, consistent lengths), the
/// geometry (each row's block as many bytes on both sides, within its stride), the ids (in range;
/// destinations distinct) and the destination bytes (apart), then builds the merged lists.
RangeLists PlanBlockRanges(const at::Tensor& src_bases, const at::Tensor& src_strides,
                           const at::Tensor& src_lengths, const at::Tensor& src_block_ids, int64_t src_blocks,
                           const at::Tensor& dst_bases, const at::Tensor& dst_strides,
                           const at::Tensor& dst_lengths, const at::Tensor& dst_block_ids, int64_t dst_blocks);

}  // namespace ascend_kv
