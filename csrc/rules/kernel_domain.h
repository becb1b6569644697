// Which calls the AscendC kernels take in place: they address every data tensor through byte
// strides but copy whole pieces (a token row, an NZ piece, rows of a block), so each piece must
// be contiguous; every other stride is free. A call outside is still valid: on an NPU it runs on
// the device fallback, on the sim backend on contiguous copies.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "csrc/rules/check.h"

namespace ascend_kv {

/// Are dims first_dim.. of `t` row-major contiguous (size-1 dims ignored)? An empty tensor always
/// is: no byte of it is addressed.
bool DenseFrom(const at::Tensor& t, int64_t first_dim);

/// A cache [num_blocks, ...] (or a state [num_slots, ...]) seen as [num_blocks, rows, row]: `rows` rows of `row` contiguous
/// elements, `row_stride` elements apart, blocks `block_stride` apart (a dense block is one row).
struct BlockRows {
    int64_t rows, row, row_stride, block_stride;
};

/// `t` [num_blocks, ...] with dims 1.. permuted so that their strides never increase (a stable
/// sort): the same elements of each block, in the order of their addresses. A block copied in
/// place moves the same bytes either way (a transposed state, [slots, dim, k] over [slots, k, dim]
/// memory, becomes that memory's row-major view).
at::Tensor InMemoryOrder(const at::Tensor& t);

/// The longest-row BlockRows view of `t`, or none when no view of it has contiguous rows.
std::optional<BlockRows> BlockRowsOf(const at::Tensor& t);

/// Why the kernels cannot take these data tensors in place, or empty when they can.
std::string OutsideReason(const std::vector<Rows>& rows);

/// Why the block-copy kernel cannot take these caches in place, or empty when it can; a
/// simultaneous call of `copies` destinations also needs them to fit its UB slots. `noun` names a
/// tensor of the list in the reason ("cache 3", "state 3").
std::string BlockCopyOutsideReason(const std::vector<at::Tensor>& caches, bool simultaneous, int64_t copies,
                                   const char* noun = "cache");

}  // namespace ascend_kv
