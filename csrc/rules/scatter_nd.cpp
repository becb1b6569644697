#include "csrc/rules/scatter_nd.h"

#include <vector>

#include "csrc/rules/dtypes.h"
#include "csrc/rules/memory.h"
#include "csrc/rules/tensors.h"
#include "csrc/rules/text.h"

namespace ascend_kv {

SlotGrid ScatterNdCall::Grid() const
{
    return {grid.size(0), grid.size(1), "var.shape[:2]", "var.shape[0]"};
}

ScatterNdCall CheckScatterNdUpdate(const at::Tensor& var, const at::Tensor& indices, const at::Tensor& updates,
                                   Check check)
{
    const bool meta = AllowsMeta(check, var);
    RequireData("var", var, meta);
    RequireData("updates", updates, meta);
    const int64_t size = static_cast<int64_t>(var.element_size());
    TORCH_CHECK_TYPE(size == 1 || size == 2 || size == 4 || size == 8, "var must have an element type of 1, 2, 4 or 8 "
                     "bytes, got ", TorchDtype(var.scalar_type()));
    RequireSameDtype("updates", updates, "var", var);
    RequireData("indices", indices, meta);
    RequireDtype("indices", indices, IndexDtypes());
    TORCH_CHECK_VALUE(indices.dim() == 1 || (indices.dim() == 2 && (indices.sym_size(1) == 1 || indices.sym_size(1) == 2)),
                      "indices must be [n] or [n, k] index tuples of k = 1 (rows) or 2 ((block, offset) pairs), "
                      "got shape ", ShapeOf(indices));
    const int64_t k = indices.dim() == 2 && indices.sym_size(1) == 2 ? 2 : 1;
    TORCH_CHECK_VALUE(var.dim() >= k, "var must have at least ", k, " dims for indices of k = ", k, ", got shape ",
                      ShapeOf(var));
    std::vector<c10::SymInt> expected = {indices.sym_size(0)};
    for (int64_t d = k; d < var.dim(); ++d) {
        expected.push_back(var.sym_size(d));
    }
    bool same = updates.dim() == static_cast<int64_t>(expected.size());
    for (int64_t d = 0; same && d < updates.dim(); ++d) {
        same = updates.sym_size(d) == expected[d];
    }
    TORCH_CHECK_VALUE(same, "updates must have shape (n, *var.shape[", k, ":]) = ", Tuple(expected), ", got ",
                      ShapeOf(updates));
    const at::Device device = RequireSameDevice({{"var", var}, {"updates", updates}});
    RequireIndexDevices(device, {{"indices", indices}});
    RequireWritable("var", var);
    ScatterNdCall call;
    call.var = var;
    call.grid = k == 2 ? var : var.unsqueeze(0);
    call.slots = indices.dim() == 2 && k == 1 ? indices.select(1, 0) : indices;
    call.updates = updates;
    if (check == Check::kCall) {
        RequireApart("var", var, {{"updates", updates}, {"indices", indices}});
    }
    return call;
}

}  // namespace ascend_kv
