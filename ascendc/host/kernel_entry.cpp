/*
 * The kernel library's table (kernel_library.h): for each operation, the tiling from the call's
 * geometry (shapes, byte strides, element sizes), the vector-core count and the UB size, then the
 * launch (kernel_launch.h says where those come from in each build). One source for both builds:
 *   ASCEND_KV_KERNEL_LIBRARY=ascend_kv_npu    the NPU build (launch_npu.cpp);
 *   ASCEND_KV_KERNEL_LIBRARY=ascend_kv_host   the host build (sim/launch_host.cpp), which also
 *                                             registers test instruments: the tiling of a call as
 *                                             text (torch.ops.ascend_kv_host.*_tiling) and its
 *                                             launch count.
 * The operator library's rules checked every tensor before it reached here; index values are
 * read by the kernels only, which skip whatever falls outside the tensors.
 */
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#ifdef ASCEND_KV_HOST_BUILD
#include <torch/library.h>
#endif

#include "kernel_launch.h"
#include "kernel_library.h"
#include "tiling.h"

#ifndef ASCEND_KV_KERNEL_LIBRARY
#error "define ASCEND_KV_KERNEL_LIBRARY (ascend_kv_npu or ascend_kv_host)"
#endif
#define ASCEND_KV_STRINGIFY_(x) #x
#define ASCEND_KV_STRINGIFY(x) ASCEND_KV_STRINGIFY_(x)

