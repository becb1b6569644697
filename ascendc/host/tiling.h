/*
 * Host-side tiling of the two kernels: from the call's shapes, the number of vector cores and
 * the usable UB bytes per core to the tiling struct of ../tiling.h. Used by the NPU binding and
 * by the host (sim) build alike. Plain C++17, no CANN headers.
 */
#ifndef ASCEND_KV_HOST_TILING_H
#define ASCEND_KV_HOST_TILING_H

#include <cstdint>

#include "../tiling.h"

namespace ascend_kv {

/// Shapes of a validated kv_cache call (ascend_kv.calls.KvCacheCall), rows in bytes.
struct KvCacheShape {
    uint64_t ntokens;    ///< rows of new_kv
    uint64_t rowBytes;   ///< hidden * itemsize, a positive multiple of 32
    uint64_t layers;     ///< past.shape[0]
    uint64_t batch;      ///< past.shape[1]
    uint64_t maxSeqLen;  ///< past.shape[2]
    uint64_t layerId;    ///< the layer written
};

/// Shapes of a validated paged_cache_load call (ascend_kv.calls.PagedLoadCall), rows in bytes.
struct PagedLoadShape {
    uint64_t layout;         ///< kLayoutNd or kLayoutNz
    uint64_t numTokens;      ///< sum of lens
    uint64_t batch;          ///< block_table.shape[0]
    uint64_t maxBlocks;      ///< block_table.shape[1]
    uint64_t numBlocks;      ///< key_cache.shape[0]
    uint64_t blockSize;      ///< token slots per block
    uint64_t keyRowBytes;    ///< a positive multiple of 32
    uint64_t valueRowBytes;  ///< a positive multiple of 32
    uint64_t keyRows;        ///< key.shape[0]
    uint64_t valueRows;      ///< value.shape[0]
};

/// Result of a tiling computation.
enum TilingStatus : int {
    kTilingOk = 0,
    kTilingNoCores = 1,     ///< coreCount == 0
    kTilingUbTooSmall = 2,  ///< ubBytes leaves no room for one 32-byte copy buffer per queue slot
    kTilingBadShape = 3,    ///< a row size that is not a positive multiple of 32, a zero block size
                            ///< with tokens to load, or an unknown layout
};

/// A sentence describing a TilingStatus.
const char* TilingStatusMessage(int status);

/**
 * Tiling of kv_cache_kernel. coreCount: vector cores available; ubBytes: usable UB per core.
 * Launch tiling->usedCores cores (none when it is 0).
 */
int ComputeKvCacheTiling(const KvCacheShape& shape, uint64_t coreCount, uint64_t ubBytes, KvCacheTiling* tiling);

/// Tiling of paged_cache_load_kernel; as ComputeKvCacheTiling.
int ComputePagedLoadTiling(const PagedLoadShape& shape, uint64_t coreCount, uint64_t ubBytes,
                           PagedLoadTiling* tiling);

}  // namespace ascend_kv

#endif  // ASCEND_KV_HOST_TILING_H
