// The host build's side of host/kernel_launch.h: the kernels run on the host model of the AscendC
// API (sim/include), core by core, over the tensors' own memory (CPU tensors, or a PrivateUse1
// device whose tensors hold host memory). Every tensor is registered with the model as a named
// GM region covering exactly its elements (inputs read-only), so an access outside them stops
// the kernel; the model's message becomes the RuntimeError.
// Settings, read on every call: ASCEND_KV_SIM_CORES (default 40) and ASCEND_KV_SIM_UB_BYTES
// (default 192 KB - 256 B - 8 KB, the usable UB of an A2/A3 vector core).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/library.h>

#include "host/kernel_launch.h"
#include "host_model_launcher.h"

extern "C" void kv_cache_kernel(GM_ADDR newKv, GM_ADDR past, GM_ADDR tokenOffset, GM_ADDR seqLen, GM_ADDR layerId,
                                GM_ADDR tiling);
extern "C" void paged_cache_load_kernel(GM_ADDR keyCache, GM_ADDR valueCache, GM_ADDR blockTable,
                                        GM_ADDR contextLens, GM_ADDR seqStarts, GM_ADDR key, GM_ADDR value,
                                        GM_ADDR tiling);
extern "C" void reshape_and_cache_kernel(GM_ADDR key, GM_ADDR value, GM_ADDR keyCache, GM_ADDR valueCache,
                                         GM_ADDR slotMapping, GM_ADDR tiling);
extern "C" void reshape_and_cache_quant_kernel(GM_ADDR key, GM_ADDR value, GM_ADDR keyCache, GM_ADDR valueCache,
                                               GM_ADDR slotMapping, GM_ADDR keyScale, GM_ADDR keyOffset,
                                               GM_ADDR keyScaleCache, GM_ADDR valueScale, GM_ADDR valueOffset,
                                               GM_ADDR valueScaleCache, GM_ADDR tiling);
extern "C" void paged_cache_load_dequant_kernel(GM_ADDR keyCache, GM_ADDR valueCache, GM_ADDR blockTable,
                                                GM_ADDR contextLens, GM_ADDR seqStarts, GM_ADDR key, GM_ADDR value,
                                                GM_ADDR keyScale, GM_ADDR keyOffset, GM_ADDR keyScaleCache,
                                                GM_ADDR valueScale, GM_ADDR valueOffset, GM_ADDR valueScaleCache,
                                                GM_ADDR tiling);
extern "C" void block_copy_kernel(GM_ADDR cacheTable, GM_ADDR src, GM_ADDR dst, GM_ADDR cumSum, GM_ADDR buffer,
                                  GM_ADDR tiling);
extern "C" void batch_memcpy_kernel(GM_ADDR srcPtrs, GM_ADDR dstPtrs, GM_ADDR sizes, GM_ADDR tiling);
extern "C" void transfer_blocks_kernel(GM_ADDR cacheTable, GM_ADDR buffer, GM_ADDR ids, GM_ADDR tiling);

namespace ascend_kv {
namespace {

using AscendC::host_model::GmRegion;

constexpr uint64_t kDefaultCores = 40;
constexpr uint64_t kDefaultUbBytes = 192 * 1024 - 256 - 8 * 1024;
constexpr size_t kMessageBytes = 4096;

uint64_t Setting(const char* name, uint64_t fallback)
{
    const char* raw = std::getenv(name);
    if (raw == nullptr || *raw == '\0') {
        return fallback;
    }
    char* end = nullptr;
    const long long value = std::strtoll(raw, &end, 10);
    TORCH_CHECK(end != raw && *end == '\0' && value >= 1, name, " must be an integer >= 1, got '", raw, "'");
    return static_cast<uint64_t>(value);
}

/// A tensor as a GM region of the model: its span, and which bytes of it are elements when the
/// view has gaps (the mask lives as long as the region).
class Region {
public:
    Region(const at::Tensor& tensor, const char* name, bool writable)
    {
        region_.name = name;
        region_.writable = writable;
        if (!tensor.defined()) {
            region_.base = nullptr;
            region_.bytes = 0;
            return;
        }
        region_.base = tensor.data_ptr();
        region_.bytes = SpanBytes(GeometryOf(tensor));
        if (region_.bytes != static_cast<uint64_t>(tensor.numel() * tensor.element_size())) {
            MarkElements(tensor);
            region_.elements = mask_.data();
        }
    }
    Region(const Region&) = delete;
    Region& operator=(const Region&) = delete;