namespace ascend_kv {
namespace {

constexpr const char* kLibrary = ASCEND_KV_STRINGIFY(ASCEND_KV_KERNEL_LIBRARY);

/// The tiling `compute` gives `call` with the vector cores and UB of `device`; an error if there is none.
template <typename Geometry, typename Tiling>
Tiling Tile(const char* op, const at::Device& device, const Geometry& call,
            int (*compute)(const Geometry&, uint64_t, uint64_t, Tiling*))
{
    Tiling tiling{};
    const int status = compute(call, VectorCoreCount(device), UsableUbBytes(device), &tiling);
    TORCH_CHECK(status == kTilingOk, kLibrary, ".", op, ": tiling failed: ", TilingStatusMessage(status));
    return tiling;
}

KvCacheTiling KvCachePlan(const at::Tensor& newKv, const at::Tensor& past, const at::Tensor& tokenOffset,
                          const at::Tensor& seqLen, const at::Tensor& layer, int64_t layerId)
{
    KvCacheGeometry call;
    call.newKv = GeometryOf(newKv);
    call.past = GeometryOf(past);
    call.tokenOffset = GeometryOf(tokenOffset);
    call.seqLen = GeometryOf(seqLen);
    call.layer = GeometryOf(layer);
    call.layerId = layerId;
    return Tile("kv_cache", past.device(), call, &ComputeKvCacheTiling);
}

PagedLoadTiling PagedLoadPlan(const at::Tensor& keyCache, const at::Tensor& valueCache, const at::Tensor& blockTable,
                              const at::Tensor& contextLens, const at::Tensor& seqStarts, const at::Tensor& key,
                              const at::Tensor& value, int64_t layout, bool cumsum)
{
    PagedLoadGeometry call;
    call.layout = static_cast<uint64_t>(layout);
    call.cumsum = cumsum;
    call.key = {GeometryOf(keyCache), GeometryOf(key)};
    call.value = {GeometryOf(valueCache), GeometryOf(value)};
    call.blockTable = GeometryOf(blockTable);
    call.contextLens = GeometryOf(contextLens);
    call.seqStarts = GeometryOf(seqStarts);
    return Tile("paged_cache_load", keyCache.device(), call, &ComputePagedLoadTiling);
}

ReshapeTiling ReshapePlan(const at::Tensor& key, const at::Tensor& value, const at::Tensor& keyCache,
                          const at::Tensor& valueCache, const at::Tensor& slotMapping, int64_t layout)
{
    ReshapeGeometry call;
    call.layout = static_cast<uint64_t>(layout);
    call.key = {GeometryOf(keyCache), GeometryOf(key)};
    if (valueCache.defined()) {
        call.value = {GeometryOf(valueCache), GeometryOf(value)};
    }
    call.slotMapping = GeometryOf(slotMapping);
    return Tile("reshape_and_cache", keyCache.device(), call, &ComputeReshapeTiling);
}

/// The kQuant* element-type code of `dtype`.
uint64_t QuantType(at::ScalarType dtype)
{
    switch (dtype) {
        case at::kHalf: return kQuantHalf;
        case at::kBFloat16: return kQuantBfloat16;
        case at::kChar: return kQuantInt8;
        case at::kInt: return kQuantInt32;
        default: return kQuantFloat;
    }
}

QuantSideGeometry QuantGeometryOf(const KernelQuantSide& side, const at::Tensor& rows)
{
    QuantSideGeometry g;
    g.scheme = static_cast<uint64_t>(side.scheme);
    if (side.scheme == kQuantNone) {
        return g;
    }
    g.inputType = QuantType(rows.scalar_type());
    g.compute = side.compute == at::kHalf ? kComputeHalf : side.compute == at::kBFloat16 ? kComputeBfloat16 : kComputeFloat;
    g.heads = static_cast<uint64_t>(side.heads);
    g.headSize = static_cast<uint64_t>(side.head_size);
    g.scale = GeometryOf(side.scale);
    g.offset = GeometryOf(side.offset);
    g.scaleCache = GeometryOf(side.scale_cache);
    if (side.scale.defined()) {
        g.scaleType = QuantType(side.scale.scalar_type());
    }
    if (side.offset.defined()) {
        g.offsetType = QuantType(side.offset.scalar_type());
    }
    if (side.scale_cache.defined()) {
        g.scaleCacheType = QuantType(side.scale_cache.scalar_type());
    }
    return g;
}

ReshapeQuantTiling ReshapeQuantPlan(const at::Tensor& key, const at::Tensor& value, const at::Tensor& keyCache,
                                    const at::Tensor& valueCache, const at::Tensor& slotMapping, int64_t layout,
                                    const KernelQuantSide& keyQuant, const KernelQuantSide& valueQuant)
{
    ReshapeQuantGeometry call;
    call.base.layout = static_cast<uint64_t>(layout);
    call.base.key = {GeometryOf(keyCache), GeometryOf(key)};
    if (valueCache.defined()) {
        call.base.value = {GeometryOf(valueCache), GeometryOf(value)};
    }
    call.base.slotMapping = GeometryOf(slotMapping);
    call.key = QuantGeometryOf(keyQuant, key);
    if (valueCache.defined()) {
        call.value = QuantGeometryOf(valueQuant, value);
    }
    return Tile("reshape_and_cache", keyCache.device(), call, &ComputeReshapeQuantTiling);
}

PagedLoadDequantTiling PagedLoadDequantPlan(const at::Tensor& keyCache, const at::Tensor& valueCache,
                                            const at::Tensor& blockTable, const at::Tensor& contextLens,
                                            const at::Tensor& seqStarts, const at::Tensor& key, const at::Tensor& value,
                                            int64_t layout, bool cumsum, const KernelQuantSide& keyQuant,
                                            const KernelQuantSide& valueQuant)
{
    PagedLoadDequantGeometry call;
    call.base.layout = static_cast<uint64_t>(layout);
    call.base.cumsum = cumsum;
    call.base.key = {GeometryOf(keyCache), GeometryOf(key)};
    call.base.value = {GeometryOf(valueCache), GeometryOf(value)};
    call.base.blockTable = GeometryOf(blockTable);
    call.base.contextLens = GeometryOf(contextLens);
    call.base.seqStarts = GeometryOf(seqStarts);
    call.key = QuantGeometryOf(keyQuant, key);
    call.value = QuantGeometryOf(valueQuant, value);
    return Tile("paged_cache_load", keyCache.device(), call, &ComputePagedLoadDequantTiling);
}

/// block_copy's tiling and cache table; `transfer` (with `buffer` and the caches' `offsets` in its
/// rows) for the state-slot transfers, which have no dst and no cumSum.
BlockCopyTiling BlockCopyPlan(const std::vector<at::Tensor>& caches, const at::Tensor& src, const at::Tensor& dst,
                              const at::Tensor& cumSum, bool simultaneous, std::vector<uint64_t>* table,
                              uint64_t transfer = kBlockCopyWithin, const at::Tensor& buffer = at::Tensor(),
                              c10::ArrayRef<int64_t> offsets = {})
{
    BlockCopyGeometry call;
    call.simultaneous = simultaneous;
    for (const at::Tensor& cache : caches) {
        call.caches.push_back(GeometryOf(cache));
        call.addresses.push_back(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(cache.data_ptr())));
    }
    call.src = GeometryOf(src);
    call.dst = GeometryOf(dst);
    call.cumSum = GeometryOf(cumSum);
    call.transfer = transfer;
    call.buffer = GeometryOf(buffer);
    for (const int64_t offset : offsets) {
        call.bufferOffsets.push_back(static_cast<uint64_t>(offset));
    }
    BlockCopyTiling tiling{};
    const int status = ComputeBlockCopyTiling(call, VectorCoreCount(caches[0].device()),
                                              UsableUbBytes(caches[0].device()), &tiling, table);
    TORCH_CHECK(status == kTilingOk, kLibrary, ".block_copy: tiling failed: ", TilingStatusMessage(status));
    return tiling;
}

TransferTiling TransferPlan(const std::vector<at::Tensor>& caches, const at::Tensor& buffer, const at::Tensor& ids,
                            c10::IntArrayRef frame, c10::IntArrayRef cacheStrides, c10::IntArrayRef bufferStrides,
                            bool gather, std::vector<uint64_t>* table)
{
    TORCH_CHECK(frame.size() == kTransferFrameDims && cacheStrides.size() == kTransferFrameDims &&
                    bufferStrides.size() == kTransferFrameDims && !caches.empty() && buffer.dim() >= 3,
                kLibrary, ".transfer_blocks: a frame of ", kTransferFrameDims, " dims and a buffer [KV, L, n, ...]");
    TransferGeometry call;
    call.gather = gather;
    for (int d = 0; d < kTransferFrameDims; ++d) {
        call.frame[d] = frame[d];
        call.cacheStrides[d] = cacheStrides[d];
        call.bufferStrides[d] = bufferStrides[d];
    }
    call.cache = GeometryOf(caches[0]);
    call.ids = GeometryOf(ids);
    for (const at::Tensor& cache : caches) {
        call.addresses.push_back(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(cache.data_ptr())));
        call.spans.push_back(SpanBytes(GeometryOf(cache)));
    }
    call.layers = static_cast<uint64_t>(buffer.size(1));
    for (int d = 0; d < 3; ++d) {
        call.bufferSteps[d] = buffer.stride(d) * buffer.element_size();
    }
    int64_t last = 0;
    for (int64_t d = 0; d < buffer.dim(); ++d) {
        last += (buffer.size(d) - 1) * buffer.stride(d);
    }
    call.bufferSpan = buffer.numel() == 0 ? 0 : static_cast<uint64_t>((last + 1) * buffer.element_size());
    TransferTiling tiling{};
    const int status = ComputeTransferTiling(call, VectorCoreCount(buffer.device()), UsableUbBytes(buffer.device()),
                                             &tiling, table);
    TORCH_CHECK(status == kTilingOk, kLibrary, ".transfer_blocks: tiling failed: ", TilingStatusMessage(status));
    return tiling;
}

