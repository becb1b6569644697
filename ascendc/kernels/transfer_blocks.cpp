/*
 * Multi-layer block gather/scatter with relayout (gather_blocks, scatter_blocks) over a table of
 * caches, for the vector cores of Atlas A2/A3: one launch moves blocks ids[j] of every layer's key
 * and value caches to or from one buffer [KV, L, n, *block].
 *
 * Every relayout (nd, hnd, nz, a head split) is a permutation of one block, so a block is a loop
 * nest whose two sides differ only in their steps: up to three outer loops around `rows` rows of
 * rowBytes bytes contiguous on both sides. A chunk (rowsPerChunk rows, or one segment of a long
 * row) moves GM -> UB with one strided DataCopyPad and UB -> GM with another, no vector compute.
 *
 * Reads the raw ids tensor (int32 or int64) through a staged window; an entry outside
 * [0, numBlocks) is skipped, so values nobody checked never make the kernel touch memory outside
 * the caches or the buffer. Work split: items (cache, j, chunk) in that order, an even share of
 * consecutive items per core.
 */
#include "copy_common.h"

namespace ascend_kv {

class TransferBlocksKernel {
public:
    using Tiling = TransferTiling;

    __aicore__ inline void Init(GM_ADDR cacheTable, GM_ADDR buffer, GM_ADDR ids, const Tiling& tiling,
                                AscendC::TPipe* pipe)
    {
        t_ = tiling;
        table_.SetGlobalBuffer(reinterpret_cast<__gm__ uint64_t*>(cacheTable), t_.numCaches * kTransferCacheWords);
        buffer_.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(buffer), t_.bufferSpan);
        ids_.Init(pipe, ids, t_.blocks, t_.idsElemBytes, t_.stageBytes);
        pipe->InitBuffer(queue_, kCopyBuffers, static_cast<uint32_t>(t_.chunkBytes));
    }

    /// The items of core `core` (< usedCores).
    __aicore__ inline void Process(uint64_t core)
    {
        const Range mine = CoreShare(t_.items, core, t_.usedCores);
        const uint64_t perCache = t_.blocks * t_.chunks;
        uint64_t loaded = t_.numCaches;  // none yet
        for (uint64_t item = mine.begin; item < mine.end; ++item) {
            const uint64_t c = item / perCache;
            const uint64_t j = (item - c * perCache) / t_.chunks;
            const int64_t id = ids_.Get(j);
            if (id < 0 || static_cast<uint64_t>(id) >= t_.numBlocks) {
                continue;
            }
            if (c != loaded) {
                Load(c);
                loaded = c;
            }
            const uint64_t bufferAt = (c / t_.layers) * t_.bufferKvStride + (c % t_.layers) * t_.bufferLayerStride +
                                      j * t_.bufferBlockStride;
            CopyChunk(static_cast<uint64_t>(id) * t_.cacheBlockStride, bufferAt, item - c * perCache - j * t_.chunks);
        }
    }

private:
    /// Cache `c` of the table into cache_ (two scalar reads of GM).
    __aicore__ inline void Load(uint64_t c)
    {
        const uint64_t at = c * kTransferCacheWords;
        const uint64_t address = table_.GetValue(at + kTransferAddress);
        cache_.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(address), table_.GetValue(at + kTransferSpan));
    }

    /// Chunk `k` of the block at byte `cacheAt` of the cache and `bufferAt` of the buffer, through one UB buffer.
    __aicore__ inline void CopyChunk(uint64_t cacheAt, uint64_t bufferAt, uint64_t k)
    {
        const uint64_t segment = k % t_.segments;
        k /= t_.segments;
        const uint64_t group = k % t_.rowGroups;
        k /= t_.rowGroups;
        const uint64_t o2 = k % t_.outer2;
        k /= t_.outer2;
        const uint64_t o1 = k % t_.outer1;
        const uint64_t o0 = k / t_.outer1;
        const uint64_t firstRow = group * t_.rowsPerChunk;
        const uint64_t within = segment * t_.chunkBytes;
        cacheAt += o0 * t_.cacheOuter0 + o1 * t_.cacheOuter1 + o2 * t_.cacheOuter2 + firstRow * t_.cacheRowStride + within;
        bufferAt += o0 * t_.bufferOuter0 + o1 * t_.bufferOuter1 + o2 * t_.bufferOuter2 + firstRow * t_.bufferRowStride +
                    within;
        const uint64_t rows = t_.segments > 1 ? 1 : MinU64(t_.rowsPerChunk, t_.rows - firstRow);
        const uint64_t bytes = t_.segments > 1 ? MinU64(t_.chunkBytes, t_.rowBytes - within) : t_.rowBytes;
        const bool gather = t_.gather != 0;
        AscendC::LocalTensor<uint8_t> ub = queue_.AllocTensor<uint8_t>();
        if (gather) {
            ReadRows(ub, cache_[cacheAt], t_.cacheRowStride, rows, bytes);
        } else {
            ReadRows(ub, buffer_[bufferAt], t_.bufferRowStride, rows, bytes);
        }
        queue_.EnQue(ub);
        ub = queue_.DeQue<uint8_t>();
        if (gather) {
            WriteRows(buffer_[bufferAt], ub, t_.bufferRowStride, rows, bytes);
        } else {
            WriteRows(cache_[cacheAt], ub, t_.cacheRowStride, rows, bytes);
        }
        queue_.FreeTensor(ub);
    }

    TransferTiling t_;
    AscendC::GlobalTensor<uint64_t> table_;
    AscendC::GlobalTensor<uint8_t> cache_;
    AscendC::GlobalTensor<uint8_t> buffer_;
    StagedIndex ids_;
    CopyQueue queue_;
};

}  // namespace ascend_kv

extern "C" __global__ __aicore__ void transfer_blocks_kernel(
    GM_ADDR cacheTable,  // [numCaches, kTransferCacheWords] uint64: each cache's address and span
    GM_ADDR buffer,      // the buffer [KV, L, n, *block] (gather: written; scatter: read)
    GM_ADDR ids,         // [blocks] int32/int64 block ids
    GM_ADDR tiling)      // [1] ascend_kv::TransferTiling
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    ascend_kv::RunKernel<ascend_kv::TransferBlocksKernel>(tiling, cacheTable, buffer, ids);
}
