// scatter_nd_update's host path (docs/semantics.md §15.1): each row one piece copy from its update
// row's strides to var's, over torch's threads with one writing thread per destination block.
#include "cpu_fallback/copy.h"
#include "cpu_fallback/host.h"
#include "cpu_fallback/slot_loops.h"

namespace ascend_kv::host {

void ScatterNdUpdate(const ScatterNdCall& call, const at::Tensor& slots)
{
    const at::Tensor& grid = call.grid;
    const int64_t n = slots.size(0), block_size = grid.size(1), size = grid.element_size();
    if (n == 0 || grid.numel() == 0) {
        return;
    }
    const BatchValues slot_of = SlotsOf(slots);
    const PieceCopy row = PieceCopy::Of(call.updates.sizes().slice(1), call.updates.strides().slice(1),
                                        grid.strides().slice(2), size);
    if (!row.Fits()) {  // more strided loops than a piece holds: row by row through ATen, in order
        for (int64_t i = 0; i < n; ++i) {
            if (slot_of[i] >= 0) {
                grid.select(0, slot_of[i] / block_size).select(0, slot_of[i] % block_size).copy_(call.updates[i]);
            }
        }
        return;
    }
    const char* rows = static_cast<const char*>(call.updates.const_data_ptr());
    char* out = static_cast<char*>(grid.data_ptr());
    const int64_t row_step = call.updates.stride(0) * size, block_step = grid.stride(0) * size;
    const int64_t slot_step = grid.stride(1) * size;
    const bool stream = ShouldStream(n * row.Bytes(), kStreamWrites);
    const auto write = [&](int64_t i, int64_t slot) {
        Copy(rows + i * row_step, out + slot / block_size * block_step + slot % block_size * slot_step, row, stream);
    };
    // Flat rows (k = 1) spread over the threads row by row, pairs block by block: either way a
    // destination has one writing thread, which takes its rows in order (the last one wins).
    ForEachSlot(slot_of, HoldsSlotPairs(call.slots) ? block_size : 1, row.Bytes(), write,
                [&] { EndStreaming(stream); });
}

}  // namespace ascend_kv::host
