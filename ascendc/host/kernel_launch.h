/*
 * What the kernel library's entries (kernel_entry.cpp) need from the platform it is built for, one
 * implementation per build:
 *   host/launch_npu.cpp   NPU build: queries the device, uploads the tiling, queues the kernels
 *                         on the current NPU stream;
 *   sim/launch_host.cpp   host build: settings from the environment, the kernels run on the host
 *                         model of the AscendC API, core by core.
 * Tensors arrive checked by the operator library: on one device, index tensors contiguous,
 * inside the kernels' domain.
 */
#ifndef ASCEND_KV_HOST_KERNEL_LAUNCH_H
#define ASCEND_KV_HOST_KERNEL_LAUNCH_H

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "kernel_library.h"
#include "tiling.h"

namespace ascend_kv {

/// The geometry of `tensor` for the tiling (absent when undefined): sizes, byte strides, element size.
inline TensorGeom GeometryOf(const at::Tensor& tensor)
{
    TensorGeom g;
    if (!tensor.defined()) {
        return g;
    }
    TORCH_CHECK(tensor.dim() <= kMaxDims, "a tensor of ", tensor.dim(), " dimensions reached the kernels");
    g.present = true;
    g.dims = static_cast<int>(tensor.dim());
    g.elemBytes = static_cast<uint64_t>(tensor.element_size());
    for (int d = 0; d < g.dims; ++d) {
        g.sizes[d] = tensor.size(d);
        g.strides[d] = tensor.stride(d) * tensor.element_size();
    }
    return g;
}

/// Vector cores the kernels may use on `device`.
uint64_t VectorCoreCount(const at::Device& device);

/// Usable Unified Buffer bytes per vector core on `device`.
uint64_t UsableUbBytes(const at::Device& device);

/// The device's storage format of `tensor` (ACL's aclFormat), or -1 where the platform has none.
int64_t StorageFormat(const at::Tensor& tensor);

/// Run kv_cache_kernel on tiling.usedCores cores (> 0); `layer` may be undefined (absent).
void LaunchKvCache(const at::Tensor& newKv, const at::Tensor& past, const at::Tensor& tokenOffset,
                   const at::Tensor& seqLen, const at::Tensor& layer, const KvCacheTiling& tiling);

/// Run paged_cache_load_kernel on tiling.usedCores cores (> 0); `seqStarts` may be undefined.
void LaunchPagedLoad(const at::Tensor& keyCache, const at::Tensor& valueCache, const at::Tensor& blockTable,
                     const at::Tensor& contextLens, const at::Tensor& seqStarts, const at::Tensor& key,
                     const at::Tensor& value, const PagedLoadTiling& tiling);

/// Run reshape_and_cache_kernel on tiling.usedCores cores (> 0); `value` and `valueCache` may be
/// undefined (key-only mode).
void LaunchReshapeAndCache(const at::Tensor& key, const at::Tensor& value, const at::Tensor& keyCache,
                           const at::Tensor& valueCache, const at::Tensor& slotMapping, const ReshapeTiling& tiling);

/// swap_blocks_batch's copies (kernel_library.h, memcpy_batch): queued on the current NPU stream
/// (NPU build) or copied with memcpy (host build).
void LaunchMemcpyBatch(const std::vector<int64_t>& src, const std::vector<int64_t>& dst, const std::vector<int64_t>& sizes,
                       int64_t direction);

/// Run reshape_and_cache_quant_kernel on tiling.usedCores cores (> 0); absent tensors undefined.
void LaunchReshapeAndCacheQuant(const at::Tensor& key, const at::Tensor& value, const at::Tensor& keyCache,
                                const at::Tensor& valueCache, const at::Tensor& slotMapping,
                                const KernelQuantSide& keyQuant, const KernelQuantSide& valueQuant,
                                const ReshapeQuantTiling& tiling);

/// Run paged_cache_load_dequant_kernel on tiling.usedCores cores (> 0); absent tensors undefined.
void LaunchPagedLoadDequant(const at::Tensor& keyCache, const at::Tensor& valueCache, const at::Tensor& blockTable,
                            const at::Tensor& contextLens, const at::Tensor& seqStarts, const at::Tensor& key,
                            const at::Tensor& value, const KernelQuantSide& keyQuant, const KernelQuantSide& valueQuant,
                            const PagedLoadDequantTiling& tiling);

/// Run block_copy_kernel on tiling.usedCores cores (> 0) over `caches` (written), whose geometry
/// `table` holds (kBlockCopyCacheWords words each, host memory: the launcher puts it in GM);
/// `cumSum` may be undefined; in a transfer mode (tiling.transfer) `dst` is undefined and `buffer`
/// is the rows the caches' blocks go to (gather, the caches then only read) or come from.
void LaunchBlockCopy(const std::vector<at::Tensor>& caches, const std::vector<uint64_t>& table, const at::Tensor& src,
                     const at::Tensor& dst, const at::Tensor& cumSum, const at::Tensor& buffer,
                     const BlockCopyTiling& tiling);

/// Run batch_memcpy_kernel on tiling.usedCores cores (> 0) over the tables (device memory) and the
/// ranges they name.
void LaunchBatchMemcpyKernel(const at::Tensor& src, const at::Tensor& dst, const at::Tensor& sizes,
                             const BatchMemcpyTiling& tiling);

/// Run transfer_blocks_kernel on tiling.usedCores cores (> 0) between `caches` (each cache's address
/// and span in `table`, kTransferCacheWords words each, host memory: the launcher puts it in GM)
/// and `buffer` (gather: the buffer is written; scatter: the caches are).
void LaunchTransferBlocks(const std::vector<at::Tensor>& caches, const std::vector<uint64_t>& table,
                          const at::Tensor& buffer, const at::Tensor& ids, const TransferTiling& tiling);

}  // namespace ascend_kv

#endif  // ASCEND_KV_HOST_KERNEL_LAUNCH_H
