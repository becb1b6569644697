// The rules of block_copy, copy_blocks, swap_blocks (docs/semantics.md, "block_copy") and
// copy_state_slots (§14, a state slot copied as a block): the structure of a call, then its index
// values (always for swap_blocks, whose mapping is on the host).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "csrc/rules/check.h"
#include "csrc/rules/index_values.h"

namespace ascend_kv {

/// A block_copy or copy_blocks call whose structure is checked. Destination j takes source i, the
/// pair whose range [cum_sum[i-1], cum_sum[i]) holds j (no cum_sum: i = j), and block src[i] of
/// every cache is copied to its block dst[j].
struct BlockCopyCall {
    std::vector<at::Tensor> caches;   ///< every cache written, each [num_blocks, ...]: one device, one num_blocks
    std::vector<std::string> names;   ///< the argument naming each cache
    at::Tensor src;                   ///< [pairs] int32/int64 source blocks (copy_blocks: block_mapping[:, 0])
    at::Tensor dst;                   ///< [copies] destination blocks (copy_blocks: block_mapping[:, 1])
    at::Tensor cum_sum;               ///< [pairs] running ends of each source's destinations, or undefined
    bool mapping = false;             ///< copy_blocks: the index values come from block_mapping
    bool simultaneous = false;        ///< every source read before any destination is written
    bool padding = false;             ///< copy_state_slots: a pair with a negative index is padding, skipped
    std::string src_name = "src_block_indices", dst_name = "dst_block_indices";  ///< the index tensors' names
    const char* unit = "block";       ///< what an index names, in messages ("slot" for states)
    const char* holder = "the caches";  ///< what holds them, in messages
    const char* noun = "cache";       ///< one tensor of `caches`, in messages

    ascend_kv::IndexTensors IndexTensors() const { return {src, dst, cum_sum}; }
};

/// A checked call (Check::kCall) lists each cache once: identical views (device, data_ptr, dtype,
/// shape, strides), such as one layer's view listed for several layers, are kept at their first place.
BlockCopyCall CheckBlockCopy(const at::Tensor& key_cache, const at::Tensor& value_cache, const at::Tensor& src,
                             const at::Tensor& dst, const at::Tensor& cum_sum, bool simultaneous, Check check);

BlockCopyCall CheckCopyBlocks(at::TensorList key_caches, at::TensorList value_caches, const at::Tensor& block_mapping,
                              bool simultaneous, Check check);

/// The rules of copy_state_slots (docs/semantics.md §14): states [num_slots, ...] (any inner shapes,
/// strides and element types of 1 to 8 bytes, one device and num_slots, written apart), src_indices
/// and dst_indices [n] int32/int64 (pair i copies slot src[i] to slot dst[i]; a negative entry
/// makes its pair padding). Identical views are kept once, as in CheckCopyBlocks.
BlockCopyCall CheckCopyStateSlots(at::TensorList states, const at::Tensor& src_indices, const at::Tensor& dst_indices,
                                  bool simultaneous, Check check);

/// A block copy with its index values checked, one entry per destination: block sources[j] of
/// every cache goes to block destinations[j]; all in range, destinations distinct, and (unless
/// the call is simultaneous) none a source. Padding pairs (call.padding) are left out.
struct BlockCopyPlan {
    std::vector<int64_t> sources, destinations;
};

/// The rules of a block_copy or copy_blocks call on its index values (read on the host, one transfer at most).
BlockCopyPlan PlanBlockCopy(const BlockCopyCall& call);

/// The rules of a swap_blocks call: `src` [src_blocks, ...] read, `dst` [dst_blocks, ...] written
/// (same block shape and dtype, on any devices), block_mapping [n, 2] on the host. Returns its
/// pairs checked (sources in range of src, destinations in range of dst and distinct); empty
/// for a shapes-only check.
BlockCopyPlan CheckSwapBlocks(const at::Tensor& src, const at::Tensor& dst, const at::Tensor& block_mapping,
                              Check check);

/// The rules of swap_blocks.bytes (vLLM's 4-argument form): block m of a tensor is its bytes
/// [m*B, (m+1)*B) from data_ptr(); `src` and `dst` contiguous (any dtypes), block_mapping [n, 2]
/// on the host. Returns its pairs checked (ranges inside the tensors, destinations distinct, src
/// and dst apart); empty for a shapes-only check.
BlockCopyPlan CheckSwapBlockBytes(const at::Tensor& src, const at::Tensor& dst, int64_t block_size_in_bytes,
                                  const at::Tensor& block_mapping, Check check);

}  // namespace ascend_kv
