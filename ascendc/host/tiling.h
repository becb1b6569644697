/*
 * Host-side tiling of the three kernels: from the call's tensor geometry (shapes, byte strides,
 * element sizes), the number of vector cores and the usable UB bytes per core to the tiling
 * structs of ../tiling.h. Never from index values. Used by the NPU build and the host build
 * alike; plain C++17, no torch or CANN headers.
 */
#ifndef ASCEND_KV_HOST_TILING_H
#define ASCEND_KV_HOST_TILING_H

#include <cstdint>
#include <string>
#include <vector>

#include "../tiling.h"

namespace ascend_kv {

/// Most dimensions of a tensor the kernels take.
constexpr int kMaxDims = 4;

/// The geometry of one tensor: absent (an optional tensor not given), or sizes and byte strides.
struct TensorGeom {
    bool present = false;
    int dims = 0;
    int64_t sizes[kMaxDims] = {};
    int64_t strides[kMaxDims] = {};  ///< bytes
    uint64_t elemBytes = 0;
};

/// kv_cache: new_kv [ntokens, hidden], past [layers, batch, max_seq_len, hidden], token_offset and
/// seq_len [batch], layer [1] or absent (then layerId).
struct KvCacheGeometry {
    TensorGeom newKv, past, tokenOffset, seqLen, layer;
    int64_t layerId = 0;
};

/// One cache of the paged ops, ND [nb, bs, heads, hs] / NZ [nb, T/E, bs, E], and its tensor of
/// token rows (paged_cache_load's output, reshape_and_cache's input).
struct CacheGeometry {
    TensorGeom cache, rows;
};

/// paged_cache_load: block_table [batch, max_blocks]; context_lens [batch] (or [batch + 1] with
/// cumsum); seq_starts [batch] or absent; outputs ND [rows, heads, hs] / NZ [rows, T].
struct PagedLoadGeometry {
    uint64_t layout = kLayoutNd;
    bool cumsum = false;
    CacheGeometry key, value;
    TensorGeom blockTable, contextLens, seqStarts;
};

/// reshape_and_cache: inputs [tokens, heads, hs] (value and its cache absent in key-only mode);
/// slot_mapping [n].
struct ReshapeGeometry {
    uint64_t layout = kLayoutNd;
    CacheGeometry key, value;
    TensorGeom slotMapping;
};

/// One side of a quantizing reshape_and_cache: the scheme and element-type codes of ../tiling.h,
/// the row as heads x headSize, the static scale / offset (absent when not given) or the dynamic
/// scale cache [numBlocks, blockSize, heads].
struct QuantSideGeometry {
    uint64_t scheme = kQuantNone;
    uint64_t inputType = kQuantFloat, compute = 0, scaleType = kQuantFloat, offsetType = kQuantFloat;
    uint64_t scaleCacheType = kQuantFloat;
    uint64_t heads = 1, headSize = 1;
    TensorGeom scale, offset, scaleCache;
};

/// reshape_and_cache with int8 quantization of one or both sides.
struct ReshapeQuantGeometry {
    ReshapeGeometry base;
    QuantSideGeometry key, value;
};

/// paged_cache_load with int8 dequantization of one or both sides (QuantSideGeometry.inputType:
/// the output's element type).
struct PagedLoadDequantGeometry {
    PagedLoadGeometry base;
    QuantSideGeometry key, value;
};

/// block_copy: caches as [num_blocks, rows, row] views (rows contiguous; the addresses are the
/// caches' first bytes), src [pairs], dst [copies], cumSum [pairs] or absent.
struct BlockCopyGeometry {
    std::vector<TensorGeom> caches;
    std::vector<uint64_t> addresses;
    TensorGeom src, dst, cumSum;
    bool simultaneous = false;  ///< every source read before any destination is written
    /// kBlockCopyGather / kBlockCopyScatter: block src[j] of each cache to or from row j of `buffer`
    /// [n, row bytes], from bufferOffsets[c] (dst and cumSum absent).
    uint64_t transfer = kBlockCopyWithin;
    TensorGeom buffer;
    std::vector<uint64_t> bufferOffsets;
};

/// batch_memcpy: the tables src [n] and dst [n] int64, sizes [n] int32/int64, contiguous.
struct BatchMemcpyGeometry {
    TensorGeom src, dst, sizes;
};

/// transfer_blocks: a block as a frame of kTransferFrameDims dims (sizes, and element strides in a
/// cache block and in a buffer block, loops in the order the kernel nests them); the caches (one
/// shape and strides: `cache` is the first) by address and span; the buffer [KV, L, n, *block] by
/// the byte strides of its first three dims and its span; ids [n].
constexpr int kTransferFrameDims = 6;
struct TransferGeometry {
    bool gather = true;
    int64_t frame[kTransferFrameDims] = {};
    int64_t cacheStrides[kTransferFrameDims] = {};   ///< elements
    int64_t bufferStrides[kTransferFrameDims] = {};  ///< elements
    TensorGeom cache, ids;
    std::vector<uint64_t> addresses, spans;
    uint64_t layers = 0;
    int64_t bufferSteps[3] = {};  ///< bytes between the buffer's K/V halves, layers and blocks
    uint64_t bufferSpan = 0;
};

/// Result of a tiling computation.
enum TilingStatus : int {
    kTilingOk = 0,
    kTilingNoCores = 1,     ///< coreCount == 0
    kTilingUbTooSmall = 2,  ///< ubBytes leaves no room for the staged windows and two 32-byte copy buffers
    kTilingBadShape = 3,    ///< an empty row, a row that is not a multiple of 32 bytes where the
                            ///< kernel needs it, an unknown layout or an index element size not 4 or 8
};

/// A sentence describing a TilingStatus.
const char* TilingStatusMessage(int status);

/// Bytes from a tensor's first element to the end of its last (0 when it has no element).
uint64_t SpanBytes(const TensorGeom& tensor);

/// Tiling of kv_cache_kernel. coreCount: vector cores available; ubBytes: usable UB per core.
/// Launch tiling->usedCores cores (none when it is 0).
int ComputeKvCacheTiling(const KvCacheGeometry& call, uint64_t coreCount, uint64_t ubBytes, KvCacheTiling* tiling);

/// Tiling of paged_cache_load_kernel; as ComputeKvCacheTiling.
int ComputePagedLoadTiling(const PagedLoadGeometry& call, uint64_t coreCount, uint64_t ubBytes,
                           PagedLoadTiling* tiling);

/// Tiling of reshape_and_cache_kernel; as ComputeKvCacheTiling.
int ComputeReshapeTiling(const ReshapeGeometry& call, uint64_t coreCount, uint64_t ubBytes, ReshapeTiling* tiling);

/// Tiling of reshape_and_cache_quant_kernel; as ComputeKvCacheTiling.
int ComputeReshapeQuantTiling(const ReshapeQuantGeometry& call, uint64_t coreCount, uint64_t ubBytes,
                              ReshapeQuantTiling* tiling);

/// Tiling of paged_cache_load_dequant_kernel; as ComputeKvCacheTiling.
int ComputePagedLoadDequantTiling(const PagedLoadDequantGeometry& call, uint64_t coreCount, uint64_t ubBytes,
                                  PagedLoadDequantTiling* tiling);

/// Tiling of block_copy_kernel and its cache table (kBlockCopyCacheWords words per cache); as
/// ComputeKvCacheTiling.
int ComputeBlockCopyTiling(const BlockCopyGeometry& call, uint64_t coreCount, uint64_t ubBytes, BlockCopyTiling* tiling,
                           std::vector<uint64_t>* table);

/// Tiling of batch_memcpy_kernel; as ComputeKvCacheTiling.
int ComputeBatchMemcpyTiling(const BatchMemcpyGeometry& call, uint64_t coreCount, uint64_t ubBytes,
                             BatchMemcpyTiling* tiling);

/// Tiling of transfer_blocks_kernel and its cache table (kTransferCacheWords words per cache); as
/// ComputeKvCacheTiling; kTilingBadShape when a block takes more than three outer loops.
int ComputeTransferTiling(const TransferGeometry& call, uint64_t coreCount, uint64_t ubBytes, TransferTiling* tiling,
                          std::vector<uint64_t>* table);

/// "name=value" for every field, in order, separated by spaces.
std::string DescribeTiling(const KvCacheTiling& tiling);
std::string DescribeTiling(const PagedLoadTiling& tiling);
std::string DescribeTiling(const ReshapeTiling& tiling);
std::string DescribeTiling(const BlockCopyTiling& tiling);
std::string DescribeTiling(const TransferTiling& tiling);
std::string DescribeTiling(const BatchMemcpyTiling& tiling);

}  // namespace ascend_kv

#endif  // ASCEND_KV_HOST_TILING_H
