/*
 * The op library of the kernels: torch.ops.<ns>.kv_cache / .paged_cache_load / .reshape_and_cache /
 * .block_copy (and the tiling each would run, as text: .kv_cache_tiling / .paged_cache_load_tiling /
 * .reshape_and_cache_tiling / .block_copy_tiling). One source for both builds, compiled with
 *   ASCEND_KV_OP_NAMESPACE=ascend_kv_npu   the NPU build: PrivateUse1 (torch_npu's "npu");
 *   ASCEND_KV_OP_NAMESPACE=ascend_kv_host  the host build: CPU and PrivateUse1 (a device whose
 *                                          tensors hold host memory), kernels on the host model.
 * Schemas:
 *   kv_cache(Tensor new_kv, Tensor(a!) past, Tensor token_offset, Tensor seq_len,
 *            Tensor? layer_tensor, int layer_id) -> ()
 *   paged_cache_load(Tensor key_cache, Tensor value_cache, Tensor block_table, Tensor context_lens,
 *                    Tensor? seq_starts, Tensor(a!) key, Tensor(b!) value, int layout, bool cumsum) -> ()
 *   reshape_and_cache(Tensor key, Tensor? value, Tensor(a!) key_cache, Tensor(b!)? value_cache,
 *                     Tensor slot_mapping, int layout) -> ()
 *   block_copy(Tensor(a!)[] caches, Tensor src, Tensor dst, Tensor? cum_sum) -> ()
 *     caches: every cache written, each a [num_blocks, rows, row] view with contiguous rows; one
 *     launch copies block src[i] to the blocks dst[cum_sum[i-1]:cum_sum[i]] (no cum_sum: src[j]
 *     to dst[j]) of all of them.
 * layout: 0 NZ, 1 ND (ascend_kv.KvCacheCfg). With layer_tensor the kernel reads the layer from it
 * and layer_id is ignored. reshape_and_cache without value and value_cache is the key-only mode.
 *
 * The ops can be called directly, so every tensor the kernels index is checked here (device,
 * dtype, rank, consistent shapes, strides inside the kernels' domain, written tensors whose
 * elements each have their own memory), with messages naming the tensor. Index values are never read on the host: the kernels read the index tensors and skip
 * whatever falls outside the tensors. Tiling from shapes, byte strides, the vector-core count
 * and the UB size (kernel_launch.h says where those come from in each build).
 */
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/library.h>

#include "kernel_launch.h"
#include "tiling.h"

#ifndef ASCEND_KV_OP_NAMESPACE
#error "define ASCEND_KV_OP_NAMESPACE (ascend_kv_npu or ascend_kv_host)"
#endif
#define ASCEND_KV_STRINGIFY_(x) #x
#define ASCEND_KV_STRINGIFY(x) ASCEND_KV_STRINGIFY_(x)

