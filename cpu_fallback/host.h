// The host paths: each operation on CPU tensors whose index values are checked (a plan), copied
// with the one primitive of cpu/copy.h, over torch's intra-op threads when the call is large.
#pragma once

#include <ATen/core/Tensor.h>

#include "csrc/rules/block_copy.h"
#include "csrc/rules/kv_cache.h"
#include "csrc/rules/paged_cache_load.h"
#include "csrc/rules/reshape_and_cache.h"

namespace ascend_kv::host {

void KvCache(const KvCacheCall& call, const KvCachePlan& plan);
/// The outputs are given or allocated; with zero_fill, tokens of a missing or invalid block load zeros.
void PagedLoad(const PagedLoadCall& call, const PagedLoadPlan& plan);
/// `slots`: slot_mapping on the host, checked (rules/reshape_and_cache.h). A slot several tokens
/// name takes the last of them; padding writes nothing.
void ReshapeAndCache(const ReshapeAndCacheCall& call, const at::Tensor& slots);
/// A quantizing write (call.quant, QUANT.md §3): the codes of each token, and its row scales for a
/// dynamic side, at the slot ReshapeAndCache would copy it to (the same slot rules).
void ReshapeAndCacheQuant(const ReshapeAndCacheCall& call, const at::Tensor& slots);
/// A dequantizing load (call.quant): PagedLoad's rows, a dequantized side in float32 rounded once.
void PagedLoadDequant(const PagedLoadCall& call, const PagedLoadPlan& plan);
/// slot_mapping's values on the host, read once before any write.
BatchValues SlotsOf(const at::Tensor& slots);
void BlockCopy(const BlockCopyCall& call, const BlockCopyPlan& plan);
/// swap_blocks between two host tensors.
void SwapBlocks(const at::Tensor& src, const at::Tensor& dst, const BlockCopyPlan& pairs);

}  // namespace ascend_kv::host
