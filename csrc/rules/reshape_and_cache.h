// The rules of reshape_and_cache (docs/semantics.md, "reshape_and_cache"): the structure of a
// call, then its slots.
#pragma once

#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "csrc/rules/check.h"
#include "csrc/rules/index_values.h"
#include "csrc/rules/geometry.h"
#include "csrc/rules/quant.h"
#include "csrc/rules/slot_pairs.h"

namespace ascend_kv {

/// A reshape_and_cache call whose structure is checked: token i < len(slot_mapping) goes to slot
/// slot_mapping[i] (block slot // block_size, position slot % block_size) of each cache, or to the
/// (block, offset) pair slot_mapping[i] of a [n, 2] slot_mapping; negative slots (a negative
/// component of a pair) are padding.
struct ReshapeAndCacheCall {
    CacheGeometry geometry;
    at::Tensor key;           ///< [num_tokens, num_heads, head_size_k], key_cache's dtype (or a float type
                              ///< when quantized), any strides
    at::Tensor value;         ///< [num_tokens, num_heads, head_size_v], or undefined (key-only)
    at::Tensor key_cache;     ///< written in place
    at::Tensor value_cache;   ///< written in place, or undefined (key-only)
    at::Tensor slot_mapping;  ///< [n] flat slots or [n, 2] (block, offset) pairs, int32/int64, n <= num_tokens
    QuantParams quant;        ///< how each side is quantized (both kNone: bytes copied)

    bool KeyOnly() const { return !value_cache.defined(); }
    ascend_kv::IndexTensors IndexTensors() const { return {slot_mapping}; }
    std::vector<Rows> DataRows() const;
    /// The caches' slots, for slot pairs (kCall only).
    SlotGrid Grid() const;
};

/// Every rule of a reshape_and_cache call that needs no slot value; `k_quant`/`v_quant` are the
/// quantization arguments of each side (none: a copy of bytes).
ReshapeAndCacheCall CheckReshapeAndCache(const at::Tensor& key, const at::Tensor& value, const at::Tensor& key_cache,
                                         const at::Tensor& value_cache, const at::Tensor& slot_mapping,
                                         const std::string& kv_cache_cfg, Check check,
                                         const QuantArgs& k_quant = QuantArgs(),
                                         const QuantArgs& v_quant = QuantArgs());

/// The rule of a reshape_and_cache call on its slots, read on the host (one transfer at most):
/// every non-negative slot below num_blocks * block_size, every pair without a negative component
/// inside (num_blocks, block_size). Returns the slots on the host, pairs as flat slots (-1 padding).
at::Tensor CheckSlots(const ReshapeAndCacheCall& call);

}  // namespace ascend_kv
