// The device fallback: every operation as ATen operations on the tensors' own device (an NPU line
// the kernels do not support, or any other device), reading no index value back to the host.
//
// Every size comes from a shape; index values are only ever operands of tensor operations.
// Values nobody checked follow the safe semantics (docs/semantics.md, "Index values nobody
// checked"): anything out of range is skipped, nothing outside the given tensors is read or
// written, and index arithmetic never wraps into range. Copies move same-width integer views of
// the data, so every bit pattern (NaN payloads included) arrives unchanged. Temporary memory is
// proportional to the tokens, rows or copies of the call, never to a cache.
#pragma once

#include <ATen/core/Tensor.h>

#include "csrc/rules/block_copy.h"
#include "csrc/rules/gather_blocks.h"
#include "csrc/rules/kv_cache.h"
#include "csrc/rules/paged_cache_load.h"
#include "csrc/rules/reshape_and_cache.h"
#include "csrc/rules/scatter_nd.h"
#include "csrc/rules/state_transfer.h"

namespace ascend_kv::on_device {

/// `t` viewed as integers of its element width (same memory, same strides): where() and copies
/// of such views move every bit pattern, NaN payloads included.
at::Tensor Bits(const at::Tensor& t);

/// Index tensors on the data's device (their values unchecked).
void KvCache(const KvCacheCall& call);
/// A side with call.quant dequantizes (gathered codes and row scales, quant_aten.h).
void PagedLoad(const PagedLoadCall& call);
/// A side with call.quant writes codes (and a dynamic side its row scales) at the slots.
void ReshapeAndCache(const ReshapeAndCacheCall& call);
/// scatter_nd_update with `slots` its flat slots over call.grid on the device (DeviceSlots: -1 skipped):
/// a slot named twice takes the last row naming it.
void ScatterNdUpdate(const ScatterNdCall& call, const at::Tensor& slots);
void BlockCopy(const BlockCopyCall& call);
/// gather_blocks or scatter_blocks with the buffer on the caches' device: per cache, the n blocks
/// relaid out through one temporary; out-of-range ids are masked (gather: the buffer's row keeps
/// its bytes; scatter: nothing written for it).
void TransferBlocks(const TransferCall& call);

/// gather_state_slots or scatter_state_slots with the buffer on the states' device: per state, the
/// n slots through one temporary of n slots; negative and out-of-range ids are skipped (gather: the
/// buffer row keeps its bytes; scatter: nothing written for it).
void TransferStateSlots(const StateTransferCall& call);

/// batch_memcpy with its tables on a device: the tables read back (the one synchronisation: no ATen
/// operation follows an address held in a tensor), checked as host tables are, then each range one
/// asynchronous copy between views of the device's memory.
void BatchMemcpy(const at::Tensor& src_ptrs, const at::Tensor& dst_ptrs, const at::Tensor& sizes);

/// zero_fill before the kernels: zero every output row a batch entry covers (the kernels then write
/// the rows of valid blocks and skip the others, which stay zero).
void ClearLoadedRows(const PagedLoadCall& call);

/// The rows an allocating paged_cache_load needs, as a 0-d int64 tensor on context_lens' device:
/// sum(context_lens) (each length capped so the sum cannot wrap), or context_lens[-1] in cumsum
/// mode, never below 0. Reading it is the allocating form's one host read.
at::Tensor OutputRows(const at::Tensor& context_lens, bool cumsum);

/// swap_blocks between devices, or on one device other than the host: block sources[i] of `src`
/// to block destinations[i] of `dst`, queued without waiting for either device.
void SwapBlocks(const at::Tensor& src, const at::Tensor& dst, const BlockCopyPlan& pairs);

/// Block sources[i] of `src` to block destinations[i] of `dst` ([blocks, ...] each, any devices),
/// with no temporary: pairs sorted by destination, each run consecutive on both sides one async
/// copy (non-blocking from or to pinned memory), never a synchronisation.
void CopyRuns(const at::Tensor& src, const at::Tensor& dst, const BlockCopyPlan& pairs);

}  // namespace ascend_kv::on_device
