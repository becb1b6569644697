// scatter_nd_update (docs/semantics.md §15.1): rows into a tensor of any strides at flat rows or
// (block, offset) pairs. Its kernel is reshape_and_cache's, key-only ND: var as a cache
// [num_blocks, block_size, 1, row], updates as tokens [n, 1, row], the index as flat slots.
#include "cpu_fallback/host.h"
#include "cpu_fallback/on_device.h"
#include "csrc/ops/ops.h"
#include "csrc/ops/route.h"
#include "csrc/ops/upload.h"
#include "csrc/rules/formats.h"
#include "csrc/rules/geometry.h"
#include "csrc/rules/kernel_domain.h"
#include "csrc/rules/scatter_nd.h"

namespace ascend_kv {
namespace {

/// The rows' pieces the kernel copies whole: a row of updates (dims 1..) and of var (dims k..).
std::vector<Rows> KernelRows(const ScatterNdCall& call)
{
    return {{"updates", call.updates, 1, "rows (dims 1..)"}, {"var", call.grid, 2, "rows (the dims after the index's)"}};
}

/// The kernel over tensors in its domain, `slots` flat on the tensors' device.
void Launch(const KernelLibrary& kernels, const ScatterNdCall& call, const at::Tensor& slots)
{
    const at::Tensor& grid = call.grid;
    const int64_t n = call.updates.size(0);
    if (n == 0 || grid.numel() == 0) {
        return;  // no row, or rows of no element: nothing to write
    }
    const int64_t row = grid.numel() / (grid.size(0) * grid.size(1));
    const at::Tensor tokens = call.updates.as_strided({n, 1, row}, {call.updates.stride(0), row, 1});
    const at::Tensor cache = grid.as_strided({grid.size(0), grid.size(1), 1, row}, {grid.stride(0), grid.stride(1), row, 1});
    kernels.reshape_and_cache(tokens, at::Tensor(), cache, at::Tensor(), slots, static_cast<int64_t>(Layout::kNd));
}

void RunOnHost(const ScatterNdCall& call)
{
    const at::Tensor slots = HostSlots("indices", call.slots, call.Grid());
    if (HostBackend(Operation::kReshapeAndCache) != Backend::kSim) {
        Count(Ran::kHostPaths);
        host::ScatterNdUpdate(call, slots);
        return;
    }
    Count(Ran::kSim);  // tensors outside the kernel's domain run on contiguous copies
    ScatterNdCall copies = call;
    copies.updates = InDomain(call.updates, 1);
    copies.grid = InDomain(call.grid, 2);
    Launch(Kernels(Backend::kSim), copies, OnDevice({slots}, call.var.device())[0]);
    WriteBack(call.grid, copies.grid);
}

void RunOnDevice(const ScatterNdCall& call)
{
    RequireBaseFormats({{"var", call.var}, {"updates", call.updates}});
    if (ReadsValues({call.slots})) {
        HostSlots("indices", OnHost({call.slots})[0], call.Grid());
    }
    const at::Tensor slots = DeviceSlots(OnDevice({call.slots}, call.var.device())[0], call.Grid());
    const Backend backend = DeviceBackend(Operation::kReshapeAndCache, call.var.device(), OutsideReason(KernelRows(call)));
    if (backend == Backend::kNpu) {
        Count(Ran::kKernels);
        Launch(Kernels(backend), call, slots);
    } else {
        Count(Ran::kDeviceFallback);
        on_device::ScatterNdUpdate(call, slots);
    }
}

}  // namespace

void ScatterNdUpdate(const at::Tensor& var, const at::Tensor& indices, const at::Tensor& updates)
{
    BelowAutograd guard;
    const ScatterNdCall call = CheckScatterNdUpdate(var, indices, updates, Check::kCall);
    if (call.var.is_cpu()) {
        RunOnHost(call);
    } else {
        RunOnDevice(call);
    }
}

void ScatterNdUpdateMeta(const at::Tensor& var, const at::Tensor& indices, const at::Tensor& updates)
{
    NoteTracing();
    CheckScatterNdUpdate(var, indices, updates, Check::kShapes);
}

}  // namespace ascend_kv