void KvCache(const at::Tensor& newKv, const at::Tensor& past, const at::Tensor& tokenOffset, const at::Tensor& seqLen,
             const at::Tensor& layer, int64_t layerId)
{
    const auto tiling = KvCachePlan(newKv, past, tokenOffset, seqLen, layer, layerId);
    if (tiling.usedCores > 0) {
        LaunchKvCache(newKv, past, tokenOffset, seqLen, layer, tiling);
    }
}

void PagedCacheLoad(const at::Tensor& keyCache, const at::Tensor& valueCache, const at::Tensor& blockTable,
                    const at::Tensor& contextLens, const at::Tensor& seqStarts, const at::Tensor& key,
                    const at::Tensor& value, int64_t layout, bool cumsum)
{
    const auto tiling = PagedLoadPlan(keyCache, valueCache, blockTable, contextLens, seqStarts, key, value, layout,
                                      cumsum);
    if (tiling.usedCores > 0) {
        LaunchPagedLoad(keyCache, valueCache, blockTable, contextLens, seqStarts, key, value, tiling);
    }
}

void ReshapeAndCache(const at::Tensor& key, const at::Tensor& value, const at::Tensor& keyCache,
                     const at::Tensor& valueCache, const at::Tensor& slotMapping, int64_t layout)
{
    const auto tiling = ReshapePlan(key, value, keyCache, valueCache, slotMapping, layout);
    if (tiling.usedCores > 0) {
        LaunchReshapeAndCache(key, value, keyCache, valueCache, slotMapping, tiling);
    }
}

