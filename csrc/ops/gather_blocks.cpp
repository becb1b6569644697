#include <string>

#include "cpu_fallback/copy.h"
#include "cpu_fallback/host.h"
#include "cpu_fallback/on_device.h"
#include "csrc/ops/ops.h"
#include "csrc/ops/route.h"
#include "csrc/ops/upload.h"
#include "csrc/rules/gather_blocks.h"

namespace ascend_kv {
namespace {

std::vector<at::Tensor> AllCaches(const TransferCall& call)
{
    std::vector<at::Tensor> flat;
    for (const auto& side : call.caches) {
        flat.insert(flat.end(), side.begin(), side.end());
    }
    return flat;
}

/// Why the kernel cannot move the call's blocks in place, or "" when it can: a frame exists, the
/// caches share their strides, and a block merges into the kernel's four loops (as a PieceCopy's).
std::string TransferOutsideReason(const TransferCall& call)
{
    if (!call.framed) {
        return "an NZ piece holds part of a head and a head does not hold whole pieces";
    }
    const at::Tensor& first = call.caches[0][0];
    for (const at::Tensor& cache : AllCaches(call)) {
        if (cache.strides() != first.strides()) {
            return "caches of different strides";
        }
    }
    const FrameArray sizes = call.Ordered(call.frame);
    const FrameArray cache = call.Ordered(call.Strides(first, call.cache_layout, false));
    const FrameArray buffer = call.Ordered(call.Strides(call.buffer, call.buffer_layout, true));
    if (!host::PieceCopy::Of(sizes, cache, buffer, first.element_size()).Fits()) {
        return "a block of more strided loops than the kernel nests";
    }
    return "";
}

/// One launch for every cache: the frame, in the call's loop order, with each side's strides.
void Launch(const KernelLibrary& kernels, const TransferCall& call, const at::Tensor& ids)
{
    const std::vector<at::Tensor> caches = AllCaches(call);
    const FrameArray frame = call.Ordered(call.frame);
    const FrameArray cache = call.Ordered(call.Strides(caches[0], call.cache_layout, false));
    const FrameArray buffer = call.Ordered(call.Strides(call.buffer, call.buffer_layout, true));
    kernels.transfer_blocks(caches, call.buffer, ids, frame, cache, buffer, call.gather);
}

/// The sim on host tensors: caches or a buffer outside the kernel's domain run on contiguous copies.
void RunOnSim(TransferCall& call)
{
    const std::vector<at::Tensor> given = AllCaches(call);
    const at::Tensor buffer = call.buffer;
    if (!TransferOutsideReason(call).empty()) {
        for (auto& side : call.caches) {
            for (at::Tensor& cache : side) {
                cache = cache.contiguous();
            }
        }
    }
    call.buffer = call.buffer.contiguous();  // a Region of the host model holds at most 4 strided dims
    Count(Ran::kSim);
    Launch(Kernels(Backend::kSim), call, OnDevice({call.block_ids}, buffer.device())[0]);
    if (call.gather) {
        WriteBack(buffer, call.buffer);
        return;
    }
    const std::vector<at::Tensor> ran = AllCaches(call);
    for (size_t i = 0; i < given.size(); ++i) {
        WriteBack(given[i], ran[i]);
    }
}

/// One backend call for every layer, K and V, of a checked gather_blocks or scatter_blocks.
void RunTransfer(TransferCall& call)
{
    if (call.Layers() == 0) {
        return;
    }
    const at::Device device = call.caches[0][0].device();
    if (device.is_cpu()) {
        const std::vector<int64_t> ids = PlanTransfer(call);
        if (call.framed && HostBackend(Operation::kBlockCopy) == Backend::kSim) {
            RunOnSim(call);
            return;
        }
        Count(Ran::kHostPaths);
        if (!call.framed || !host::TransferBlocks(call, ids)) {
            on_device::TransferBlocks(call);  // a permutation the piece copies do not take: through ATen
        }
        return;
    }
    const bool checked = ReadsValues({call.block_ids});
    if (checked) {
        PlanTransfer(call);
    }
    call.block_ids = OnDevice({call.block_ids}, device)[0];
    // A host buffer goes through one device staging buffer of its size and one async copy (a
    // gather with unchecked ids first uploads it, so skipped rows keep their bytes).
    const at::Tensor given = call.buffer;
    call.buffer = BufferOnDevice(given, device, !call.gather || !checked);
    const Backend backend = DeviceBackend(Operation::kBlockCopy, device, TransferOutsideReason(call));
    if (backend == Backend::kNpu) {
        Count(Ran::kKernels);
        Launch(Kernels(backend), call, call.block_ids);
    } else {
        Count(Ran::kDeviceFallback);
        on_device::TransferBlocks(call);
    }
    if (call.gather) {
        BufferBack(given, call.buffer);
    }
}

}  // namespace

void GatherBlocks(at::TensorList key_caches, at::TensorList value_caches, const at::Tensor& block_ids,
                  const at::Tensor& out, c10::string_view cache_layout, c10::string_view out_layout,
                  int64_t head_splits)
{
    BelowAutograd guard;
    TransferCall call = CheckGatherBlocks(key_caches, value_caches, block_ids, out, cache_layout, out_layout,
                                          head_splits, Check::kCall);
    RunTransfer(call);
}

void GatherBlocksMeta(at::TensorList key_caches, at::TensorList value_caches, const at::Tensor& block_ids,
                      const at::Tensor& out, c10::string_view cache_layout, c10::string_view out_layout,
                      int64_t head_splits)
{
    NoteTracing();
    CheckGatherBlocks(key_caches, value_caches, block_ids, out, cache_layout, out_layout, head_splits, Check::kShapes);
}

void ScatterBlocks(const at::Tensor& src, at::TensorList key_caches, at::TensorList value_caches,
                   const at::Tensor& block_ids, c10::string_view src_layout, c10::string_view cache_layout,
                   int64_t head_splits)
{
    BelowAutograd guard;
    TransferCall call = CheckScatterBlocks(src, key_caches, value_caches, block_ids, src_layout, cache_layout,
                                           head_splits, Check::kCall);
    RunTransfer(call);
}

void ScatterBlocksMeta(const at::Tensor& src, at::TensorList key_caches, at::TensorList value_caches,
                       const at::Tensor& block_ids, c10::string_view src_layout, c10::string_view cache_layout,
                       int64_t head_splits)
{
    NoteTracing();
    CheckScatterBlocks(src, key_caches, value_caches, block_ids, src_layout, cache_layout, head_splits,
                       Check::kShapes);
}

}  // namespace ascend_kv
