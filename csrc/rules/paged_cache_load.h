// The rules of paged_cache_load (docs/semantics.md, "paged_cache_load"): the structure of a call,
// then its index values. The outputs are given (the .into form) or allocated by the operator
// after every rule has passed, with the rows the plan says.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "csrc/rules/check.h"
#include "csrc/rules/index_values.h"
#include "csrc/rules/geometry.h"
#include "csrc/rules/quant.h"

namespace ascend_kv {

/// A paged_cache_load call whose structure is checked.
struct PagedLoadCall {
    CacheGeometry geometry;   ///< ND caches [nb, bs, heads, hs], outputs [rows, heads, hs]; NZ [nb, T // E, bs, E], [rows, T]
    at::Tensor key_cache, value_cache;
    at::Tensor block_table;   ///< [batch, max_blocks] int32/int64
    at::Tensor context_lens;  ///< [batch] lengths, or [batch + 1] cumulative lengths when cumsum
    at::Tensor seq_starts;    ///< [batch] token offsets into each block-table row, or undefined
    bool cumsum = false;
    /// torch_npu's gather semantics: a token whose column is past the table or whose block id is
    /// outside [0, num_blocks) loads a zero row (no error on host values, not skipped on device ones).
    bool zero_fill = false;
    at::Tensor key, value;    ///< the outputs, written in place; undefined until given or allocated
    QuantParams quant;        ///< how each side is dequantized (kNone: bytes gathered as they are)

    /// The dtype of an output: the cache's, or the dequantized side's target.
    at::ScalarType OutputDtype(bool key_side) const;

    ascend_kv::IndexTensors IndexTensors() const { return {block_table, context_lens, seq_starts}; }
    std::vector<Rows> DataRows() const;
};

/// Every rule of a paged_cache_load call that needs no index value; `key` and `value` are the
/// outputs, both given or both undefined (the allocating form). `k_quant`/`v_quant` dequantize a
/// side (their inv_scale is never set: loads take the dequantization scale); `out_dtype` is the
/// dequantized outputs' dtype (required when allocating, else the given outputs' dtype).
PagedLoadCall CheckPagedLoad(const at::Tensor& key_cache, const at::Tensor& value_cache, const at::Tensor& block_table,
                             const at::Tensor& context_lens, int64_t kv_cache_cfg, bool cumsum,
                             const at::Tensor& seq_starts, bool zero_fill, const at::Tensor& key,
                             const at::Tensor& value, Check check, const QuantArgs& k_quant = QuantArgs(),
                             const QuantArgs& v_quant = QuantArgs(),
                             std::optional<at::ScalarType> out_dtype = std::nullopt);

/// A paged_cache_load call with its index values checked, both length modes as one: token
/// j < lens[b] of batch entry b sits in block block_table[b, first_column[b] + j // block_size],
/// slot j % block_size, and goes to output row out_start[b] + j. Every block-table entry a token
/// needs is in range (unless zero_fill).
struct PagedLoadPlan {
    BatchValues lens, out_start, first_column;  ///< [batch] each
    int64_t end_row = 0;  ///< rows the outputs need: sum(lens), or context_lens[-1] in cumsum mode
};

/// The rules of a paged_cache_load call on its index values, read on the host (one transfer at
/// most), with the rows its outputs need (checked against given outputs).
PagedLoadPlan PlanPagedLoad(const PagedLoadCall& call);

/// Why the dequantizing kernel does not take this call's dequantized sides (empty when it does):
/// QuantKernelSideReason of each with its cache's dtype, or rows of codes that are not whole
/// 32-byte blocks (the load kernels' rows).
std::string QuantLoadOutsideReason(const PagedLoadCall& call);

}  // namespace ascend_kv