void ReshapeAndCacheQuant(const at::Tensor& key, const at::Tensor& value, const at::Tensor& keyCache,
                          const at::Tensor& valueCache, const at::Tensor& slotMapping, int64_t layout,
                          const KernelQuantSide& keyQuant, const KernelQuantSide& valueQuant)
{
    const auto tiling = ReshapeQuantPlan(key, value, keyCache, valueCache, slotMapping, layout, keyQuant, valueQuant);
    if (tiling.usedCores > 0) {
        LaunchReshapeAndCacheQuant(key, value, keyCache, valueCache, slotMapping, keyQuant, valueQuant, tiling);
    }
}

void PagedCacheLoadDequant(const at::Tensor& keyCache, const at::Tensor& valueCache, const at::Tensor& blockTable,
                           const at::Tensor& contextLens, const at::Tensor& seqStarts, const at::Tensor& key,
                           const at::Tensor& value, int64_t layout, bool cumsum, const KernelQuantSide& keyQuant,
                           const KernelQuantSide& valueQuant)
{
    const auto tiling = PagedLoadDequantPlan(keyCache, valueCache, blockTable, contextLens, seqStarts, key, value,
                                             layout, cumsum, keyQuant, valueQuant);
    if (tiling.usedCores > 0) {
        LaunchPagedLoadDequant(keyCache, valueCache, blockTable, contextLens, seqStarts, key, value, keyQuant,
                               valueQuant, tiling);
    }
}

void BlockCopy(const std::vector<at::Tensor>& caches, const at::Tensor& src, const at::Tensor& dst,
               const at::Tensor& cumSum, bool simultaneous)
{
    std::vector<uint64_t> table;
    const auto tiling = BlockCopyPlan(caches, src, dst, cumSum, simultaneous, &table);
    if (tiling.usedCores > 0) {
        LaunchBlockCopy(caches, table, src, dst, cumSum, at::Tensor(), tiling);
    }
}

void TransferSlots(const std::vector<at::Tensor>& states, const std::vector<int64_t>& offsets, const at::Tensor& buffer,
                   const at::Tensor& ids, bool gather)
{
    std::vector<uint64_t> table;
    const auto tiling = BlockCopyPlan(states, ids, at::Tensor(), at::Tensor(), false, &table,
                                      gather ? kBlockCopyGather : kBlockCopyScatter, buffer, offsets);
    if (tiling.usedCores > 0) {
        LaunchBlockCopy(states, table, ids, at::Tensor(), at::Tensor(), buffer, tiling);
    }
}

BatchMemcpyTiling BatchMemcpyPlan(const at::Tensor& src, const at::Tensor& dst, const at::Tensor& sizes)
{
    BatchMemcpyGeometry call;
    call.src = GeometryOf(src);
    call.dst = GeometryOf(dst);
    call.sizes = GeometryOf(sizes);
    return Tile("batch_memcpy", src.device(), call, &ComputeBatchMemcpyTiling);
}

void BatchMemcpy(const at::Tensor& src, const at::Tensor& dst, const at::Tensor& sizes)
{
    const auto tiling = BatchMemcpyPlan(src, dst, sizes);
    if (tiling.usedCores > 0) {
        LaunchBatchMemcpyKernel(src, dst, sizes, tiling);
    }
}

