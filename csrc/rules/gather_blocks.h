// The rules of gather_blocks and scatter_blocks (docs/semantics.md, "gather_blocks and
// scatter_blocks"): the structure of a call, its host index values, and the one block frame every
// backend copies through (each layout a pure permutation of one block).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/string_view.h>

#include "csrc/rules/check.h"

namespace ascend_kv {

/// A block layout: "nd" [bs, H, D], "hnd" [H, bs, D], "nz" [H*D // E, bs, E]; on the buffer side
/// "nd" with head_splits S > 1 is [S, bs, H // S, D].
enum class BlockLayout { kNd, kHnd, kNz };

/// Frame dims of one block: (token, split, head group, heads in one NZ piece, D pieces, elements).
constexpr int kFrameDims = 6;
using FrameArray = std::array<int64_t, kFrameDims>;

/// A gather_blocks or scatter_blocks call whose structure is checked. Item (kv, layer, j) moves
/// block block_ids[j] of caches[kv][layer] to or from buffer[kv, layer, j].
struct TransferCall {
    bool gather = true;                          ///< gather: caches -> buffer; scatter: buffer -> caches
    std::vector<std::vector<at::Tensor>> caches;  ///< [KV][L] caches, one shape, dtype and device
    at::Tensor buffer;                           ///< out / src: [KV, L, n, *block] on the caches' device or the host
    at::Tensor block_ids;                        ///< [n] int32/int64
    BlockLayout cache_layout = BlockLayout::kNd, buffer_layout = BlockLayout::kNd;
    int64_t splits = 1;                          ///< head_splits (the buffer side)
    int64_t block_size = 0, heads = 0, head_size = 0;  ///< bs, H, D (both sides NZ: H = T // E, D = E)
    bool framed = false;                         ///< whether the frame below describes both sides
    FrameArray frame{};                          ///< the frame's sizes (its dims: kFrameDims)

    int64_t Layers() const { return caches.empty() ? 0 : static_cast<int64_t>(caches[0].size()); }
    int64_t Blocks() const { return block_ids.size(0); }
    const char* BufferName() const { return gather ? "out" : "src"; }
    /// The frame strides of one block of `t` (a cache, or the buffer's [n, *block] at one (kv, layer)),
    /// whose block dims are t's last ones, in `layout` (the buffer's: with the head split).
    FrameArray Strides(const at::Tensor& t, BlockLayout layout, bool buffer_side) const;
    /// `values` (sizes or strides of the frame) in the order every backend nests the loops: an NZ
    /// destination is written piece by piece (a piece's tokens back to back), any other token by token.
    FrameArray Ordered(const FrameArray& values) const;
};

TransferCall CheckGatherBlocks(at::TensorList key_caches, at::TensorList value_caches, const at::Tensor& block_ids,
                               const at::Tensor& out, c10::string_view cache_layout, c10::string_view out_layout,
                               int64_t head_splits, Check check);

TransferCall CheckScatterBlocks(const at::Tensor& src, at::TensorList key_caches, at::TensorList value_caches,
                                const at::Tensor& block_ids, c10::string_view src_layout,
                                c10::string_view cache_layout, int64_t head_splits, Check check);

/// The rules of a call on its index values (read on the host, one transfer at most): block_ids in
/// range, and for scatter_blocks distinct. Returns them.
std::vector<int64_t> PlanTransfer(const TransferCall& call);

}  // namespace ascend_kv
