#include <string>

#include <ATen/ops/empty.h>

#include "cpu_fallback/host.h"
#include "cpu_fallback/on_device.h"
#include "csrc/ops/upload.h"
#include "csrc/ops/ops.h"
#include "csrc/ops/route.h"
#include "csrc/rules/block_copy.h"
#include "csrc/rules/formats.h"
#include "csrc/rules/kernel_domain.h"

namespace ascend_kv {
namespace {

/// Each non-empty cache as the [num_blocks, rows, row] view the kernel copies (in its domain), its
/// block's dims in memory order (the same bytes).
std::vector<at::Tensor> BlockViews(const std::vector<at::Tensor>& caches)
{
    std::vector<at::Tensor> views;
    for (const at::Tensor& given : caches) {
        if (given.numel()) {
            const at::Tensor cache = InMemoryOrder(given);
            const BlockRows rows = *BlockRowsOf(cache);
            views.push_back(cache.as_strided({cache.size(0), rows.rows, rows.row}, {rows.block_stride, rows.row_stride, 1}));
        }
    }
    return views;
}

void Launch(const KernelLibrary& kernels, const std::vector<at::Tensor>& caches, c10::ArrayRef<at::Tensor> index,
            bool simultaneous)
{
    const std::vector<at::Tensor> views = BlockViews(caches);
    if (!views.empty()) {
        kernels.block_copy(views, index[0], index[1], index[2], simultaneous);
    }
}

/// One backend call for every cache of a checked block_copy or copy_blocks.
void Run(BlockCopyCall& call)
{
    if (call.caches.empty()) {
        return;
    }
    const at::Device device = call.caches[0].device();
    if (device.is_cpu()) {
        const BlockCopyPlan plan = PlanBlockCopy(call);
        const bool fits = BlockCopyOutsideReason({}, call.simultaneous, call.dst.size(0), call.noun).empty();
        if (HostBackend(Operation::kBlockCopy) == Backend::kSim && fits) {
            Count(Ran::kSim);
            std::vector<at::Tensor> copies;
            for (const at::Tensor& cache : call.caches) {  // outside the kernel's domain: on a contiguous copy
                copies.push_back(cache.numel() && !BlockRowsOf(InMemoryOrder(cache)) ? cache.contiguous() : cache);
            }
            Launch(Kernels(Backend::kSim), copies, OnDevice(call.IndexTensors(), device), call.simultaneous);
            for (size_t i = 0; i < copies.size(); ++i) {
                WriteBack(call.caches[i], copies[i]);
            }
        } else {
            Count(Ran::kHostPaths);
            host::BlockCopy(call, plan);
        }
        return;
    }
    if (ReadsValues(call.IndexTensors())) {
        PlanBlockCopy(call);
    }
    const IndexTensors index = OnDevice(call.IndexTensors(), device);
    const Backend backend = DeviceBackend(Operation::kBlockCopy, device,
                                          BlockCopyOutsideReason(call.caches, call.simultaneous, call.dst.size(0),
                                                                 call.noun));
    if (backend == Backend::kNpu) {
        Count(Ran::kKernels);
        Launch(Kernels(backend), call.caches, index, call.simultaneous);
        return;
    }
    call.src = index[0];
    call.dst = index[1];
    call.cum_sum = index[2];
    Count(Ran::kDeviceFallback);
    on_device::BlockCopy(call);
}

std::vector<Named> NamedCaches(const BlockCopyCall& call)
{
    std::vector<Named> named;
    for (size_t i = 0; i < call.caches.size(); ++i) {
        named.push_back({call.names[i], call.caches[i]});
    }
    return named;
}

/// The first (nbytes // B) * B bytes of contiguous `t` as [nbytes // B, B] uint8: block m is bytes [m*B, (m+1)*B).
at::Tensor ByteBlocks(const at::Tensor& t, int64_t block_bytes)
{
    const int64_t blocks = static_cast<int64_t>(t.nbytes()) / block_bytes;
    return t.reshape(-1).view(at::kByte).narrow(0, 0, blocks * block_bytes).view({blocks, block_bytes});
}

}  // namespace

void BlockCopy(const at::Tensor& key_cache, const c10::optional<at::Tensor>& value_cache,
               const at::Tensor& src_block_indices, const at::Tensor& dst_block_indices, const at::Tensor& cum_sum,
               bool simultaneous)
{
    BelowAutograd guard;
    if (!key_cache.is_cpu()) {
        const at::Tensor absent;
        RequireBaseFormats({{"key_cache", key_cache}, {"value_cache", value_cache ? *value_cache : absent}});
    }
    BlockCopyCall call = CheckBlockCopy(key_cache, value_cache.value_or(at::Tensor()), src_block_indices,
                                        dst_block_indices, cum_sum, simultaneous, Check::kCall);
    Run(call);
}

void BlockCopyMeta(const at::Tensor& key_cache, const c10::optional<at::Tensor>& value_cache,
                   const at::Tensor& src_block_indices, const at::Tensor& dst_block_indices, const at::Tensor& cum_sum,
                   bool simultaneous)
{
    NoteTracing();
    CheckBlockCopy(key_cache, value_cache.value_or(at::Tensor()), src_block_indices, dst_block_indices, cum_sum,
                   simultaneous, Check::kShapes);
}

void CopyBlocks(at::TensorList key_caches, at::TensorList value_caches, const at::Tensor& block_mapping,
                bool simultaneous)
{
    BelowAutograd guard;
    BlockCopyCall call = CheckCopyBlocks(key_caches, value_caches, block_mapping, simultaneous, Check::kCall);
    if (!call.caches.empty() && !call.caches[0].is_cpu()) {
        RequireBaseFormats(NamedCaches(call));
    }
    Run(call);
}

void CopyBlocksMeta(at::TensorList key_caches, at::TensorList value_caches, const at::Tensor& block_mapping,
                    bool simultaneous)
{
    NoteTracing();
    CheckCopyBlocks(key_caches, value_caches, block_mapping, simultaneous, Check::kShapes);
}

void CopyStateSlots(at::TensorList states, const at::Tensor& src_indices, const at::Tensor& dst_indices,
                    bool simultaneous)
{
    BelowAutograd guard;
    BlockCopyCall call = CheckCopyStateSlots(states, src_indices, dst_indices, simultaneous, Check::kCall);
    if (!call.caches.empty() && !call.caches[0].is_cpu()) {
        RequireBaseFormats(NamedCaches(call));
    }
    Run(call);
}

void CopyStateSlotsMeta(at::TensorList states, const at::Tensor& src_indices, const at::Tensor& dst_indices,
                        bool simultaneous)
{
    NoteTracing();
    CheckCopyStateSlots(states, src_indices, dst_indices, simultaneous, Check::kShapes);
}

void SwapBlocks(const at::Tensor& src, const at::Tensor& dst, const at::Tensor& block_mapping)
{
    BelowAutograd guard;
    RequireBaseFormats({{"src", src}, {"dst", dst}});
    const BlockCopyPlan pairs = CheckSwapBlocks(src, dst, block_mapping, Check::kCall);
    if (pairs.destinations.empty() || src.numel() == 0) {
        return;
    }
    if (src.is_cpu() && dst.is_cpu()) {
        host::SwapBlocks(src, dst, pairs);
    } else {
        on_device::SwapBlocks(src, dst, pairs);
    }
}

void SwapBlocksMeta(const at::Tensor& src, const at::Tensor& dst, const at::Tensor& block_mapping)
{
    NoteTracing();
    CheckSwapBlocks(src, dst, block_mapping, Check::kShapes);
}

void SwapBlockBytes(const at::Tensor& src, const at::Tensor& dst, int64_t block_size_in_bytes,
                    const at::Tensor& block_mapping)
{
    BelowAutograd guard;
    RequireBaseFormats({{"src", src}, {"dst", dst}});
    const BlockCopyPlan pairs = CheckSwapBlockBytes(src, dst, block_size_in_bytes, block_mapping, Check::kCall);
    if (pairs.destinations.empty()) {
        return;
    }
    const at::Tensor from = ByteBlocks(src, block_size_in_bytes), to = ByteBlocks(dst, block_size_in_bytes);
    if (src.is_cpu() && dst.is_cpu()) {
        host::SwapBlocks(from, to, pairs);
    } else {
        on_device::CopyRuns(from, to, pairs);
    }
}

void SwapBlockBytesMeta(const at::Tensor& src, const at::Tensor& dst, int64_t block_size_in_bytes,
                        const at::Tensor& block_mapping)
{
    NoteTracing();
    CheckSwapBlockBytes(src, dst, block_size_in_bytes, block_mapping, Check::kShapes);
}

}  // namespace ascend_kv
