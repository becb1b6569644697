#include "csrc/rules/slot_pairs.h"

#include <ATen/ATen.h>

#include "csrc/rules/dtypes.h"
#include "csrc/rules/index_values.h"
#include "csrc/rules/tensors.h"
#include "csrc/rules/text.h"

namespace ascend_kv {

void RequireSlotIndex(std::string_view name, const at::Tensor& t, bool allow_meta)
{
    RequireData(name, t, allow_meta);
    RequireDtype(name, t, IndexDtypes());
    TORCH_CHECK_VALUE(t.dim() == 1 || (t.dim() == 2 && t.sym_size(1) == 2), name, " must be [n] flat slots or [n, 2] (block, offset) "
                      "pairs, got shape ", ShapeOf(t));
}

at::Tensor HostSlots(std::string_view name, const at::Tensor& host, const SlotGrid& grid)
{
    const IndexReader index(host);
    const bool pairs = HoldsSlotPairs(host);
    at::Tensor slots = at::empty({index.Rows()}, at::kLong);
    int64_t* out = slots.data_ptr<int64_t>();
    for (int64_t i = 0; i < index.Rows(); ++i) {
        const int64_t block = pairs ? index.At(i, 0) : 0, offset = pairs ? index.At(i, 1) : index(i);
        if (block < 0 || offset < 0) {
            out[i] = -1;  // padding
            continue;
        }
        if (pairs) {
            TORCH_CHECK_VALUE(block < grid.num_blocks && offset < grid.block_size, name, "[", i, "] = (", block, ", ",
                              offset, ") is out of range: ", grid.pairs_what, " = (", grid.num_blocks, ", ",
                              grid.block_size, ")");
        } else {
            TORCH_CHECK_VALUE(offset < grid.num_blocks * grid.block_size, name, "[", i, "] = ", offset,
                              " is out of range: ", grid.flat_what, " = ", grid.num_blocks * grid.block_size);
        }
        out[i] = block * grid.block_size + offset;
    }
    return slots;
}

at::Tensor DeviceSlots(const at::Tensor& slots, const SlotGrid& grid)
{
    const at::Tensor minus_one = at::full({}, -1, slots.options().dtype(at::kLong));
    if (!HoldsSlotPairs(slots)) {
        const at::Tensor flat = slots.to(at::kLong);
        return at::where((flat >= 0) & (flat < grid.num_blocks * grid.block_size), flat, minus_one);
    }
    const at::Tensor block = slots.select(1, 0).to(at::kLong), offset = slots.select(1, 1).to(at::kLong);
    const at::Tensor inside = (block >= 0) & (offset >= 0) & (block < grid.num_blocks) & (offset < grid.block_size);
    // Clamped before the product, so no garbage pair wraps into range.
    const at::Tensor flat = block.clamp(0, std::max<int64_t>(grid.num_blocks - 1, 0)) * grid.block_size +
                            offset.clamp(0, std::max<int64_t>(grid.block_size - 1, 0));
    return at::where(inside, flat, minus_one);
}

}  // namespace ascend_kv
