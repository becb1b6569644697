// The batched pointer copies. swap_blocks_batch (vLLM's offload copies): the tables are checked on
// the host; with an NPU runtime the copies are queued on the current stream in one runtime call
// (the kernel library's memcpy_batch), without one every copy is a host memcpy. batch_memcpy
// (vLLM's mamba state copies, docs/semantics.md §14.3): host tables as swap_blocks_batch's; tables
// on a device are read by the kernel there (one launch), never by the host, except on the device
// fallback, which cannot follow an address without reading it.
#include "cpu_fallback/host.h"
#include "cpu_fallback/on_device.h"
#include "csrc/dispatch/kernels.h"
#include "csrc/ops/ops.h"
#include "csrc/ops/route.h"
#include "csrc/rules/swap_batch.h"

namespace ascend_kv {
namespace {

/// Checked copies between addresses the host cannot place: the NPU runtime's, else memcpy.
void CopyAddresses(const BatchCopies& copies)
{
    if (const KernelLibrary* npu = KernelsFor(KernelRole::kNpu); npu != nullptr) {
        npu->memcpy_batch(copies.src, copies.dst, copies.sizes, copies.direction);
        return;
    }
    host::MemcpyBatch(copies);
}

}  // namespace

void SwapBlocksBatch(const at::Tensor& src_ptrs, const at::Tensor& dst_ptrs, const at::Tensor& sizes,
                     bool /*is_src_access_order_any: stream order is always correct*/, int64_t direction)
{
    BelowAutograd guard;
    CopyAddresses(CheckSwapBlocksBatch(src_ptrs, dst_ptrs, sizes, direction));
}

void SwapBlocksBatchMeta(const at::Tensor&, const at::Tensor&, const at::Tensor&, bool, int64_t) { NoteTracing(); }

void BatchMemcpy(const at::Tensor& src_ptrs, const at::Tensor& dst_ptrs, const at::Tensor& sizes)
{
    BelowAutograd guard;
    CheckBatchMemcpy(src_ptrs, dst_ptrs, sizes, Check::kCall);
    const at::Device device = src_ptrs.device();
    if (device.is_cpu()) {
        const BatchCopies copies = PlanBatchMemcpy(src_ptrs, dst_ptrs, sizes);
        if (HostBackend(Operation::kBlockCopy) == Backend::kSim) {  // the kernel over host addresses
            Count(Ran::kSim);
            Kernels(Backend::kSim).batch_memcpy(src_ptrs.contiguous(), dst_ptrs.contiguous(), sizes.contiguous());
            return;
        }
        Count(Ran::kHostPaths);
        CopyAddresses(copies);
        return;
    }
    if (ValidateFull()) {
        PlanBatchMemcpy(src_ptrs, dst_ptrs, sizes);
    }
    if (DeviceBackend(Operation::kBlockCopy, device, "") == Backend::kNpu) {
        Count(Ran::kKernels);
        Kernels(Backend::kNpu).batch_memcpy(src_ptrs.contiguous(), dst_ptrs.contiguous(), sizes.contiguous());
        return;
    }
    Count(Ran::kDeviceFallback);
    on_device::BatchMemcpy(src_ptrs, dst_ptrs, sizes);
}

void BatchMemcpyMeta(const at::Tensor& src_ptrs, const at::Tensor& dst_ptrs, const at::Tensor& sizes)
{
    NoteTracing();
    CheckBatchMemcpy(src_ptrs, dst_ptrs, sizes, Check::kShapes);
}

}  // namespace ascend_kv
