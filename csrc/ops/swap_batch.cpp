// swap_blocks_batch: vLLM's batched pointer copy. The tables are checked on the host; with an
// NPU runtime the copies are queued on the current stream in one runtime call (the kernel
// library's memcpy_batch), without one every copy is a host memcpy.
#include "cpu_fallback/host.h"
#include "csrc/dispatch/kernels.h"
#include "csrc/ops/ops.h"
#include "csrc/ops/route.h"
#include "csrc/rules/swap_batch.h"

namespace ascend_kv {

void SwapBlocksBatch(const at::Tensor& src_ptrs, const at::Tensor& dst_ptrs, const at::Tensor& sizes,
                     bool /*is_src_access_order_any: stream order is always correct*/, int64_t direction)
{
    BelowAutograd guard;
    const BatchCopies copies = CheckSwapBlocksBatch(src_ptrs, dst_ptrs, sizes, direction);
    if (const KernelLibrary* npu = KernelsFor(KernelRole::kNpu); npu != nullptr) {
        npu->memcpy_batch(copies.src, copies.dst, copies.sizes, copies.direction);
        return;
    }
    host::MemcpyBatch(copies);
}

void SwapBlocksBatchMeta(const at::Tensor&, const at::Tensor&, const at::Tensor&, bool, int64_t) { NoteTracing(); }

}  // namespace ascend_kv
