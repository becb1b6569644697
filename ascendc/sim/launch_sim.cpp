// C entry points of the host (sim) build, called from Python through ctypes
// (ascend_kv/backends/sim.py): compute the tiling, register every tensor as a named GM
// allocation of the host model (inputs read-only) and run the kernel on the simulated cores.
// Host build only.
//
// Return codes: 0 ok; 1 the tiling rejected the call; 2 the host model stopped the kernel (or
// rejected the launch). The message buffer says why.
#include <cstddef>
#include <cstdint>
#include <string>

#include "host/tiling.h"
#include "host_model_launcher.h"

extern "C" void kv_cache_kernel(GM_ADDR newKv, GM_ADDR past, GM_ADDR seqLen, GM_ADDR readStart,
                                GM_ADDR writeStart, GM_ADDR tiling);
extern "C" void paged_cache_load_kernel(GM_ADDR keyCache, GM_ADDR valueCache, GM_ADDR blockTable, GM_ADDR lens,
                                        GM_ADDR outStart, GM_ADDR firstColumn, GM_ADDR key, GM_ADDR value,
                                        GM_ADDR tiling);

namespace {

enum SimStatus : int { kSimOk = 0, kSimTilingError = 1, kSimModelError = 2 };

using AscendC::host_model::GmRegion;

GM_ADDR Gm(const void* p) { return reinterpret_cast<GM_ADDR>(const_cast<void*>(p)); }

int TilingFailed(int status, char* message, uint64_t messageBytes)
{
    AscendC::host_model::CopyMessage(ascend_kv::TilingStatusMessage(status), message, messageBytes);
    return kSimTilingError;
}

int Launched(int status) { return status == AscendC::host_model::kLaunchOk ? kSimOk : kSimModelError; }

constexpr uint64_t kInt64 = sizeof(int64_t);

}  // namespace

extern "C" {

// shape: ntokens, rowBytes, layers, batch, maxSeqLen, layerId. out: the 11 words of KvCacheTiling.
int ascend_kv_sim_kv_cache_tiling(const uint64_t* shape, uint64_t cores, uint64_t ubBytes, uint64_t* out)
{
    const ascend_kv::KvCacheShape s{shape[0], shape[1], shape[2], shape[3], shape[4], shape[5]};
    return ascend_kv::ComputeKvCacheTiling(s, cores, ubBytes, reinterpret_cast<ascend_kv::KvCacheTiling*>(out));
}

// shape: layout, numTokens, batch, maxBlocks, numBlocks, blockSize, keyRowBytes, valueRowBytes,
// keyRows, valueRows. out: the 17 words of PagedLoadTiling.
int ascend_kv_sim_paged_load_tiling(const uint64_t* shape, uint64_t cores, uint64_t ubBytes, uint64_t* out)
{
    const ascend_kv::PagedLoadShape s{shape[0], shape[1], shape[2], shape[3], shape[4],
                                      shape[5], shape[6], shape[7], shape[8], shape[9]};
    return ascend_kv::ComputePagedLoadTiling(s, cores, ubBytes, reinterpret_cast<ascend_kv::PagedLoadTiling*>(out));
}

int ascend_kv_sim_kv_cache(const void* newKv, void* past, const void* seqLen, const void* readStart,
                           const void* writeStart, uint64_t ntokens, uint64_t rowBytes, uint64_t layers,
                           uint64_t batch, uint64_t maxSeqLen, uint64_t layerId, uint64_t cores, uint64_t ubBytes,
                           char* message, uint64_t messageBytes)
{
    AscendC::host_model::CopyMessage("", message, messageBytes);
    ascend_kv::KvCacheTiling tiling{};
    const ascend_kv::KvCacheShape shape{ntokens, rowBytes, layers, batch, maxSeqLen, layerId};
    const int status = ascend_kv::ComputeKvCacheTiling(shape, cores, ubBytes, &tiling);
    if (status != ascend_kv::kTilingOk) {
        return TilingFailed(status, message, messageBytes);
    }
    if (tiling.usedCores == 0) {
        return kSimOk;
    }
    const GmRegion regions[] = {
        {newKv, ntokens * rowBytes, "new_kv", false},
        {past, layers * batch * maxSeqLen * rowBytes, "past", true},
        {seqLen, batch * kInt64, "seq_len", false},
        {readStart, batch * kInt64, "read_start", false},
        {writeStart, batch * kInt64, "write_start", false},
        {&tiling, sizeof(tiling), "tiling", false},
    };
    return Launched(ASCENDC_HOST_LAUNCH(kv_cache_kernel, static_cast<uint32_t>(tiling.usedCores),
                                        static_cast<uint32_t>(ubBytes), regions, sizeof(regions) / sizeof(regions[0]),
                                        message, messageBytes, Gm(newKv), Gm(past), Gm(seqLen), Gm(readStart),
                                        Gm(writeStart), Gm(&tiling)));
}

int ascend_kv_sim_paged_cache_load(const void* keyCache, const void* valueCache, const void* blockTable,
                                   const void* lens, const void* outStart, const void* firstColumn, void* key,
                                   void* value, uint64_t layout, uint64_t numTokens, uint64_t batch,
                                   uint64_t maxBlocks, uint64_t numBlocks, uint64_t blockSize, uint64_t keyRowBytes,
                                   uint64_t valueRowBytes, uint64_t keyRows, uint64_t valueRows, uint64_t cores,
                                   uint64_t ubBytes, char* message, uint64_t messageBytes)
{
    AscendC::host_model::CopyMessage("", message, messageBytes);
    ascend_kv::PagedLoadTiling tiling{};
    const ascend_kv::PagedLoadShape shape{layout,      numTokens,     batch,   maxBlocks, numBlocks,
                                          blockSize,   keyRowBytes,   valueRowBytes, keyRows,   valueRows};
    const int status = ascend_kv::ComputePagedLoadTiling(shape, cores, ubBytes, &tiling);
    if (status != ascend_kv::kTilingOk) {
        return TilingFailed(status, message, messageBytes);
    }
    if (tiling.usedCores == 0) {
        return kSimOk;
    }
    const uint64_t cacheTokens = numBlocks * blockSize;
    const GmRegion regions[] = {
        {keyCache, cacheTokens * keyRowBytes, "key_cache", false},
        {valueCache, cacheTokens * valueRowBytes, "value_cache", false},
        {blockTable, batch * maxBlocks * kInt64, "block_table", false},
        {lens, batch * kInt64, "lens", false},
        {outStart, batch * kInt64, "out_start", false},
        {firstColumn, batch * kInt64, "first_column", false},
        {key, keyRows * keyRowBytes, "key", true},
        {value, valueRows * valueRowBytes, "value", true},
        {&tiling, sizeof(tiling), "tiling", false},
    };
    return Launched(ASCENDC_HOST_LAUNCH(paged_cache_load_kernel, static_cast<uint32_t>(tiling.usedCores),
                                        static_cast<uint32_t>(ubBytes), regions, sizeof(regions) / sizeof(regions[0]),
                                        message, messageBytes, Gm(keyCache), Gm(valueCache), Gm(blockTable), Gm(lens),
                                        Gm(outStart), Gm(firstColumn), Gm(key), Gm(value), Gm(&tiling)));
}

}  // extern "C"