void TransferBlocks(const std::vector<at::Tensor>& caches, const at::Tensor& buffer, const at::Tensor& ids,
                    c10::IntArrayRef frame, c10::IntArrayRef cacheStrides, c10::IntArrayRef bufferStrides, bool gather)
{
    std::vector<uint64_t> table;
    const auto tiling = TransferPlan(caches, buffer, ids, frame, cacheStrides, bufferStrides, gather, &table);
    if (tiling.usedCores > 0) {
        LaunchTransferBlocks(caches, table, buffer, ids, tiling);
    }
}

const KernelLibrary kTable = {kKernelLibraryVersion, &KvCache,           &PagedCacheLoad,       &ReshapeAndCache,
                              &BlockCopy,            &TransferBlocks,    &StorageFormat,        &LaunchMemcpyBatch,
                              &ReshapeAndCacheQuant, &PagedCacheLoadDequant, &TransferSlots,
                              &BatchMemcpy};

}  // namespace

#ifdef ASCEND_KV_HOST_BUILD
// Test instruments of the host build: the tiling a call would run, as "name=value" text.
std::string KvCacheTilingText(const at::Tensor& newKv, const at::Tensor& past, const at::Tensor& tokenOffset,
                              const at::Tensor& seqLen, const c10::optional<at::Tensor>& layer, int64_t layerId)
{
    return DescribeTiling(KvCachePlan(newKv, past, tokenOffset, seqLen, layer.value_or(at::Tensor()), layerId));
}

std::string PagedCacheLoadTilingText(const at::Tensor& keyCache, const at::Tensor& valueCache,
                                     const at::Tensor& blockTable, const at::Tensor& contextLens,
                                     const c10::optional<at::Tensor>& seqStarts, const at::Tensor& key,
                                     const at::Tensor& value, int64_t layout, bool cumsum)
{
    return DescribeTiling(PagedLoadPlan(keyCache, valueCache, blockTable, contextLens, seqStarts.value_or(at::Tensor()),
                                        key, value, layout, cumsum));
}

std::string ReshapeAndCacheTilingText(const at::Tensor& key, const c10::optional<at::Tensor>& value,
                                      const at::Tensor& keyCache, const c10::optional<at::Tensor>& valueCache,
                                      const at::Tensor& slotMapping, int64_t layout)
{
    return DescribeTiling(ReshapePlan(key, value.value_or(at::Tensor()), keyCache, valueCache.value_or(at::Tensor()),
                                      slotMapping, layout));
}

/// reshape_and_cache_quant on the host model over CPU tensors, before any operator rule: a test
/// instrument for the kernel's arithmetic and slot handling (the operators route calls to the
/// table entry after their rules).
void ReshapeAndCacheQuantKernel(const at::Tensor& key, const c10::optional<at::Tensor>& value, const at::Tensor& keyCache,
                                const c10::optional<at::Tensor>& valueCache, const at::Tensor& slotMapping,
                                int64_t layout, at::IntArrayRef keyQuant, at::ScalarType keyCompute,
                                const c10::optional<at::Tensor>& keyScale, const c10::optional<at::Tensor>& keyOffset,
                                const c10::optional<at::Tensor>& keyScaleCache, at::IntArrayRef valueQuant,
                                at::ScalarType valueCompute, const c10::optional<at::Tensor>& valueScale,
                                const c10::optional<at::Tensor>& valueOffset,
                                const c10::optional<at::Tensor>& valueScaleCache)
{
    const auto side = [](at::IntArrayRef q, at::ScalarType compute, const c10::optional<at::Tensor>& scale,
                         const c10::optional<at::Tensor>& offset, const c10::optional<at::Tensor>& scaleCache) {
        TORCH_CHECK(q.size() == 3, "quant: [scheme, heads, head_size]");
        KernelQuantSide s;
        s.scheme = q[0];
        s.compute = compute;
        s.heads = q[1];
        s.head_size = q[2];
        s.scale = scale.value_or(at::Tensor());
        s.offset = offset.value_or(at::Tensor());
        s.scale_cache = scaleCache.value_or(at::Tensor());
        return s;
    };
    ReshapeAndCacheQuant(key, value.value_or(at::Tensor()), keyCache, valueCache.value_or(at::Tensor()), slotMapping,
                         layout, side(keyQuant, keyCompute, keyScale, keyOffset, keyScaleCache),
                         side(valueQuant, valueCompute, valueScale, valueOffset, valueScaleCache));
}

