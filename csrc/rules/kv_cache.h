// The rules of kv_cache (docs/semantics.md, "kv_cache"): the structure of a call, then its index values.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "csrc/rules/check.h"
#include "csrc/rules/index_values.h"

namespace ascend_kv {

/// A kv_cache call whose structure is checked.
struct KvCacheCall {
    at::Tensor new_kv;        ///< [ntokens, hidden] (a 4-D new_kv as its flat token list), past's dtype
    at::Tensor past;          ///< [layers, batch, max_seq_len, hidden], written in place
    at::Tensor layer_tensor;  ///< the layer as a one-element integer tensor, or undefined
    int64_t layer_id = 0;     ///< the layer when there is no layer tensor, in [0, layers)
    at::Tensor token_offset;  ///< [batch] int32/int64: the position after each entry's last new token
    at::Tensor seq_len;       ///< [batch] int32/int64: new tokens per entry

    ascend_kv::IndexTensors IndexTensors() const { return {token_offset, seq_len, layer_tensor}; }
    std::vector<Rows> DataRows() const;
};

/// Every rule of a kv_cache call that needs no index value (types, dtypes, shapes, devices,
/// strides; aliasing for a call).
KvCacheCall CheckKvCache(const at::Tensor& new_kv, const at::Tensor& layer_tensor, int64_t layer_id,
                         const at::Tensor& past, const at::Tensor& token_offset, const at::Tensor& seq_len, Check check);

/// A kv_cache call with its index values checked: token j < seq_len[b] of batch entry b is row
/// read_start[b] + j of new_kv and goes to past[layer, b, write_start[b] + j].
struct KvCachePlan {
    int64_t layer = 0;
    BatchValues seq_len, read_start, write_start;  ///< [batch] each
};

/// The rules of a kv_cache call on its index values, read on the host (one transfer at most).
KvCachePlan PlanKvCache(const KvCacheCall& call);

}  // namespace ascend_kv
