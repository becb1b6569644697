/*
 * PyTorch op library of the NPU kernels: torch.ops.ascend_kv_npu.kv_cache / .paged_cache_load
 * for PrivateUse1 (the device torch_npu registers as "npu").
 *
 * Python (ascend_kv/backends/npu.py) calls these with a call already validated by
 * ascend_kv/checks.py and its int64 metadata already on the device, so the checks here only
 * guard memory safety. Per call: tiling on the host (tiling.h, from shapes, the device's vector
 * core count and the usable UB), one host-to-device copy of the tiling struct, and one kernel
 * launch queued through torch_npu's task queue (OpCommand) on the current NPU stream, so it is
 * ordered with every other operation on that stream. Tensors are captured by value in the
 * queued task: their memory stays allocated until the launch is issued.
 *
 * Schemas:
 *   kv_cache(Tensor new_kv, Tensor(a!) past, int layer_id, Tensor seq_len, Tensor read_start,
 *            Tensor write_start) -> ()
 *   paged_cache_load(Tensor key_cache, Tensor value_cache, Tensor(a!) key, Tensor(b!) value,
 *                    Tensor block_table, Tensor lens, Tensor out_start, Tensor first_column,
 *                    int num_tokens, int layout) -> ()
 */
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include <ATen/ATen.h>
#include <torch/library.h>

#include "acl/acl.h"
#include "torch_npu/csrc/core/npu/NPUGuard.h"
#include "torch_npu/csrc/core/npu/NPUStream.h"
#include "torch_npu/csrc/framework/OpCommand.h"

#include "kernel_launch.h"
#include "tiling.h"