namespace {

constexpr const char* kNamespace = ASCEND_KV_STRINGIFY(ASCEND_KV_OP_NAMESPACE);

/// Prefix of every message: "<namespace>.<op>: ".
std::string Where(const char* op) { return std::string(kNamespace) + "." + op + ": "; }

void CheckDevice(const char* op, const at::Tensor& tensor, const char* name, const at::Device& device)
{
    TORCH_CHECK(tensor.device() == device, Where(op), name, " is on ", tensor.device(), ", expected ", device,
                " (the device of the data tensors)");
    ascend_kv::CheckStorageFormat(tensor, op, name);
}

void CheckRank(const char* op, const at::Tensor& tensor, const char* name, int64_t dims, const char* shape)
{
    TORCH_CHECK(tensor.dim() == dims, Where(op), name, " must be ", dims, "-D ", shape, ", got shape ",
                tensor.sizes());
}

/// An index tensor of any shape: int32 or int64, contiguous, on `device`.
void CheckIndexTensor(const char* op, const at::Tensor& tensor, const char* name, const at::Device& device)
{
    CheckDevice(op, tensor, name, device);
    TORCH_CHECK(tensor.scalar_type() == at::kInt || tensor.scalar_type() == at::kLong, Where(op), name,
                " must be int32 or int64, got ", tensor.scalar_type());
    TORCH_CHECK(tensor.is_contiguous(), Where(op), name, " must be contiguous (pass .contiguous()), got strides ",
                tensor.strides());
}

/// A 1-D index tensor `shape` of `entries` entries, as CheckIndexTensor.
void CheckIndex(const char* op, const at::Tensor& tensor, const char* name, const at::Device& device,
                const char* shape, int64_t entries)
{
    CheckRank(op, tensor, name, 1, shape);
    CheckIndexTensor(op, tensor, name, device);
    TORCH_CHECK(tensor.size(0) == entries, Where(op), name, " must have ", entries, " entries, got ", tensor.size(0));
}

/// Are dims [firstDim, dim) of `tensor` dense (row-major, size-1 dims ignored)?
bool DenseFrom(const at::Tensor& tensor, int64_t firstDim)
{
    if (tensor.numel() == 0) {
        return true;  // the kernels address no byte of an empty tensor, whatever its strides
    }
    int64_t expected = 1;
    for (int64_t d = tensor.dim() - 1; d >= firstDim; --d) {
        if (tensor.size(d) != 1 && tensor.stride(d) != expected) {
            return false;
        }
        expected *= tensor.size(d);
    }
    return true;
}

void CheckDenseFrom(const char* op, const at::Tensor& tensor, const char* name, int64_t firstDim, const char* what)
{
    TORCH_CHECK(DenseFrom(tensor, firstDim), Where(op), name, "'s ", what,
                " must be contiguous (the kernels copy whole rows), got sizes ", tensor.sizes(), " and strides ",
                tensor.strides());
}

/// A tensor the kernel writes: no two of its elements share memory (an expand() view would make
/// several cores write one place). Dims sorted by stride: each stride must pass the span of the smaller ones.
void CheckDistinctElements(const char* op, const at::Tensor& tensor, const char* name)
{
    if (tensor.numel() == 0) {
        return;
    }
    std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of the dims of size > 1
    for (int64_t d = 0; d < tensor.dim(); ++d) {
        if (tensor.size(d) > 1) {
            dims.emplace_back(tensor.stride(d), tensor.size(d));
        }
    }
    std::sort(dims.begin(), dims.end());
    int64_t span = 0;  // the largest element offset the dims seen so far reach
    for (const auto& [stride, size] : dims) {
        TORCH_CHECK(stride > span, Where(op), name, " is written in place, so each element needs its own memory, but "
                    "sizes ", tensor.sizes(), " with strides ", tensor.strides(), " map several elements to one "
                    "place (an expand() view?)");
        span += stride * (size - 1);
    }
}

void CheckRowBytes(const char* op, const char* name, int64_t rowBytes)
{
    TORCH_CHECK(rowBytes > 0 && rowBytes % static_cast<int64_t>(ascend_kv::kBlockBytes) == 0, Where(op), name,
                " rows must be a positive multiple of 32 bytes, got ", rowBytes, " bytes");
}

void CheckLayout(const char* op, int64_t layout)
{
    TORCH_CHECK(layout == static_cast<int64_t>(ascend_kv::kLayoutNd) ||
                    layout == static_cast<int64_t>(ascend_kv::kLayoutNz),
                Where(op), "layout must be 0 (NZ) or 1 (ND), got ", layout);
}

/// The tiling `compute` gives `call` with the vector cores and UB of `device`; an error if there is none.
template <typename Geometry, typename Tiling>
Tiling Tile(const char* op, const at::Device& device, const Geometry& call,
            int (*compute)(const Geometry&, uint64_t, uint64_t, Tiling*))
{
    Tiling tiling{};
    const int status = compute(call, ascend_kv::VectorCoreCount(device), ascend_kv::UsableUbBytes(device), &tiling);
    TORCH_CHECK(status == ascend_kv::kTilingOk, Where(op), "tiling failed: ", ascend_kv::TilingStatusMessage(status));
    return tiling;
}

// ---------------------------------------------------------------------------------- kv_cache

ascend_kv::KvCacheTiling KvCachePlan(const char* op, const at::Tensor& newKv, const at::Tensor& past,
                                     const at::Tensor& tokenOffset, const at::Tensor& seqLen, const at::Tensor& layer,
                                     int64_t layerId)
{
    const at::Device device = past.device();
    CheckRank(op, past, "past", 4, "[layers, batch, max_seq_len, hidden]");
    CheckRank(op, newKv, "new_kv", 2, "[ntokens, hidden]");
    TORCH_CHECK(newKv.scalar_type() == past.scalar_type(), Where(op), "new_kv has dtype ", newKv.scalar_type(),
                ", past has ", past.scalar_type(), "; they must match");
    TORCH_CHECK(newKv.size(1) == past.size(3), Where(op), "new_kv rows have ", newKv.size(1),
                " elements, past rows (past.shape[3]) ", past.size(3));
    CheckRowBytes(op, "past", past.size(3) * past.element_size());
    CheckDevice(op, past, "past", device);
    CheckDevice(op, newKv, "new_kv", device);
    CheckDenseFrom(op, newKv, "new_kv", 1, "rows");
    CheckDenseFrom(op, past, "past", 3, "rows (dim 3)");
    CheckDistinctElements(op, past, "past");
    const int64_t batch = past.size(1);
    CheckIndex(op, tokenOffset, "token_offset", device, "[batch]", batch);
    CheckIndex(op, seqLen, "seq_len", device, "[batch]", batch);
    if (layer.defined()) {  // one element, any rank (the Python rule too)
        CheckIndexTensor(op, layer, "layer_tensor", device);
        TORCH_CHECK(layer.numel() == 1, Where(op), "layer_tensor must have 1 entries, got ", layer.numel(), " (shape ",
                    layer.sizes(), ")");
    }
    ascend_kv::KvCacheGeometry call;
    call.newKv = ascend_kv::GeometryOf(newKv);
    call.past = ascend_kv::GeometryOf(past);
    call.tokenOffset = ascend_kv::GeometryOf(tokenOffset);
    call.seqLen = ascend_kv::GeometryOf(seqLen);
    call.layer = ascend_kv::GeometryOf(layer);
    call.layerId = layerId;
    return Tile(op, device, call, &ascend_kv::ComputeKvCacheTiling);
}

void KvCache(const at::Tensor& newKv, const at::Tensor& past, const at::Tensor& tokenOffset, const at::Tensor& seqLen,
             const c10::optional<at::Tensor>& layerTensor, int64_t layerId)
{
    const at::Tensor layer = layerTensor.has_value() ? *layerTensor : at::Tensor();
    const auto tiling = KvCachePlan("kv_cache", newKv, past, tokenOffset, seqLen, layer, layerId);
    if (tiling.usedCores > 0) {
        ascend_kv::LaunchKvCache(newKv, past, tokenOffset, seqLen, layer, tiling);
    }
}

std::string KvCacheTilingText(const at::Tensor& newKv, const at::Tensor& past, const at::Tensor& tokenOffset,
                              const at::Tensor& seqLen, const c10::optional<at::Tensor>& layerTensor, int64_t layerId)
{
    const at::Tensor layer = layerTensor.has_value() ? *layerTensor : at::Tensor();
    return ascend_kv::DescribeTiling(KvCachePlan("kv_cache_tiling", newKv, past, tokenOffset, seqLen, layer, layerId));
}

// ------------------------------------------------------------ paged_cache_load, reshape_and_cache

/// How an op's tensor of token rows looks: its rank and shape (for messages), and whether ND rows
/// may be any size (reshape_and_cache moves exact bytes) or must be whole 32-byte blocks.
struct TokenRows {
    int64_t dims;
    const char* shape;
    bool anySize;
};

/// A paged cache and its tensor of token rows (`rows`: the output of paged_cache_load, the input
/// of reshape_and_cache), checked, as the tiling's geometry.
ascend_kv::CacheGeometry CheckedCache(const char* op, bool nd, const at::Tensor& cache, const char* cacheName,
                                      const at::Tensor& rows, const char* rowsName, const TokenRows& form,
                                      const at::Device& device)
{
    CheckRank(op, cache, cacheName, 4, nd ? "[num_blocks, block_size, num_heads, head_size]"
                                          : "[num_blocks, T // E, block_size, E]");
    CheckRank(op, rows, rowsName, form.dims, form.shape);
    CheckDevice(op, cache, cacheName, device);
    CheckDevice(op, rows, rowsName, device);
    TORCH_CHECK(rows.scalar_type() == cache.scalar_type(), Where(op), rowsName, " has dtype ", rows.scalar_type(),
                ", ", cacheName, " has ", cache.scalar_type(), "; they must match");
    if (!nd) {
        TORCH_CHECK(cache.size(3) * cache.element_size() == static_cast<int64_t>(ascend_kv::kBlockBytes), Where(op),
                    cacheName, " (NZ) must have 32-byte last dimension pieces, got ", cache.size(3), " x ",
                    cache.element_size(), " bytes");
    }
    const int64_t rowElements = c10::multiply_integers(rows.sizes().slice(1));
    const bool sameRow = nd ? rows.sizes().slice(1) == cache.sizes().slice(2)
                            : rowElements == cache.size(1) * cache.size(3);
    TORCH_CHECK(sameRow, Where(op), rowsName, " rows ", rows.sizes().slice(1), " do not match the token rows of ",
                cacheName, " (shape ", cache.sizes(), ")");
    const int64_t rowBytes = rowElements * rows.element_size();
    if (nd && form.anySize) {
        TORCH_CHECK(rowBytes > 0, Where(op), rowsName, " rows must not be empty, got shape ", rows.sizes());
    } else {
        CheckRowBytes(op, rowsName, rowBytes);
    }
    CheckDenseFrom(op, cache, cacheName, nd ? 2 : 3, nd ? "token rows (dims 2, 3)" : "32-byte pieces (dim 3)");
    CheckDenseFrom(op, rows, rowsName, 1, "token rows");
    return {ascend_kv::GeometryOf(cache), ascend_kv::GeometryOf(rows)};
}

/// value_cache has the blocks and slots of key_cache.
void CheckSameBlocks(const char* op, bool nd, const at::Tensor& keyCache, const at::Tensor& valueCache)
{
    const int slotDim = nd ? 1 : 2;
    TORCH_CHECK(valueCache.size(0) == keyCache.size(0) && valueCache.size(slotDim) == keyCache.size(slotDim),
                Where(op), "value_cache has ", valueCache.size(0), " blocks of ", valueCache.size(slotDim),
                " slots, key_cache ", keyCache.size(0), " of ", keyCache.size(slotDim), "; they must match");
}

ascend_kv::PagedLoadTiling PagedLoadPlan(const char* op, const at::Tensor& keyCache, const at::Tensor& valueCache,
                                         const at::Tensor& blockTable, const at::Tensor& contextLens,
                                         const at::Tensor& seqStarts, const at::Tensor& key, const at::Tensor& value,
                                         int64_t layout, bool cumsum)
{
    CheckLayout(op, layout);
    const bool nd = layout == static_cast<int64_t>(ascend_kv::kLayoutNd);
    const at::Device device = keyCache.device();
    const TokenRows output = nd ? TokenRows{3, "[rows, num_heads, head_size]", false}
                                : TokenRows{2, "[rows, T]", false};
    ascend_kv::PagedLoadGeometry call;
    call.layout = static_cast<uint64_t>(layout);
    call.cumsum = cumsum;
    call.key = CheckedCache(op, nd, keyCache, "key_cache", key, "key", output, device);
    call.value = CheckedCache(op, nd, valueCache, "value_cache", value, "value", output, device);
    CheckSameBlocks(op, nd, keyCache, valueCache);
    CheckDistinctElements(op, key, "key");
    CheckDistinctElements(op, value, "value");
    CheckRank(op, blockTable, "block_table", 2, "[batch, max_blocks]");
    const int64_t batch = blockTable.size(0);
    CheckIndexTensor(op, blockTable, "block_table", device);
    CheckIndex(op, contextLens, "context_lens", device, cumsum ? "[batch + 1]" : "[batch]", batch + (cumsum ? 1 : 0));
    if (seqStarts.defined()) {
        CheckIndex(op, seqStarts, "seq_starts", device, "[batch]", batch);
    }
    call.blockTable = ascend_kv::GeometryOf(blockTable);
    call.contextLens = ascend_kv::GeometryOf(contextLens);
    call.seqStarts = ascend_kv::GeometryOf(seqStarts);
    return Tile(op, device, call, &ascend_kv::ComputePagedLoadTiling);
}

void PagedCacheLoad(const at::Tensor& keyCache, const at::Tensor& valueCache, const at::Tensor& blockTable,
                    const at::Tensor& contextLens, const c10::optional<at::Tensor>& seqStarts, const at::Tensor& key,
                    const at::Tensor& value, int64_t layout, bool cumsum)
{
    const at::Tensor starts = seqStarts.has_value() ? *seqStarts : at::Tensor();
    const auto tiling = PagedLoadPlan("paged_cache_load", keyCache, valueCache, blockTable, contextLens, starts, key,
                                      value, layout, cumsum);
    if (tiling.usedCores > 0) {
        ascend_kv::LaunchPagedLoad(keyCache, valueCache, blockTable, contextLens, starts, key, value, tiling);
    }
}

std::string PagedCacheLoadTilingText(const at::Tensor& keyCache, const at::Tensor& valueCache,
                                     const at::Tensor& blockTable, const at::Tensor& contextLens,
                                     const c10::optional<at::Tensor>& seqStarts, const at::Tensor& key,
                                     const at::Tensor& value, int64_t layout, bool cumsum)
{
    const at::Tensor starts = seqStarts.has_value() ? *seqStarts : at::Tensor();
    return ascend_kv::DescribeTiling(PagedLoadPlan("paged_cache_load_tiling", keyCache, valueCache, blockTable,
                                                   contextLens, starts, key, value, layout, cumsum));
}

ascend_kv::ReshapeTiling ReshapePlan(const char* op, const at::Tensor& key, const at::Tensor& value,
                                     const at::Tensor& keyCache, const at::Tensor& valueCache,
                                     const at::Tensor& slotMapping, int64_t layout)
{
    CheckLayout(op, layout);
    const bool nd = layout == static_cast<int64_t>(ascend_kv::kLayoutNd);
    const at::Device device = keyCache.device();
    TORCH_CHECK(value.defined() == valueCache.defined(), Where(op), "value and value_cache must both be given or "
                "both be None (key-only mode), got value ", value.defined() ? "given" : "None", " and value_cache ",
                valueCache.defined() ? "given" : "None");
    const TokenRows input{3, "[num_tokens, num_heads, head_size]", true};
    ascend_kv::ReshapeGeometry call;
    call.layout = static_cast<uint64_t>(layout);
    call.key = CheckedCache(op, nd, keyCache, "key_cache", key, "key", input, device);
    CheckDistinctElements(op, keyCache, "key_cache");
    CheckIndex(op, slotMapping, "slot_mapping", device, "[n]", slotMapping.numel());
    const int64_t tokens = slotMapping.size(0);
    TORCH_CHECK(tokens <= key.size(0), Where(op), "slot_mapping has ", tokens, " entries, more than the ",
                key.size(0), " tokens of key");
    if (value.defined()) {
        call.value = CheckedCache(op, nd, valueCache, "value_cache", value, "value", input, device);
        CheckDistinctElements(op, valueCache, "value_cache");
        CheckSameBlocks(op, nd, keyCache, valueCache);
        TORCH_CHECK(tokens <= value.size(0), Where(op), "slot_mapping has ", tokens, " entries, more than the ",
                    value.size(0), " tokens of value");
    }
    call.slotMapping = ascend_kv::GeometryOf(slotMapping);
    return Tile(op, device, call, &ascend_kv::ComputeReshapeTiling);
}

at::Tensor Given(const c10::optional<at::Tensor>& tensor) { return tensor.has_value() ? *tensor : at::Tensor(); }

void ReshapeAndCache(const at::Tensor& key, const c10::optional<at::Tensor>& value, const at::Tensor& keyCache,
                     const c10::optional<at::Tensor>& valueCache, const at::Tensor& slotMapping, int64_t layout)
{
    const auto tiling = ReshapePlan("reshape_and_cache", key, Given(value), keyCache, Given(valueCache), slotMapping,
                                    layout);
    if (tiling.usedCores > 0) {
        ascend_kv::LaunchReshapeAndCache(key, Given(value), keyCache, Given(valueCache), slotMapping, tiling);
    }
}

std::string ReshapeAndCacheTilingText(const at::Tensor& key, const c10::optional<at::Tensor>& value,
                                      const at::Tensor& keyCache, const c10::optional<at::Tensor>& valueCache,
                                      const at::Tensor& slotMapping, int64_t layout)
{
    return ascend_kv::DescribeTiling(ReshapePlan("reshape_and_cache_tiling", key, Given(value), keyCache,
                                                 Given(valueCache), slotMapping, layout));
}

// ---------------------------------------------------------------------------------- block_copy

ascend_kv::BlockCopyTiling BlockCopyPlan(const char* op, const std::vector<at::Tensor>& caches, const at::Tensor& src,
                                         const at::Tensor& dst, const at::Tensor& cumSum,
                                         std::vector<uint64_t>* table)
{
    TORCH_CHECK(!caches.empty(), Where(op), "caches must hold at least one cache");
    const at::Device device = caches[0].device();
    ascend_kv::BlockCopyGeometry call;
    for (size_t c = 0; c < caches.size(); ++c) {
        const std::string name = "caches[" + std::to_string(c) + "]";
        const at::Tensor& cache = caches[c];
        CheckRank(op, cache, name.c_str(), 3, "[num_blocks, rows, row]");
        CheckDevice(op, cache, name.c_str(), device);
        CheckDenseFrom(op, cache, name.c_str(), 2, "rows (dim 2)");
        CheckDistinctElements(op, cache, name.c_str());
        TORCH_CHECK(cache.size(0) == caches[0].size(0), Where(op), name, " has ", cache.size(0),
                    " blocks, caches[0] ", caches[0].size(0), "; they must match");
        call.caches.push_back(ascend_kv::GeometryOf(cache));
        call.addresses.push_back(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(cache.data_ptr())));
    }
    CheckIndex(op, src, "src", device, "[pairs]", src.size(0));
    CheckIndex(op, dst, "dst", device, "[copies]", dst.size(0));
    if (cumSum.defined()) {
        CheckIndex(op, cumSum, "cum_sum", device, "[pairs]", src.size(0));
    } else {
        TORCH_CHECK(src.size(0) == dst.size(0), Where(op), "without cum_sum, src and dst must have one entry per copy, "
                    "got ", src.size(0), " and ", dst.size(0));
    }
    call.src = ascend_kv::GeometryOf(src);
    call.dst = ascend_kv::GeometryOf(dst);
    call.cumSum = ascend_kv::GeometryOf(cumSum);
    ascend_kv::BlockCopyTiling tiling{};
    const int status = ascend_kv::ComputeBlockCopyTiling(call, ascend_kv::VectorCoreCount(device),
                                                         ascend_kv::UsableUbBytes(device), &tiling, table);
    TORCH_CHECK(status == ascend_kv::kTilingOk, Where(op), "tiling failed: ", ascend_kv::TilingStatusMessage(status));
    return tiling;
}

