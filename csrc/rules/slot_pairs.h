// Slot indices in either form (docs/semantics.md §15): flat slots [n], or (block, offset) pairs
// [n, 2] as DeepSeek's sparse-attention caches pass them on A2/A3. The one place that reads both,
// for every operation that takes a slot index and every backend.
#pragma once

#include <string>
#include <string_view>

#include <ATen/core/Tensor.h>

namespace ascend_kv {

/// The slots an index addresses: num_blocks x block_size (a flat slot s is block s // block_size,
/// offset s % block_size); `pairs_what` / `flat_what` name the bound in messages ("var.shape[:2]").
struct SlotGrid {
    int64_t num_blocks = 0, block_size = 0;
    std::string pairs_what, flat_what;
};

/// Whether a checked slot index holds (block, offset) pairs.
inline bool HoldsSlotPairs(const at::Tensor& slots) { return slots.dim() == 2; }

/// TypeError / ValueError unless `t` is an int32/int64 slot index, [n] flat slots or [n, 2] pairs;
/// a meta tensor only with `allow_meta`.
void RequireSlotIndex(std::string_view name, const at::Tensor& t, bool allow_meta);

/// The flat slots of a host slot index, checked before anything is written: an entry with a negative
/// component is padding (-1); any other must lie inside `grid`, else ValueError naming the entry.
/// Returns [n] int64 on the host.
at::Tensor HostSlots(std::string_view name, const at::Tensor& host, const SlotGrid& grid);

/// The flat slots of a slot index on its own device, with no value read back: padding and entries
/// outside `grid` become -1 (skipped by every backend). Returns [n] int64 there.
at::Tensor DeviceSlots(const at::Tensor& slots, const SlotGrid& grid);

}  // namespace ascend_kv