    const GmRegion& Get() const { return region_; }

private:
    void MarkElements(const at::Tensor& tensor)
    {
        mask_.assign(region_.bytes, 0);
        const int64_t dims = tensor.dim();
        const int64_t item = tensor.element_size();
        std::vector<int64_t> index(static_cast<size_t>(dims), 0);
        for (int64_t n = 0; n < tensor.numel(); ++n) {
            int64_t offset = 0;
            for (int64_t d = 0; d < dims; ++d) {
                offset += index[static_cast<size_t>(d)] * tensor.stride(d);
            }
            std::fill_n(mask_.begin() + offset * item, item, 1);
            for (int64_t d = dims - 1; d >= 0; --d) {
                if (++index[static_cast<size_t>(d)] < tensor.size(d)) {
                    break;
                }
                index[static_cast<size_t>(d)] = 0;
            }
        }
    }

    GmRegion region_{};
    std::vector<uint8_t> mask_;
};

GM_ADDR Gm(const at::Tensor& tensor)
{
    return tensor.defined() ? static_cast<GM_ADDR>(tensor.data_ptr()) : nullptr;
}

/// Kernel launches since the library was loaded (torch.ops.ascend_kv_host.launches()).
std::atomic<int64_t> launches{0};

/// Run `body` on `cores` model cores over the GM regions `list`; a model error becomes a RuntimeError.
template <typename Body>
void RunOn(const char* op, uint64_t cores, const std::vector<GmRegion>& list, Body body)
{
    ++launches;
    char message[kMessageBytes];
    const uint64_t ub = UsableUbBytes(at::Device(at::kCPU));
    const int status = AscendC::host_model::Launch(
        static_cast<uint32_t>(cores), static_cast<uint32_t>(ub), list.data(), list.size(), body, message,
        sizeof(message), AscendC::host_model::kDefaultGarbage, /*requireTaskType=*/true);
    TORCH_CHECK(status == AscendC::host_model::kLaunchOk, "ascend_kv_host.", op,
                ": the host model of the AscendC API stopped the kernel: ", message);
}

/// Run `body` on `cores` model cores over `regions`.
template <size_t N, typename Body>
void Run(const char* op, uint64_t cores, const Region (&regions)[N], Body body)
{
    std::vector<GmRegion> list;
    for (const Region& region : regions) {
        list.push_back(region.Get());
    }
    RunOn(op, cores, list, body);
}

}  // namespace

/// Kernel launches so far (exposed as torch.ops.ascend_kv_host.launches()).
int64_t Launches() { return launches.load(); }

uint64_t VectorCoreCount(const at::Device&) { return Setting("ASCEND_KV_SIM_CORES", kDefaultCores); }

uint64_t UsableUbBytes(const at::Device&) { return Setting("ASCEND_KV_SIM_UB_BYTES", kDefaultUbBytes); }

int64_t StorageFormat(const at::Tensor&)
{
    return -1;  // host memory has no storage format of its own: the bytes are the logical layout
}

void LaunchKvCache(const at::Tensor& newKv, const at::Tensor& past, const at::Tensor& tokenOffset,
                   const at::Tensor& seqLen, const at::Tensor& layer, const KvCacheTiling& tiling)
{
    KvCacheTiling t = tiling;
    const at::Tensor tilingBytes = at::from_blob(&t, {static_cast<int64_t>(sizeof(t))}, at::kByte);
    const Region regions[] = {{newKv, "new_kv", false},       {past, "past", true},
                              {tokenOffset, "token_offset", false}, {seqLen, "seq_len", false},
                              {layer, "layer_tensor", false},  {tilingBytes, "tiling", false}};
    Run("kv_cache", t.usedCores, regions,
        [&]() { kv_cache_kernel(Gm(newKv), Gm(past), Gm(tokenOffset), Gm(seqLen), Gm(layer), Gm(tilingBytes)); });
}

void LaunchPagedLoad(const at::Tensor& keyCache, const at::Tensor& valueCache, const at::Tensor& blockTable,
                     const at::Tensor& contextLens, const at::Tensor& seqStarts, const at::Tensor& key,
                     const at::Tensor& value, const PagedLoadTiling& tiling)
{
    PagedLoadTiling t = tiling;
    const at::Tensor tilingBytes = at::from_blob(&t, {static_cast<int64_t>(sizeof(t))}, at::kByte);
    const Region regions[] = {{keyCache, "key_cache", false},     {valueCache, "value_cache", false},
                              {blockTable, "block_table", false}, {contextLens, "context_lens", false},
                              {seqStarts, "seq_starts", false},   {key, "key", true},
                              {value, "value", true},             {tilingBytes, "tiling", false}};
    Run("paged_cache_load", t.usedCores, regions, [&]() {
        paged_cache_load_kernel(Gm(keyCache), Gm(valueCache), Gm(blockTable), Gm(contextLens), Gm(seqStarts), Gm(key),
                                Gm(value), Gm(tilingBytes));
    });
}

void LaunchReshapeAndCache(const at::Tensor& key, const at::Tensor& value, const at::Tensor& keyCache,
                           const at::Tensor& valueCache, const at::Tensor& slotMapping, const ReshapeTiling& tiling)
{
    ReshapeTiling t = tiling;
    const at::Tensor tilingBytes = at::from_blob(&t, {static_cast<int64_t>(sizeof(t))}, at::kByte);
    const Region regions[] = {{key, "key", false},
                              {value, "value", false},
                              {keyCache, "key_cache", true},
                              {valueCache, "value_cache", true},
                              {slotMapping, "slot_mapping", false},
                              {tilingBytes, "tiling", false}};
    Run("reshape_and_cache", t.usedCores, regions, [&]() {
        reshape_and_cache_kernel(Gm(key), Gm(value), Gm(keyCache), Gm(valueCache), Gm(slotMapping), Gm(tilingBytes));
    });
}

void LaunchReshapeAndCacheQuant(const at::Tensor& key, const at::Tensor& value, const at::Tensor& keyCache,
                                const at::Tensor& valueCache, const at::Tensor& slotMapping,
                                const KernelQuantSide& keyQuant, const KernelQuantSide& valueQuant,
                                const ReshapeQuantTiling& tiling)
{
    ReshapeQuantTiling t = tiling;
    const at::Tensor tilingBytes = at::from_blob(&t, {static_cast<int64_t>(sizeof(t))}, at::kByte);
    const Region regions[] = {{key, "key", false},
                              {value, "value", false},
                              {keyCache, "key_cache", true},
                              {valueCache, "value_cache", true},
                              {slotMapping, "slot_mapping", false},
                              {keyQuant.scale, "k_scale", false},
                              {keyQuant.offset, "k_offset", false},
                              {keyQuant.scale_cache, "k_scale_cache", true},
                              {valueQuant.scale, "v_scale", false},
                              {valueQuant.offset, "v_offset", false},
                              {valueQuant.scale_cache, "v_scale_cache", true},
                              {tilingBytes, "tiling", false}};
    Run("reshape_and_cache", t.usedCores, regions, [&]() {
        reshape_and_cache_quant_kernel(Gm(key), Gm(value), Gm(keyCache), Gm(valueCache), Gm(slotMapping),
                                       Gm(keyQuant.scale), Gm(keyQuant.offset), Gm(keyQuant.scale_cache),
                                       Gm(valueQuant.scale), Gm(valueQuant.offset), Gm(valueQuant.scale_cache),
                                       Gm(tilingBytes));
    });
}

void LaunchPagedLoadDequant(const at::Tensor& keyCache, const at::Tensor& valueCache, const at::Tensor& blockTable,
                            const at::Tensor& contextLens, const at::Tensor& seqStarts, const at::Tensor& key,
                            const at::Tensor& value, const KernelQuantSide& keyQuant, const KernelQuantSide& valueQuant,
                            const PagedLoadDequantTiling& tiling)
{
    PagedLoadDequantTiling t = tiling;
    const at::Tensor tilingBytes = at::from_blob(&t, {static_cast<int64_t>(sizeof(t))}, at::kByte);
    const Region regions[] = {{keyCache, "key_cache", false},
                              {valueCache, "value_cache", false},
                              {blockTable, "block_table", false},
                              {contextLens, "context_lens", false},
                              {seqStarts, "seq_starts", false},
                              {key, "key", true},
                              {value, "value", true},
                              {keyQuant.scale, "k_scale", false},
                              {keyQuant.offset, "k_offset", false},
                              {keyQuant.scale_cache, "k_scale_cache", false},
                              {valueQuant.scale, "v_scale", false},
                              {valueQuant.offset, "v_offset", false},
                              {valueQuant.scale_cache, "v_scale_cache", false},
                              {tilingBytes, "tiling", false}};
    Run("paged_cache_load", t.usedCores, regions, [&]() {
        paged_cache_load_dequant_kernel(Gm(keyCache), Gm(valueCache), Gm(blockTable), Gm(contextLens), Gm(seqStarts),
                                        Gm(key), Gm(value), Gm(keyQuant.scale), Gm(keyQuant.offset),
                                        Gm(keyQuant.scale_cache), Gm(valueQuant.scale), Gm(valueQuant.offset),
                                        Gm(valueQuant.scale_cache), Gm(tilingBytes));
    });
}

void LaunchBlockCopy(const std::vector<at::Tensor>& caches, const std::vector<uint64_t>& table, const at::Tensor& src,
                     const at::Tensor& dst, const at::Tensor& cumSum, const at::Tensor& buffer,
                     const BlockCopyTiling& tiling)
{
    BlockCopyTiling t = tiling;
    std::vector<uint64_t> words = table;
    const at::Tensor tilingBytes = at::from_blob(&t, {static_cast<int64_t>(sizeof(t))}, at::kByte);
    const at::Tensor tableBytes = at::from_blob(words.data(), {static_cast<int64_t>(words.size() * 8)}, at::kByte);
    const bool gather = t.transfer == kBlockCopyGather;
    std::vector<std::string> names;
    for (size_t c = 0; c < caches.size(); ++c) {
        names.push_back("caches[" + std::to_string(c) + "]");
    }
    std::vector<std::unique_ptr<Region>> regions;
    for (size_t c = 0; c < caches.size(); ++c) {
        regions.push_back(std::make_unique<Region>(caches[c], names[c].c_str(), !gather));
    }
    regions.push_back(std::make_unique<Region>(tableBytes, "cache_table", false));
    regions.push_back(std::make_unique<Region>(src, t.transfer == kBlockCopyWithin ? "src" : "slot_ids", false));
    regions.push_back(std::make_unique<Region>(dst, "dst", false));
    regions.push_back(std::make_unique<Region>(cumSum, "cum_sum", false));
    regions.push_back(std::make_unique<Region>(buffer, gather ? "out" : "src", gather));
    regions.push_back(std::make_unique<Region>(tilingBytes, "tiling", false));
    std::vector<GmRegion> list;
    for (const auto& region : regions) {
        list.push_back(region->Get());
    }
    RunOn("block_copy", t.usedCores, list, [&]() {
        block_copy_kernel(Gm(tableBytes), Gm(src), Gm(dst), Gm(cumSum), Gm(buffer), Gm(tilingBytes));
    });
}

void LaunchBatchMemcpyKernel(const at::Tensor& src, const at::Tensor& dst, const at::Tensor& sizes,
                             const BatchMemcpyTiling& tiling)
{
    BatchMemcpyTiling t = tiling;
    const at::Tensor tilingBytes = at::from_blob(&t, {static_cast<int64_t>(sizeof(t))}, at::kByte);
    // The ranges the tables name are GM regions too (the model's bookkeeping reads the tables, which
    // are host memory here; the kernel reads them in GM): sources read-only, one region per start
    // (the longest range from it), destinations written.
    const at::Tensor sizes64 = sizes.to(at::kLong);
    const int64_t* from = src.const_data_ptr<int64_t>();
    const int64_t* to = dst.const_data_ptr<int64_t>();
    const int64_t* bytes = sizes64.const_data_ptr<int64_t>();
    std::map<int64_t, std::pair<int64_t, int64_t>> sources;  // start -> (longest length, first copy)
    for (int64_t i = 0; i < src.numel(); ++i) {
        if (bytes[i] > 0) {
            const auto [at, added] = sources.emplace(from[i], std::pair<int64_t, int64_t>{bytes[i], i});
            at->second.first = std::max(at->second.first, bytes[i]);
        }
    }
    std::vector<std::string> names;
    std::vector<GmRegion> list;
    const auto range = [&](int64_t address, int64_t length, bool writable) {
        GmRegion region{};
        region.base = reinterpret_cast<void*>(address);
        region.bytes = static_cast<uint64_t>(length);
        region.writable = writable;
        list.push_back(region);
    };
    for (const auto& [address, source] : sources) {
        names.push_back("src_ptrs[" + std::to_string(source.second) + "]");
        range(address, source.first, false);
    }
    for (int64_t i = 0; i < dst.numel(); ++i) {
        if (bytes[i] > 0) {
            names.push_back("dst_ptrs[" + std::to_string(i) + "]");
            range(to[i], bytes[i], true);
        }
    }
    for (size_t r = 0; r < list.size(); ++r) {
        list[r].name = names[r].c_str();
    }
    const Region tables[] = {{src, "src_ptrs", false}, {dst, "dst_ptrs", false}, {sizes, "sizes", false},
                             {tilingBytes, "tiling", false}};
    for (const Region& table : tables) {
        list.push_back(table.Get());
    }
    RunOn("batch_memcpy", t.usedCores, list,
          [&]() { batch_memcpy_kernel(Gm(src), Gm(dst), Gm(sizes), Gm(tilingBytes)); });
}

/// `t` with its dims merged where one steps over the next whole (dims of size 1 dropped): the same
/// elements in as few dims as their strides allow, for a Region.
at::Tensor Coalesced(const at::Tensor& t)
{
    std::vector<int64_t> sizes, strides;
    for (int64_t d = 0; d < t.dim(); ++d) {
        if (t.size(d) == 1) {
            continue;
        }
        if (!sizes.empty() && strides.back() == t.size(d) * t.stride(d)) {
            sizes.back() *= t.size(d);
            strides.back() = t.stride(d);
            continue;
        }
        sizes.push_back(t.size(d));
        strides.push_back(t.stride(d));
    }
    return t.numel() == 0 ? t.reshape({0}) : t.as_strided(sizes, strides);
}

void LaunchTransferBlocks(const std::vector<at::Tensor>& caches, const std::vector<uint64_t>& table,
                          const at::Tensor& buffer, const at::Tensor& ids, const TransferTiling& tiling)
{
    TransferTiling t = tiling;
    std::vector<uint64_t> words = table;
    const at::Tensor tilingBytes = at::from_blob(&t, {static_cast<int64_t>(sizeof(t))}, at::kByte);
    const at::Tensor tableBytes = at::from_blob(words.data(), {static_cast<int64_t>(words.size() * 8)}, at::kByte);
    const bool gather = t.gather != 0;
    std::vector<std::string> names;
    for (size_t c = 0; c < caches.size(); ++c) {
        names.push_back("caches[" + std::to_string(c) + "]");
    }
    std::vector<std::unique_ptr<Region>> regions;
    for (size_t c = 0; c < caches.size(); ++c) {
        regions.push_back(std::make_unique<Region>(caches[c], names[c].c_str(), !gather));
    }
    regions.push_back(std::make_unique<Region>(tableBytes, "cache_table", false));
    regions.push_back(std::make_unique<Region>(Coalesced(buffer), gather ? "out" : "src", gather));
    regions.push_back(std::make_unique<Region>(ids, "block_ids", false));
    regions.push_back(std::make_unique<Region>(tilingBytes, "tiling", false));
    std::vector<GmRegion> list;
    for (const auto& region : regions) {
        list.push_back(region->Get());
    }
    RunOn("transfer_blocks", t.usedCores, list, [&]() {
        transfer_blocks_kernel(Gm(tableBytes), Gm(buffer), Gm(ids), Gm(tilingBytes));
    });
}

void LaunchMemcpyBatch(const std::vector<int64_t>& src, const std::vector<int64_t>& dst, const std::vector<int64_t>& sizes,
                       int64_t)
{
    for (size_t i = 0; i < sizes.size(); ++i) {  // the device's memory is host memory here
        if (sizes[i] > 0) {
            std::memcpy(reinterpret_cast<void*>(dst[i]), reinterpret_cast<const void*>(src[i]),
                        static_cast<size_t>(sizes[i]));
        }
    }
}

}  // namespace ascend_kv

// The host build counts its kernel launches, so a test can show how many one call makes.
TORCH_LIBRARY_FRAGMENT(ascend_kv_host, m) { m.def("launches() -> int", &ascend_kv::Launches); }