void BlockCopy(at::TensorList caches, const at::Tensor& src, const at::Tensor& dst,
               const c10::optional<at::Tensor>& cumSum)
{
    const std::vector<at::Tensor> list = caches.vec();
    std::vector<uint64_t> table;
    const auto tiling = BlockCopyPlan("block_copy", list, src, dst, Given(cumSum), &table);
    if (tiling.usedCores > 0) {
        ascend_kv::LaunchBlockCopy(list, table, src, dst, Given(cumSum), tiling);
    }
}

std::string BlockCopyTilingText(at::TensorList caches, const at::Tensor& src, const at::Tensor& dst,
                                const c10::optional<at::Tensor>& cumSum)
{
    std::vector<uint64_t> table;
    return ascend_kv::DescribeTiling(BlockCopyPlan("block_copy_tiling", caches.vec(), src, dst, Given(cumSum), &table));
}

// The ops return nothing: under torch.compile / torchair tracing they only mark their outputs written.
void KvCacheMeta(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                 const c10::optional<at::Tensor>&, int64_t)
{
}

void PagedCacheLoadMeta(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                        const c10::optional<at::Tensor>&, const at::Tensor&, const at::Tensor&, int64_t, bool)
{
}

void ReshapeAndCacheMeta(const at::Tensor&, const c10::optional<at::Tensor>&, const at::Tensor&,
                         const c10::optional<at::Tensor>&, const at::Tensor&, int64_t)
{
}

