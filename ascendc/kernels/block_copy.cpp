/*
 * Whole-block copies (ATB BlockCopyOperation, vLLM's copy_blocks) over a table of caches, for the
 * vector cores of Atlas A2/A3: one launch copies every layer's key and value caches.
 *
 * Reads the raw src, dst and cumSum index tensors (int32 or int64). Copy j takes source i, the
 * first with cumSum[i] > j (without cumSum, i = j); block src[i] of every cache goes to block dst[j]
 * when i < pairs and both blocks are in [0, numBlocks). Other copies are skipped, so index values
 * nobody checked never make the kernel touch memory outside the caches.
 *
 * Work split: items (cache, copy, chunk) numbered in that order, an even share of consecutive
 * items per core. A block of a cache is `rows` rows of rowBytes (any size; DataCopyPad moves exact
 * bytes), rowStride apart; a chunk is as many whole rows as fill a UB buffer (one strided
 * DataCopyPad in, one out), or one buffer-sized segment of a row larger than a buffer. Offsets are
 * 64-bit. Chunks of distinct copies never meet when no block is both a source and a destination and
 * no destination is named twice (the host checks it for host indices).
 *
 * Simultaneous mode (tiling.simultaneous): items are (cache, chunk), and the core that owns chunk
 * k of a cache reads chunk k of every copy's source into its own UB slot (chunkBytes each, one
 * buffer of copies slots), then writes every slot to its destination. No other core touches
 * chunk k of that cache, so every source byte is read before any destination byte is written,
 * whatever the copies (cycles, chains, self-copies); the UB holds the staging, never GM.
 */
#include "copy_common.h"

namespace ascend_kv {

/// One cache of the table, as the words the host wrote (see kBlockCopy* in tiling.h).
struct BlockCache {
    AscendC::GlobalTensor<uint8_t> gm;
    uint64_t blockStride = 0;
    uint64_t rowStride = 0;
    uint64_t rows = 0;
    uint64_t rowBytes = 0;
    uint64_t rowsPerChunk = 1;
    uint64_t segments = 1;
    uint64_t chunks = 0;
};

class BlockCopyKernel {
public:
    using Tiling = BlockCopyTiling;

    __aicore__ inline void Init(GM_ADDR cacheTable, GM_ADDR src, GM_ADDR dst, GM_ADDR cumSum, const Tiling& tiling,
                                AscendC::TPipe* pipe)
    {
        t_ = tiling;
        table_.SetGlobalBuffer(reinterpret_cast<__gm__ uint64_t*>(cacheTable), t_.numCaches * kBlockCopyCacheWords);
        src_.Init(pipe, src, t_.pairs, t_.srcElemBytes, t_.stageBytes);
        dst_.Init(pipe, dst, t_.copies, t_.dstElemBytes, t_.stageBytes);
        if (t_.cumElemBytes != 0) {
            cumSum_.Init(pipe, cumSum, t_.pairs, t_.cumElemBytes, t_.stageBytes);
        }
        if (t_.simultaneous != 0) {
            pipe->InitBuffer(queue_, 1, static_cast<uint32_t>(t_.chunkBytes * t_.copies));
        } else {
            pipe->InitBuffer(queue_, kCopyBuffers, static_cast<uint32_t>(t_.chunkBytes));
        }
    }

    /// The items of core `core` (< usedCores).
    __aicore__ inline void Process(uint64_t core)
    {
        const Range mine = CoreShare(t_.items, core, t_.usedCores);
        uint64_t cache = 0;
        uint64_t first = 0;  // the first item of `cache`
        Load(cache);
        if (t_.simultaneous != 0) {
            for (uint64_t item = mine.begin; item < mine.end; ++item) {
                while (item >= first + cache_.chunks) {
                    first += cache_.chunks;
                    Load(++cache);
                }
                CopyChunkOfEveryCopy(item - first);
            }
            return;
        }
        for (uint64_t item = mine.begin; item < mine.end; ++item) {
            while (item >= first + t_.copies * cache_.chunks) {
                first += t_.copies * cache_.chunks;
                Load(++cache);
            }
            const uint64_t copy = (item - first) / cache_.chunks;
            uint64_t from = 0;
            uint64_t to = 0;
            if (Blocks(copy, from, to)) {
                CopyChunk(from, to, (item - first) - copy * cache_.chunks);
            }
        }
    }

private:
    /// Cache `c` of the table into cache_ (a few scalar reads of GM).
    __aicore__ inline void Load(uint64_t c)
    {
        if (c >= t_.numCaches) {
            cache_.chunks = 0;
            return;
        }
        const uint64_t at = c * kBlockCopyCacheWords;
        const uint64_t address = table_.GetValue(at + kBlockCopyAddress);
        cache_.gm.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(address), table_.GetValue(at + kBlockCopySpan));
        cache_.blockStride = table_.GetValue(at + kBlockCopyBlockStride);
        cache_.rowStride = table_.GetValue(at + kBlockCopyRowStride);
        cache_.rows = table_.GetValue(at + kBlockCopyRows);
        cache_.rowBytes = table_.GetValue(at + kBlockCopyRowBytes);
        cache_.rowsPerChunk = table_.GetValue(at + kBlockCopyRowsPerChunk);
        cache_.segments = table_.GetValue(at + kBlockCopySegments);
        cache_.chunks = table_.GetValue(at + kBlockCopyChunks);
    }

