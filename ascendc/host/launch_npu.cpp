/*
 * The NPU build's side of kernel_launch.h: the device's vector cores and UB, the storage-format
 * check, and the kernel launches queued on the current NPU stream through torch_npu's task queue
 * (OpCommand), so they are ordered with every other operation on that stream.
 *
 * CANN's ascendc_library() generates, for every `extern "C" __global__ __aicore__` kernel, a
 * launcher aclrtlaunch_<kernel>(blockDim, stream, kernel arguments...) returning 0 when the launch
 * was queued. The declarations below are ours (the generated header is not available when the
 * binding compiles); they follow the kernels' parameter lists exactly.
 */
#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <ATen/ATen.h>

#include "acl/acl.h"
#include "torch_npu/csrc/core/npu/NPUFormat.h"
#include "torch_npu/csrc/core/npu/NPUGraphsUtils.h"
#include "torch_npu/csrc/core/npu/NPUGuard.h"
#include "torch_npu/csrc/core/npu/NPUStream.h"
#include "torch_npu/csrc/framework/OpCommand.h"

#include "kernel_launch.h"
#include "tiling_cache.h"

extern "C" {
/// kernels/kv_cache.cpp: kv_cache_kernel(newKv, past, tokenOffset, seqLen, layerId, tiling).
uint32_t aclrtlaunch_kv_cache_kernel(uint32_t blockDim, aclrtStream stream, void* newKv, void* past,
                                     void* tokenOffset, void* seqLen, void* layerId, void* tiling);
/// kernels/paged_cache_load.cpp: paged_cache_load_kernel(keyCache, valueCache, blockTable, contextLens,
/// seqStarts, key, value, tiling).
uint32_t aclrtlaunch_paged_cache_load_kernel(uint32_t blockDim, aclrtStream stream, void* keyCache,
                                             void* valueCache, void* blockTable, void* contextLens,
                                             void* seqStarts, void* key, void* value, void* tiling);
/// kernels/reshape_and_cache.cpp: reshape_and_cache_kernel(key, value, keyCache, valueCache, slotMapping, tiling).
uint32_t aclrtlaunch_reshape_and_cache_kernel(uint32_t blockDim, aclrtStream stream, void* key, void* value,
                                              void* keyCache, void* valueCache, void* slotMapping, void* tiling);
/// kernels/reshape_and_cache_quant.cpp: reshape_and_cache_quant_kernel(key, value, keyCache, valueCache,
/// slotMapping, keyScale, keyOffset, keyScaleCache, valueScale, valueOffset, valueScaleCache, tiling).
uint32_t aclrtlaunch_reshape_and_cache_quant_kernel(uint32_t blockDim, aclrtStream stream, void* key, void* value,
                                                    void* keyCache, void* valueCache, void* slotMapping,
                                                    void* keyScale, void* keyOffset, void* keyScaleCache,
                                                    void* valueScale, void* valueOffset, void* valueScaleCache,
                                                    void* tiling);
/// kernels/paged_cache_load_dequant.cpp: paged_cache_load_dequant_kernel(keyCache, valueCache, blockTable,
/// contextLens, seqStarts, key, value, keyScale, keyOffset, keyScaleCache, valueScale, valueOffset,
/// valueScaleCache, tiling).
uint32_t aclrtlaunch_paged_cache_load_dequant_kernel(uint32_t blockDim, aclrtStream stream, void* keyCache,
                                                     void* valueCache, void* blockTable, void* contextLens,
                                                     void* seqStarts, void* key, void* value, void* keyScale,
                                                     void* keyOffset, void* keyScaleCache, void* valueScale,
                                                     void* valueOffset, void* valueScaleCache, void* tiling);
/// kernels/block_copy.cpp: block_copy_kernel(cacheTable, src, dst, cumSum, buffer, tiling).
uint32_t aclrtlaunch_block_copy_kernel(uint32_t blockDim, aclrtStream stream, void* cacheTable, void* src, void* dst,
                                       void* cumSum, void* buffer, void* tiling);
/// kernels/batch_memcpy.cpp: batch_memcpy_kernel(srcPtrs, dstPtrs, sizes, tiling).
uint32_t aclrtlaunch_batch_memcpy_kernel(uint32_t blockDim, aclrtStream stream, void* srcPtrs, void* dstPtrs,
                                         void* sizes, void* tiling);
/// kernels/transfer_blocks.cpp: transfer_blocks_kernel(cacheTable, buffer, ids, tiling).
uint32_t aclrtlaunch_transfer_blocks_kernel(uint32_t blockDim, aclrtStream stream, void* cacheTable, void* buffer,
                                            void* ids, void* tiling);
}