std::string BlockCopyTilingText(at::TensorList caches, const at::Tensor& src, const at::Tensor& dst,
                                const c10::optional<at::Tensor>& cumSum, bool simultaneous)
{
    std::vector<uint64_t> table;
    return DescribeTiling(BlockCopyPlan(caches.vec(), src, dst, cumSum.value_or(at::Tensor()), simultaneous, &table));
}

std::string TransferSlotsTilingText(at::TensorList states, at::IntArrayRef offsets, const at::Tensor& buffer,
                                   const at::Tensor& ids, bool gather)
{
    std::vector<uint64_t> table;
    return DescribeTiling(BlockCopyPlan(states.vec(), ids, at::Tensor(), at::Tensor(), false, &table,
                                        gather ? kBlockCopyGather : kBlockCopyScatter, buffer, offsets));
}

std::string BatchMemcpyTilingText(const at::Tensor& src, const at::Tensor& dst, const at::Tensor& sizes)
{
    return DescribeTiling(BatchMemcpyPlan(src, dst, sizes));
}

std::string TransferTilingText(at::TensorList caches, const at::Tensor& buffer, const at::Tensor& ids,
                               at::IntArrayRef frame, at::IntArrayRef cacheStrides, at::IntArrayRef bufferStrides,
                               bool gather)
{
    std::vector<uint64_t> table;
    return DescribeTiling(TransferPlan(caches.vec(), buffer, ids, frame, cacheStrides, bufferStrides, gather, &table));
}
#endif

}  // namespace ascend_kv

#ifdef ASCEND_KV_HOST_BUILD
TORCH_LIBRARY_FRAGMENT(ascend_kv_host, m)
{
    m.def("kv_cache_tiling(Tensor new_kv, Tensor past, Tensor token_offset, Tensor seq_len, Tensor? layer_tensor, "
          "int layer_id) -> str", &ascend_kv::KvCacheTilingText);
    m.def("paged_cache_load_tiling(Tensor key_cache, Tensor value_cache, Tensor block_table, Tensor context_lens, "
          "Tensor? seq_starts, Tensor key, Tensor value, int layout, bool cumsum) -> str",
          &ascend_kv::PagedCacheLoadTilingText);
    m.def("reshape_and_cache_tiling(Tensor key, Tensor? value, Tensor key_cache, Tensor? value_cache, "
          "Tensor slot_mapping, int layout) -> str", &ascend_kv::ReshapeAndCacheTilingText);
    m.def("reshape_and_cache_quant_kernel(Tensor key, Tensor? value, Tensor(a!) key_cache, Tensor(b!)? value_cache, "
          "Tensor slot_mapping, int layout, int[] key_quant, ScalarType key_compute, Tensor? k_scale, "
          "Tensor? k_offset, Tensor(c!)? k_scale_cache, int[] value_quant, ScalarType value_compute, "
          "Tensor? v_scale, Tensor? v_offset, Tensor(d!)? v_scale_cache) -> ()",
          &ascend_kv::ReshapeAndCacheQuantKernel);
    m.def("block_copy_tiling(Tensor[] caches, Tensor src, Tensor dst, Tensor? cum_sum, bool simultaneous=False) -> str",
          &ascend_kv::BlockCopyTilingText);
    m.def("transfer_blocks_tiling(Tensor[] caches, Tensor buffer, Tensor ids, int[] frame, int[] cache_strides, "
          "int[] buffer_strides, bool gather) -> str", &ascend_kv::TransferTilingText);
    m.def("transfer_slots_tiling(Tensor[] states, int[] offsets, Tensor buffer, Tensor ids, bool gather) -> str",
          &ascend_kv::TransferSlotsTilingText);
    m.def("batch_memcpy_tiling(Tensor src_ptrs, Tensor dst_ptrs, Tensor sizes) -> str",
          &ascend_kv::BatchMemcpyTilingText);
}
#endif

extern "C" const ascend_kv::KernelLibrary* ascend_kv_kernel_library() { return &ascend_kv::kTable; }
