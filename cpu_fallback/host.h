// The host paths: each operation on CPU tensors whose index values are checked (a plan), copied
// with the one primitive of cpu/copy.h, over torch's intra-op threads when the call is large.
#pragma once

#include <ATen/core/Tensor.h>

#include "csrc/rules/block_copy.h"
#include "csrc/rules/gather_blocks.h"
#include "csrc/rules/kv_cache.h"
#include "csrc/rules/paged_cache_load.h"
#include "csrc/rules/reshape_and_cache.h"
#include "csrc/rules/scatter_nd.h"
#include "csrc/rules/state_transfer.h"
#include "csrc/rules/swap_batch.h"

namespace ascend_kv::host {

void KvCache(const KvCacheCall& call, const KvCachePlan& plan);
/// The outputs are given or allocated; with zero_fill, tokens of a missing or invalid block load zeros.
void PagedLoad(const PagedLoadCall& call, const PagedLoadPlan& plan);
/// `slots`: slot_mapping on the host, checked (rules/reshape_and_cache.h). A slot several tokens
/// name takes the last of them; padding writes nothing.
void ReshapeAndCache(const ReshapeAndCacheCall& call, const at::Tensor& slots);
/// A quantizing write (call.quant, docs/semantics.md §13): the codes of each token, and its row scales for a
/// dynamic side, at the slot ReshapeAndCache would copy it to (the same slot rules).
void ReshapeAndCacheQuant(const ReshapeAndCacheCall& call, const at::Tensor& slots);
/// A dequantizing load (call.quant): PagedLoad's rows, a dequantized side in float32 rounded once.
void PagedLoadDequant(const PagedLoadCall& call, const PagedLoadPlan& plan);
/// slot_mapping's values on the host, read once before any write.
BatchValues SlotsOf(const at::Tensor& slots);
void BlockCopy(const BlockCopyCall& call, const BlockCopyPlan& plan);
/// swap_blocks between two host tensors.
void SwapBlocks(const at::Tensor& src, const at::Tensor& dst, const BlockCopyPlan& pairs);
/// gather_blocks or scatter_blocks of a framed call (call.framed) on host tensors, `ids` its
/// checked block_ids: each block a strided piece copy per token. False (nothing written) when a
/// token's piece has more loops than a PieceCopy holds: the caller copies it otherwise.
bool TransferBlocks(const TransferCall& call, const std::vector<int64_t>& ids);

/// gather_state_slots or scatter_state_slots on host tensors, `ids` its checked slot_ids (negative:
/// padding, skipped): each slot one piece copy between the state's strides and its dense bytes in a
/// buffer row, over torch's threads; a slot of more strided loops than a piece holds goes through
/// one slot of temporary memory.
void TransferStateSlots(const StateTransferCall& call, const std::vector<int64_t>& ids);

/// scatter_nd_update on host tensors, `slots` its checked flat slots over call.grid (-1: padding):
/// a destination named twice takes the last row naming it (scatter_nd.cpp).
void ScatterNdUpdate(const ScatterNdCall& call, const at::Tensor& slots);

/// swap_blocks_batch in host memory: one memcpy per copy, over torch's threads when the batch is large.
void MemcpyBatch(const BatchCopies& copies);

}  // namespace ascend_kv::host
