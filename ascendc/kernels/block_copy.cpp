/*
 * Whole-block copies (ATB BlockCopyOperation, vLLM's copy_blocks, copy_state_slots) over a table of
 * caches, for the vector cores of Atlas A2/A3: one launch copies every layer's key and value caches
 * (or every state of every layer).
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
 *
 * Transfer modes (tiling.transfer, gather_state_slots / scatter_state_slots): copy j moves block
 * src[j] of every cache to (gather) or from (scatter) row j of a buffer, where the block's rows lie
 * back to back from the cache's bufferOffset. The same items and chunks; only a chunk's other side
 * is the buffer, rows rowBytes apart there. Out-of-range src[j] are skipped.
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
    uint64_t bufferOffset = 0;
};

/// Where chunk k of a block lies: its first row, its byte offset within that row, rows and bytes per row.
struct Chunk {
    uint64_t row;
    uint64_t within;
    uint64_t rows;
    uint64_t bytes;
};

class BlockCopyKernel {
public:
    using Tiling = BlockCopyTiling;

    __aicore__ inline void Init(GM_ADDR cacheTable, GM_ADDR src, GM_ADDR dst, GM_ADDR cumSum, GM_ADDR buffer,
                                const Tiling& tiling, AscendC::TPipe* pipe)
    {
        t_ = tiling;
        table_.SetGlobalBuffer(reinterpret_cast<__gm__ uint64_t*>(cacheTable), t_.numCaches * kBlockCopyCacheWords);
        src_.Init(pipe, src, t_.pairs, t_.srcElemBytes, t_.stageBytes);
        if (t_.transfer == kBlockCopyWithin) {
            dst_.Init(pipe, dst, t_.copies, t_.dstElemBytes, t_.stageBytes);
        } else {
            buffer_.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(buffer), t_.bufferSpan);
        }
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
                CopyChunk(copy, from, to, (item - first) - copy * cache_.chunks);
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
        cache_.bufferOffset = table_.GetValue(at + kBlockCopyBufferOffset);
    }

    /// The source and destination blocks of copy `copy`, or false when it is skipped. The source
    /// is found by a scan that moves forward while the copies go up (and restarts with a new cache).
    __aicore__ inline bool Blocks(uint64_t copy, uint64_t& from, uint64_t& to)
    {
        if (t_.transfer != kBlockCopyWithin) {  // copy j: block src[j] and buffer row j
            const int64_t b = src_.Get(copy);
            if (b < 0 || static_cast<uint64_t>(b) >= t_.numBlocks) {
                return false;
            }
            from = static_cast<uint64_t>(b);
            to = from;
            return true;
        }
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

    /// Where chunk `k` of a block of the current cache lies.
    __aicore__ inline Chunk ChunkAt(uint64_t k) const
    {
        Chunk chunk{0, 0, 1, cache_.rowBytes};
        if (cache_.segments > 1) {
            chunk.row = k / cache_.segments;
            chunk.within = (k - chunk.row * cache_.segments) * t_.chunkBytes;
            chunk.bytes = MinU64(t_.chunkBytes, cache_.rowBytes - chunk.within);
        } else {
            chunk.row = k * cache_.rowsPerChunk;
            chunk.rows = MinU64(cache_.rowsPerChunk, cache_.rows - chunk.row);
        }
        return chunk;
    }

    /// Byte offset of `chunk` in a block of the current cache.
    __aicore__ inline uint64_t InBlock(const Chunk& chunk) const { return chunk.row * cache_.rowStride + chunk.within; }

    /// Simultaneous mode: chunk `k` of every copy's source into the copy's UB slot, then every slot
    /// to its destination (skipped copies read and write nothing).
    __aicore__ inline void CopyChunkOfEveryCopy(uint64_t k)
    {
        const Chunk chunk = ChunkAt(k);
        const uint64_t offset = InBlock(chunk);
        const uint64_t rows = chunk.rows;
        const uint64_t bytes = chunk.bytes;
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

    /// Chunk `k` of copy `copy`, through one UB buffer: of block `from` to the same chunk of block
    /// `to`, or in a transfer mode between block `from` and the chunk's dense bytes in buffer row `copy`.
    __aicore__ inline void CopyChunk(uint64_t copy, uint64_t from, uint64_t to, uint64_t k)
    {
        const Chunk chunk = ChunkAt(k);
        const uint64_t offset = InBlock(chunk);
        const uint64_t rowAt = copy * t_.bufferRowStride + cache_.bufferOffset + chunk.row * cache_.rowBytes + chunk.within;
        AscendC::LocalTensor<uint8_t> buffer = queue_.AllocTensor<uint8_t>();
        if (t_.transfer == kBlockCopyScatter) {
            ReadRows(buffer, buffer_[rowAt], cache_.rowBytes, chunk.rows, chunk.bytes);
        } else {
            ReadRows(buffer, cache_.gm[from * cache_.blockStride + offset], cache_.rowStride, chunk.rows, chunk.bytes);
        }
        queue_.EnQue(buffer);
        buffer = queue_.DeQue<uint8_t>();
        if (t_.transfer == kBlockCopyGather) {
            WriteRows(buffer_[rowAt], buffer, cache_.rowBytes, chunk.rows, chunk.bytes);
        } else {
            WriteRows(cache_.gm[to * cache_.blockStride + offset], buffer, cache_.rowStride, chunk.rows, chunk.bytes);
        }
        queue_.FreeTensor(buffer);
    }

    BlockCopyTiling t_;
    AscendC::GlobalTensor<uint64_t> table_;
    AscendC::GlobalTensor<uint8_t> buffer_;
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
    GM_ADDR dst,         // [copies] int32/int64 destination blocks; null in the transfer modes
    GM_ADDR cumSum,      // [pairs] int32/int64 running ends of each source's copies; null: copy j takes src[j]
    GM_ADDR buffer,      // transfer modes: the buffer [copies, row bytes] (gather: written); otherwise null
    GM_ADDR tiling)      // [1] ascend_kv::BlockCopyTiling
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    ascend_kv::RunKernel<ascend_kv::BlockCopyKernel>(tiling, cacheTable, src, dst, cumSum, buffer);
}