namespace ascend_kv {
namespace {

/// Usable Unified Buffer per vector core on A2/A3: 192 KB, less 256 B, less the 8 KB the
/// toolchain reserves by default (docs/hardware.md).
constexpr uint64_t kUsableUbBytes = 192 * 1024 - 256 - 8 * 1024;

void* Address(const at::Tensor& tensor) { return tensor.defined() ? tensor.data_ptr() : nullptr; }

/// A tiling in device memory: the pinned host copy it is uploaded from and the device copy the
/// kernel reads.
struct DeviceTiling {
    at::Tensor host;
    at::Tensor device;
};

/**
 * The tiling in device memory, one read-only copy per (device, stream, tiling bytes), from a
 * bounded cache (tiling_cache.h). Why: a blocking copy from pageable memory synchronises the stream
 * and cannot be captured in a graph. The first call of a shape uploads from pinned memory with a
 * non-blocking copy ordered on the stream that launches the kernel; later calls of that shape
 * upload nothing. A graph being captured keeps its tilings for good, so its replays copy from and
 * read memory that never changes or goes away. Keyed by stream as well, so a kernel never reads a
 * tiling another stream is still writing. The caller holds the entry until its launch has run.
 */
std::shared_ptr<DeviceTiling> TilingOnDevice(const void* tiling, size_t bytes, const at::Device& device,
                                             aclrtStream stream)
{
    // Leaked on purpose: destroying its tensors at exit would free NPU memory after ACL's teardown.
    static auto* cache = new TilingCache<DeviceTiling>(kTilingCacheEntries);
    const bool capturing = c10_npu::currentStreamCaptureStatusMayInitCtx() != c10_npu::CaptureStatus::None;
    TilingKey key{device.index(), stream, std::string(static_cast<const char*>(tiling), bytes)};
    return cache->Get(key, capturing, [&]() {
        const auto length = static_cast<int64_t>(bytes);
        DeviceTiling made;
        made.host = at::empty({length}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
        std::memcpy(made.host.data_ptr(), tiling, bytes);
        made.device = at::empty({length}, at::TensorOptions().dtype(at::kByte).device(device));
        made.device.copy_(made.host, /*non_blocking=*/true);
        return made;
    });
}

/// Queue `launch` (returning the launcher's status) on the current stream of `device`. Why
/// through OpCommand: torch_npu may defer work to its task queue; a custom handler runs in queue
/// order, and a nonzero status it returns is reported as an error instead of being dropped.
template <typename Tiling, typename Launch>
void Queue(const char* op, const at::Device& device, const Tiling& tiling, Launch launch)
{
    c10_npu::NPUGuard guard(device);
    aclrtStream stream = c10_npu::getCurrentNPUStream(device.index()).stream(false);
    // Held by the queued launch, so a tiling dropped from the cache meanwhile stays allocated until the
    // kernel is on the stream; after that only later work on that stream can reuse its memory.
    const std::shared_ptr<DeviceTiling> onDevice = TilingOnDevice(&tiling, sizeof(tiling), device, stream);
    const auto blockDim = static_cast<uint32_t>(tiling.usedCores);
    at_npu::native::OpCommand command;
    command.Name(std::string("ascend_kv_") + op);
    command.SetCustomHandler(
        [=]() -> int { return static_cast<int>(launch(blockDim, stream, onDevice->device.data_ptr())); });
    command.Run();
}

/// aclrtMemcpyBatchAsync's attribute (aclrtMemcpyBatchAttr: destination and source aclrtMemLocation,
/// then 16 reserved bytes), declared here so the build does not need a CANN whose headers have it.
struct BatchLocation {
    uint32_t id;
    int32_t type;  // aclrtMemLocationType: 0 host, 1 device
};
struct BatchAttr {
    BatchLocation dst;
    BatchLocation src;
    uint8_t reserved[16];
};
using MemcpyBatchAsync = aclError (*)(void** dsts, size_t* destMaxs, void** srcs, size_t* sizes, size_t numBatches,
                                      BatchAttr* attrs, size_t* attrsIndexes, size_t numAttrs, size_t* failIndex,
                                      aclrtStream stream);

/// The runtime's aclrtMemcpyBatchAsync (CANN 8.5 and later), or null on an older CANN.
MemcpyBatchAsync BatchCopier()
{
    static const auto found = reinterpret_cast<MemcpyBatchAsync>(dlsym(RTLD_DEFAULT, "aclrtMemcpyBatchAsync"));
    return found;
}

aclrtMemcpyKind KindOf(int64_t direction)
{
    switch (direction) {
        case 0: return ACL_MEMCPY_HOST_TO_DEVICE;
        case 1: return ACL_MEMCPY_DEVICE_TO_HOST;
        case 2: return ACL_MEMCPY_DEVICE_TO_DEVICE;
        default: return ACL_MEMCPY_DEFAULT;  // the runtime tells the direction from the addresses
    }
}

}  // namespace

void LaunchMemcpyBatch(const std::vector<int64_t>& src, const std::vector<int64_t>& dst, const std::vector<int64_t>& sizes,
                       int64_t direction)
{
    std::vector<void*> srcs, dsts;
    std::vector<size_t> bytes;
    for (size_t i = 0; i < sizes.size(); ++i) {
        if (sizes[i] > 0) {
            srcs.push_back(reinterpret_cast<void*>(src[i]));
            dsts.push_back(reinterpret_cast<void*>(dst[i]));
            bytes.push_back(static_cast<size_t>(sizes[i]));
        }
    }
    if (bytes.empty()) {
        return;
    }
    const auto device = static_cast<uint32_t>(c10_npu::current_device());
    // Through torch_npu's task queue, as the kernels: ordered with the stream's other work, never a wait.
    at_npu::native::OpCommand command;
    command.Name("ascend_kv_swap_blocks_batch");
    command.SetCustomHandler([=]() mutable -> int {
        aclrtStream stream = c10_npu::getCurrentNPUStream().stream(false);
        const MemcpyBatchAsync batch = BatchCopier();
        if (batch != nullptr && direction >= 0) {  // one runtime call for the batch
            BatchAttr attr{};
            attr.src = {device, direction == 0 ? 0 : 1};
            attr.dst = {device, direction == 1 ? 0 : 1};
            std::vector<size_t> maxs = bytes;
            size_t first = 0, failed = SIZE_MAX;
            return static_cast<int>(batch(dsts.data(), maxs.data(), srcs.data(), bytes.data(), bytes.size(), &attr,
                                          &first, 1, &failed, stream));
        }
        for (size_t i = 0; i < bytes.size(); ++i) {  // an older CANN, or the direction inferred: one copy each
            const aclError error = aclrtMemcpyAsync(dsts[i], bytes[i], srcs[i], bytes[i], KindOf(direction), stream);
            if (error != ACL_SUCCESS) {
                return static_cast<int>(error);
            }
        }
        return 0;
    });
    command.Run();
}

uint64_t VectorCoreCount(const at::Device& device)
{
    static std::mutex mutex;
    static std::map<int, uint64_t> cores;  // asked once per device (40 on Ascend910B3, other parts differ)
    std::lock_guard<std::mutex> lock(mutex);
    auto found = cores.find(device.index());
    if (found != cores.end()) {
        return found->second;
    }
    int64_t count = 0;
    const aclError error =
        aclGetDeviceCapability(static_cast<uint32_t>(device.index()), ACL_DEVICE_INFO_VECTOR_CORE_NUM, &count);
    TORCH_CHECK(error == ACL_SUCCESS && count > 0, "ascend_kv_npu: aclGetDeviceCapability(", device.index(),
                ", ACL_DEVICE_INFO_VECTOR_CORE_NUM) failed: error ", error, ", count ", count);
    cores.emplace(device.index(), static_cast<uint64_t>(count));
    return static_cast<uint64_t>(count);
}

uint64_t UsableUbBytes(const at::Device&) { return kUsableUbBytes; }

int64_t StorageFormat(const at::Tensor& tensor)
{
    // npu_format_cast (e.g. FRACTAL_NZ) keeps is_contiguous() true while the bytes leave the
    // logical layout: the operator library refuses such tensors by this format.
    return at_npu::native::get_npu_format(tensor);
}

void LaunchKvCache(const at::Tensor& newKv, const at::Tensor& past, const at::Tensor& tokenOffset,
                   const at::Tensor& seqLen, const at::Tensor& layer, const KvCacheTiling& tiling)
{
    // Tensors are captured by value: their memory stays allocated until the queued launch runs.
    Queue("kv_cache", past.device(), tiling, [=](uint32_t blockDim, aclrtStream stream, void* tilingGm) {
        return aclrtlaunch_kv_cache_kernel(blockDim, stream, Address(newKv), Address(past), Address(tokenOffset),
                                           Address(seqLen), Address(layer), tilingGm);
    });
}

void LaunchPagedLoad(const at::Tensor& keyCache, const at::Tensor& valueCache, const at::Tensor& blockTable,
                     const at::Tensor& contextLens, const at::Tensor& seqStarts, const at::Tensor& key,
                     const at::Tensor& value, const PagedLoadTiling& tiling)
{
    Queue("paged_cache_load", keyCache.device(), tiling, [=](uint32_t blockDim, aclrtStream stream, void* tilingGm) {
        return aclrtlaunch_paged_cache_load_kernel(blockDim, stream, Address(keyCache), Address(valueCache),
                                                   Address(blockTable), Address(contextLens), Address(seqStarts),
                                                   Address(key), Address(value), tilingGm);
    });
}

void LaunchReshapeAndCache(const at::Tensor& key, const at::Tensor& value, const at::Tensor& keyCache,
                           const at::Tensor& valueCache, const at::Tensor& slotMapping, const ReshapeTiling& tiling)
{
    Queue("reshape_and_cache", keyCache.device(), tiling, [=](uint32_t blockDim, aclrtStream stream, void* tilingGm) {
        return aclrtlaunch_reshape_and_cache_kernel(blockDim, stream, Address(key), Address(value), Address(keyCache),
                                                    Address(valueCache), Address(slotMapping), tilingGm);
    });
}

void LaunchReshapeAndCacheQuant(const at::Tensor& key, const at::Tensor& value, const at::Tensor& keyCache,
                                const at::Tensor& valueCache, const at::Tensor& slotMapping,
                                const KernelQuantSide& keyQuant, const KernelQuantSide& valueQuant,
                                const ReshapeQuantTiling& tiling)
{
    Queue("reshape_and_cache", keyCache.device(), tiling, [=](uint32_t blockDim, aclrtStream stream, void* tilingGm) {
        return aclrtlaunch_reshape_and_cache_quant_kernel(
            blockDim, stream, Address(key), Address(value), Address(keyCache), Address(valueCache),
            Address(slotMapping), Address(keyQuant.scale), Address(keyQuant.offset), Address(keyQuant.scale_cache),
            Address(valueQuant.scale), Address(valueQuant.offset), Address(valueQuant.scale_cache), tilingGm);
    });
}

void LaunchPagedLoadDequant(const at::Tensor& keyCache, const at::Tensor& valueCache, const at::Tensor& blockTable,
                            const at::Tensor& contextLens, const at::Tensor& seqStarts, const at::Tensor& key,
                            const at::Tensor& value, const KernelQuantSide& keyQuant, const KernelQuantSide& valueQuant,
                            const PagedLoadDequantTiling& tiling)
{
    Queue("paged_cache_load", keyCache.device(), tiling, [=](uint32_t blockDim, aclrtStream stream, void* tilingGm) {
        return aclrtlaunch_paged_cache_load_dequant_kernel(
            blockDim, stream, Address(keyCache), Address(valueCache), Address(blockTable), Address(contextLens),
            Address(seqStarts), Address(key), Address(value), Address(keyQuant.scale), Address(keyQuant.offset),
            Address(keyQuant.scale_cache), Address(valueQuant.scale), Address(valueQuant.offset),
            Address(valueQuant.scale_cache), tilingGm);
    });
}

void LaunchBlockCopy(const std::vector<at::Tensor>& caches, const std::vector<uint64_t>& table, const at::Tensor& src,
                     const at::Tensor& dst, const at::Tensor& cumSum, const at::Tensor& buffer,
                     const BlockCopyTiling& tiling)
{
    // The cache table (addresses and geometry) goes to the device like a tiling: one persistent copy
    // per distinct table, so a step over the same caches uploads nothing after the first.
    const at::Device device = caches[0].device();
    c10_npu::NPUGuard guard(device);
    aclrtStream current = c10_npu::getCurrentNPUStream(device.index()).stream(false);
    // Held by the queued launch, as Queue holds the tiling: dropped from the cache, it stays allocated.
    const std::shared_ptr<DeviceTiling> onDevice =
        TilingOnDevice(table.data(), table.size() * sizeof(uint64_t), device, current);
    Queue("block_copy", device, tiling, [=, kept = caches](uint32_t blockDim, aclrtStream stream, void* tilingGm) {
        static_cast<void>(kept);  // the caches stay allocated until the queued launch runs
        return aclrtlaunch_block_copy_kernel(blockDim, stream, onDevice->device.data_ptr(), Address(src), Address(dst),
                                             Address(cumSum), Address(buffer), tilingGm);
    });
}

void LaunchBatchMemcpyKernel(const at::Tensor& src, const at::Tensor& dst, const at::Tensor& sizes,
                             const BatchMemcpyTiling& tiling)
{
    Queue("batch_memcpy", src.device(), tiling, [=](uint32_t blockDim, aclrtStream stream, void* tilingGm) {
        return aclrtlaunch_batch_memcpy_kernel(blockDim, stream, Address(src), Address(dst), Address(sizes), tilingGm);
    });
}

void LaunchTransferBlocks(const std::vector<at::Tensor>& caches, const std::vector<uint64_t>& table,
                          const at::Tensor& buffer, const at::Tensor& ids, const TransferTiling& tiling)
{
    // The cache table goes to the device as block_copy's does: one persistent copy per distinct table.
    const at::Device device = caches[0].device();
    c10_npu::NPUGuard guard(device);
    aclrtStream current = c10_npu::getCurrentNPUStream(device.index()).stream(false);
    const std::shared_ptr<DeviceTiling> onDevice =
        TilingOnDevice(table.data(), table.size() * sizeof(uint64_t), device, current);
    Queue("transfer_blocks", device, tiling, [=, kept = caches](uint32_t blockDim, aclrtStream stream, void* tilingGm) {
        static_cast<void>(kept);  // the caches stay allocated until the queued launch runs
        return aclrtlaunch_transfer_blocks_kernel(blockDim, stream, onDevice->device.data_ptr(), Address(buffer),
                                                  Address(ids), tilingGm);
    });
}

}  // namespace ascend_kv