    /// The source and destination blocks of copy `copy`, or false when it is skipped. The source
    /// is found by a scan that moves forward while the copies go up (and restarts with a new cache).
    __aicore__ inline bool Blocks(uint64_t copy, uint64_t& from, uint64_t& to)
    {
        uint64_t pair = copy;
        if (t_.cumElemBytes != 0) {
            if (copy < lastCopy_) {
                pair_ = 0;
            }
            lastCopy_ = copy;
            while (pair_ < t_.pairs && cumSum_.Get(pair_) <= static_cast<int64_t>(copy)) {
                ++pair_;
            }
            pair = pair_;
        }
        if (pair >= t_.pairs) {
            return false;
        }
        const int64_t s = src_.Get(pair);
        const int64_t d = dst_.Get(copy);
        if (s < 0 || d < 0 || static_cast<uint64_t>(s) >= t_.numBlocks || static_cast<uint64_t>(d) >= t_.numBlocks) {
            return false;
        }
        from = static_cast<uint64_t>(s);
        to = static_cast<uint64_t>(d);
        return true;
    }

    /// Where chunk `k` of a block lies: its byte offset in the block, rows and bytes per row.
    __aicore__ inline void ChunkAt(uint64_t k, uint64_t& offset, uint64_t& rows, uint64_t& bytes) const
    {
        bytes = cache_.rowBytes;
        if (cache_.segments > 1) {
            const uint64_t row = k / cache_.segments;
            const uint64_t segment = k - row * cache_.segments;
            offset = row * cache_.rowStride + segment * t_.chunkBytes;
            rows = 1;
            bytes = MinU64(t_.chunkBytes, cache_.rowBytes - segment * t_.chunkBytes);
        } else {
            const uint64_t row = k * cache_.rowsPerChunk;
            offset = row * cache_.rowStride;
            rows = MinU64(cache_.rowsPerChunk, cache_.rows - row);
        }
    }

    /// Simultaneous mode: chunk `k` of every copy's source into the copy's UB slot, then every slot
    /// to its destination (skipped copies read and write nothing).
    __aicore__ inline void CopyChunkOfEveryCopy(uint64_t k)
    {
        uint64_t offset = 0;
        uint64_t rows = 0;
        uint64_t bytes = 0;
        ChunkAt(k, offset, rows, bytes);
        AscendC::LocalTensor<uint8_t> buffer = queue_.AllocTensor<uint8_t>();
        uint64_t from = 0;
        uint64_t to = 0;
        for (uint64_t copy = 0; copy < t_.copies; ++copy) {
            if (Blocks(copy, from, to)) {
                AscendC::LocalTensor<uint8_t> slot = buffer[static_cast<uint32_t>(copy * t_.chunkBytes)];
                ReadRows(slot, cache_.gm[from * cache_.blockStride + offset], cache_.rowStride, rows, bytes);
            }
        }
        queue_.EnQue(buffer);
        buffer = queue_.DeQue<uint8_t>();
        for (uint64_t copy = 0; copy < t_.copies; ++copy) {
            if (Blocks(copy, from, to)) {
                AscendC::LocalTensor<uint8_t> slot = buffer[static_cast<uint32_t>(copy * t_.chunkBytes)];
                WriteRows(cache_.gm[to * cache_.blockStride + offset], slot, cache_.rowStride, rows, bytes);
            }
        }
        queue_.FreeTensor(buffer);
    }

    /// Chunk `k` of block `from` to the same chunk of block `to`, through one UB buffer.
    __aicore__ inline void CopyChunk(uint64_t from, uint64_t to, uint64_t k)
    {
        uint64_t offset = 0;
        uint64_t rows = 0;
        uint64_t bytes = 0;
        ChunkAt(k, offset, rows, bytes);
        AscendC::LocalTensor<uint8_t> buffer = queue_.AllocTensor<uint8_t>();
        ReadRows(buffer, cache_.gm[from * cache_.blockStride + offset], cache_.rowStride, rows, bytes);
        queue_.EnQue(buffer);
        buffer = queue_.DeQue<uint8_t>();
        WriteRows(cache_.gm[to * cache_.blockStride + offset], buffer, cache_.rowStride, rows, bytes);
        queue_.FreeTensor(buffer);
    }

    BlockCopyTiling t_;
    AscendC::GlobalTensor<uint64_t> table_;
    BlockCache cache_;
    StagedIndex src_;
    StagedIndex dst_;
    StagedIndex cumSum_;
    uint64_t pair_ = 0;
    uint64_t lastCopy_ = 0;
    CopyQueue queue_;
};

}  // namespace ascend_kv

extern "C" __global__ __aicore__ void block_copy_kernel(
    GM_ADDR cacheTable,  // [numCaches, kBlockCopyCacheWords] uint64: each cache's address and byte geometry
    GM_ADDR src,         // [pairs] int32/int64 source blocks
    GM_ADDR dst,         // [copies] int32/int64 destination blocks
    GM_ADDR cumSum,      // [pairs] int32/int64 running ends of each source's copies; null: copy j takes src[j]
    GM_ADDR tiling)      // [1] ascend_kv::BlockCopyTiling
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    ascend_kv::RunKernel<ascend_kv::BlockCopyKernel>(tiling, cacheTable, src, dst, cumSum);
}