void BlockCopyMeta(at::TensorList, const at::Tensor&, const at::Tensor&, const c10::optional<at::Tensor>&) {}

void Define(torch::Library& m)
{
    m.def("kv_cache(Tensor new_kv, Tensor(a!) past, Tensor token_offset, Tensor seq_len, Tensor? layer_tensor, "
          "int layer_id) -> ()");
    m.def("paged_cache_load(Tensor key_cache, Tensor value_cache, Tensor block_table, Tensor context_lens, "
          "Tensor? seq_starts, Tensor(a!) key, Tensor(b!) value, int layout, bool cumsum) -> ()");
    m.def("reshape_and_cache(Tensor key, Tensor? value, Tensor(a!) key_cache, Tensor(b!)? value_cache, "
          "Tensor slot_mapping, int layout) -> ()");
    m.def("kv_cache_tiling(Tensor new_kv, Tensor past, Tensor token_offset, Tensor seq_len, Tensor? layer_tensor, "
          "int layer_id) -> str");
    m.def("paged_cache_load_tiling(Tensor key_cache, Tensor value_cache, Tensor block_table, Tensor context_lens, "
          "Tensor? seq_starts, Tensor key, Tensor value, int layout, bool cumsum) -> str");
    m.def("reshape_and_cache_tiling(Tensor key, Tensor? value, Tensor key_cache, Tensor? value_cache, "
          "Tensor slot_mapping, int layout) -> str");
    m.def("block_copy(Tensor(a!)[] caches, Tensor src, Tensor dst, Tensor? cum_sum) -> ()");
    m.def("block_copy_tiling(Tensor[] caches, Tensor src, Tensor dst, Tensor? cum_sum) -> str");
}

