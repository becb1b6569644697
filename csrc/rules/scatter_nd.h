// The rules of scatter_nd_update (docs/semantics.md §15.1): rows written into a tensor of any
// strides at index tuples over its first k = 1 or 2 dims.
#pragma once

#include <ATen/core/Tensor.h>

#include "csrc/rules/check.h"
#include "csrc/rules/slot_pairs.h"

namespace ascend_kv {

/// A checked scatter_nd_update call: row i of `updates` goes to var[indices[i]] (k = 1: a flat row
/// of var; k = 2: the (block, offset) pair); an index with a negative component is padding.
struct ScatterNdCall {
    at::Tensor var;      ///< written in place, any strides
    at::Tensor grid;     ///< var as [num_blocks, block_size, *row]: var itself (k = 2) or var.unsqueeze(0) (k = 1)
    at::Tensor slots;    ///< the slot index: [n] flat rows (k = 1) or [n, 2] pairs (k = 2), int32/int64
    at::Tensor updates;  ///< [n, *var.shape[k:]], var's dtype, any strides

    /// The grid the slots address (kCall only: concrete sizes).
    SlotGrid Grid() const;
};

/// Every rule of a call that needs no index value.
ScatterNdCall CheckScatterNdUpdate(const at::Tensor& var, const at::Tensor& indices, const at::Tensor& updates,
                                   Check check);

}  // namespace ascend_kv