namespace {

/// Usable Unified Buffer per vector core on A2/A3: 192 KB, less 256 B, less the 8 KB the
/// toolchain reserves by default (HARDWARE.md).
constexpr uint64_t kUsableUbBytes = 192 * 1024 - 256 - 8 * 1024;

/// Vector cores of NPU `index`, asked once per device (counts vary per part: 40 on Ascend910B3).
uint64_t VectorCores(c10::DeviceIndex index)
{
    static std::mutex mutex;
    static std::unordered_map<int, uint64_t> cores;
    std::lock_guard<std::mutex> lock(mutex);
    auto found = cores.find(index);
    if (found != cores.end()) {
        return found->second;
    }
    int64_t count = 0;
    const aclError error = aclGetDeviceCapability(static_cast<uint32_t>(index), ACL_DEVICE_INFO_VECTOR_CORE_NUM, &count);
    TORCH_CHECK(error == ACL_SUCCESS && count > 0, "ascend_kv_npu: aclGetDeviceCapability(", index,
                ", ACL_DEVICE_INFO_VECTOR_CORE_NUM) failed: error ", error, ", count ", count);
    cores.emplace(index, static_cast<uint64_t>(count));
    return static_cast<uint64_t>(count);
}

void CheckOnDevice(const at::Tensor& tensor, const char* name, const at::Device& device)
{
    TORCH_CHECK(tensor.device() == device, "ascend_kv_npu: ", name, " is on ", tensor.device(), ", expected ", device);
    TORCH_CHECK(tensor.is_contiguous(), "ascend_kv_npu: ", name, " must be contiguous");
}

void CheckMetadata(const at::Tensor& tensor, const char* name, const at::Device& device, int64_t numel)
{
    CheckOnDevice(tensor, name, device);
    TORCH_CHECK(tensor.scalar_type() == at::kLong, "ascend_kv_npu: ", name, " must be int64, got ", tensor.scalar_type());
    TORCH_CHECK(tensor.numel() == numel, "ascend_kv_npu: ", name, " must have ", numel, " entries, got ", tensor.numel());
}

uint64_t RowBytes(const at::Tensor& tensor, int64_t firstDim)
{
    uint64_t elements = 1;
    for (int64_t d = firstDim; d < tensor.dim(); ++d) {
        elements *= static_cast<uint64_t>(tensor.size(d));
    }
    return elements * static_cast<uint64_t>(tensor.element_size());
}

/// A copy of the tiling struct in device memory (a uint8 tensor), stream-ordered.
template <typename Tiling>
at::Tensor TilingOnDevice(const Tiling& tiling, const at::Device& device)
{
    at::Tensor host = at::empty({static_cast<int64_t>(sizeof(Tiling))}, at::TensorOptions().dtype(at::kByte));
    std::memcpy(host.data_ptr(), &tiling, sizeof(Tiling));
    return host.to(device);
}

/// Queue `launch` on the current stream of `device` through torch_npu's task queue.
template <typename Launch>
void Queue(const std::string& name, Launch launch)
{
    at_npu::native::OpCommand command;
    command.Name(name);
    command.SetCustomHandler(launch);
    command.Run();
}

/// Check the tiling of op `op`, copy it to `device` and queue `kernel(blockDim, stream, tiling in
/// device memory)` on the current stream; nothing is launched when the tiling uses no core.
template <typename Tiling, typename Kernel>
void LaunchTiled(const char* op, const at::Device& device, int status, const Tiling& tiling, Kernel kernel)
{
    TORCH_CHECK(status == ascend_kv::kTilingOk, "ascend_kv_npu.", op, ": tiling failed: ",
                ascend_kv::TilingStatusMessage(status));
    if (tiling.usedCores == 0) {
        return;
    }
    const at::Tensor tilingDevice = TilingOnDevice(tiling, device);
    const uint32_t blockDim = static_cast<uint32_t>(tiling.usedCores);
    aclrtStream stream = c10_npu::getCurrentNPUStream(device.index()).stream(false);
    Queue(std::string("ascend_kv_") + op, [=]() -> int {
        return static_cast<int>(kernel(blockDim, stream, tilingDevice.data_ptr()));
    });
}

void KvCache(const at::Tensor& newKv, const at::Tensor& past, int64_t layerId, const at::Tensor& seqLen,
             const at::Tensor& readStart, const at::Tensor& writeStart)
{
    const at::Device device = past.device();
    TORCH_CHECK(past.dim() == 4 && newKv.dim() == 2, "ascend_kv_npu.kv_cache: past must be 4-D and new_kv 2-D");
    TORCH_CHECK(newKv.scalar_type() == past.scalar_type(), "ascend_kv_npu.kv_cache: new_kv and past dtypes differ");
    CheckOnDevice(newKv, "new_kv", device);
    CheckOnDevice(past, "past", device);
    const int64_t batch = past.size(1);
    CheckMetadata(seqLen, "seq_len", device, batch);
    CheckMetadata(readStart, "read_start", device, batch);
    CheckMetadata(writeStart, "write_start", device, batch);
    TORCH_CHECK(RowBytes(newKv, 1) == RowBytes(past, 3), "ascend_kv_npu.kv_cache: new_kv and past rows differ");
    TORCH_CHECK(layerId >= 0 && layerId < past.size(0), "ascend_kv_npu.kv_cache: layer_id out of range");

    c10_npu::NPUGuard guard(device);
    ascend_kv::KvCacheShape shape{};
    shape.ntokens = static_cast<uint64_t>(newKv.size(0));
    shape.rowBytes = RowBytes(past, 3);
    shape.layers = static_cast<uint64_t>(past.size(0));
    shape.batch = static_cast<uint64_t>(batch);
    shape.maxSeqLen = static_cast<uint64_t>(past.size(2));
    shape.layerId = static_cast<uint64_t>(layerId);
    ascend_kv::KvCacheTiling tiling{};
    const int status = ascend_kv::ComputeKvCacheTiling(shape, VectorCores(device.index()), kUsableUbBytes, &tiling);
    LaunchTiled("kv_cache", device, status, tiling, [=](uint32_t blockDim, aclrtStream stream, void* tilingGm) {
        return aclrtlaunch_kv_cache_kernel(blockDim, stream, newKv.data_ptr(), past.data_ptr(), seqLen.data_ptr(),
                                           readStart.data_ptr(), writeStart.data_ptr(), tilingGm);
    });
}

void PagedCacheLoad(const at::Tensor& keyCache, const at::Tensor& valueCache, const at::Tensor& key,
                    const at::Tensor& value, const at::Tensor& blockTable, const at::Tensor& lens,
                    const at::Tensor& outStart, const at::Tensor& firstColumn, int64_t numTokens, int64_t layout)
{
    const at::Device device = keyCache.device();
    TORCH_CHECK(layout == static_cast<int64_t>(ascend_kv::kLayoutNd) || layout == static_cast<int64_t>(ascend_kv::kLayoutNz),
                "ascend_kv_npu.paged_cache_load: layout must be 0 (NZ) or 1 (ND), got ", layout);
    TORCH_CHECK(keyCache.dim() == 4 && valueCache.dim() == 4 && blockTable.dim() == 2,
                "ascend_kv_npu.paged_cache_load: caches must be 4-D and block_table 2-D");
    const at::Tensor* tensors[] = {&keyCache, &valueCache, &key, &value};
    const char* names[] = {"key_cache", "value_cache", "key", "value"};
    for (int i = 0; i < 4; ++i) {
        CheckOnDevice(*tensors[i], names[i], device);
    }
    const int64_t batch = blockTable.size(0);
    CheckMetadata(blockTable, "block_table", device, batch * blockTable.size(1));
    CheckMetadata(lens, "lens", device, batch);
    CheckMetadata(outStart, "out_start", device, batch);
    CheckMetadata(firstColumn, "first_column", device, batch);

    const bool nd = layout == static_cast<int64_t>(ascend_kv::kLayoutNd);
    c10_npu::NPUGuard guard(device);
    ascend_kv::PagedLoadShape shape{};
    shape.layout = static_cast<uint64_t>(layout);
    TORCH_CHECK(numTokens >= 0, "ascend_kv_npu.paged_cache_load: num_tokens must be >= 0, got ", numTokens);
    shape.numTokens = static_cast<uint64_t>(numTokens);  // sum(lens), known on the host: no device sync
    shape.batch = static_cast<uint64_t>(batch);
    shape.maxBlocks = static_cast<uint64_t>(blockTable.size(1));
    shape.numBlocks = static_cast<uint64_t>(keyCache.size(0));
    shape.blockSize = static_cast<uint64_t>(nd ? keyCache.size(1) : keyCache.size(2));
    shape.keyRowBytes = nd ? RowBytes(keyCache, 2) : RowBytes(keyCache, 1) / shape.blockSize;
    shape.valueRowBytes = nd ? RowBytes(valueCache, 2) : RowBytes(valueCache, 1) / shape.blockSize;
    shape.keyRows = static_cast<uint64_t>(key.size(0));
    shape.valueRows = static_cast<uint64_t>(value.size(0));
    TORCH_CHECK(RowBytes(key, 1) == shape.keyRowBytes && RowBytes(value, 1) == shape.valueRowBytes,
                "ascend_kv_npu.paged_cache_load: output rows differ from cache rows");
    ascend_kv::PagedLoadTiling tiling{};
    const int status = ascend_kv::ComputePagedLoadTiling(shape, VectorCores(device.index()), kUsableUbBytes, &tiling);
    LaunchTiled("paged_cache_load", device, status, tiling, [=](uint32_t blockDim, aclrtStream stream, void* tilingGm) {
        return aclrtlaunch_paged_cache_load_kernel(blockDim, stream, keyCache.data_ptr(), valueCache.data_ptr(),
                                                   blockTable.data_ptr(), lens.data_ptr(), outStart.data_ptr(),
                                                   firstColumn.data_ptr(), key.data_ptr(), value.data_ptr(), tilingGm);
    });
}

}  // namespace

TORCH_LIBRARY(ascend_kv_npu, m)
{
    m.def("kv_cache(Tensor new_kv, Tensor(a!) past, int layer_id, Tensor seq_len, Tensor read_start, "
          "Tensor write_start) -> ()");
    m.def("paged_cache_load(Tensor key_cache, Tensor value_cache, Tensor(a!) key, Tensor(b!) value, "
          "Tensor block_table, Tensor lens, Tensor out_start, Tensor first_column, int num_tokens, int layout) -> ()");
}

TORCH_LIBRARY_IMPL(ascend_kv_npu, PrivateUse1, m)
{
    m.impl("kv_cache", &KvCache);
    m.impl("paged_cache_load", &PagedCacheLoad);
}