void Implement(torch::Library& m)
{
    m.impl("kv_cache", &KvCache);
    m.impl("paged_cache_load", &PagedCacheLoad);
    m.impl("kv_cache_tiling", &KvCacheTilingText);
    m.impl("reshape_and_cache", &ReshapeAndCache);
    m.impl("paged_cache_load_tiling", &PagedCacheLoadTilingText);
    m.impl("reshape_and_cache_tiling", &ReshapeAndCacheTilingText);
    m.impl("block_copy", &BlockCopy);
    m.impl("block_copy_tiling", &BlockCopyTilingText);
}

void ImplementMeta(torch::Library& m)
{
    m.impl("kv_cache", &KvCacheMeta);
    m.impl("paged_cache_load", &PagedCacheLoadMeta);
    m.impl("reshape_and_cache", &ReshapeAndCacheMeta);
    m.impl("block_copy", &BlockCopyMeta);
}

}  // namespace

// TORCH_LIBRARY pastes its namespace argument, so the macro is expanded one level up.
#define ASCEND_KV_LIBRARY(ns, m) TORCH_LIBRARY(ns, m)
#define ASCEND_KV_LIBRARY_IMPL(ns, key, m) TORCH_LIBRARY_IMPL(ns, key, m)

ASCEND_KV_LIBRARY(ASCEND_KV_OP_NAMESPACE, m) { Define(m); }

ASCEND_KV_LIBRARY_IMPL(ASCEND_KV_OP_NAMESPACE, PrivateUse1, m) { Implement(m); }

ASCEND_KV_LIBRARY_IMPL(ASCEND_KV_OP_NAMESPACE, Meta, m) { ImplementMeta(m); }

#ifdef ASCEND_KV_HOST_BUILD
// The host build also serves CPU tensors: the kernels run on the host model over their memory.
ASCEND_KV_LIBRARY_IMPL(ASCEND_KV_OP_NAMESPACE, CPU, m) { Implement(m); }
#endif
