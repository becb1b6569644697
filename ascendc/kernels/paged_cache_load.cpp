/*
 * Paged cache load (ATB PagedCacheLoadOperation), ND and NZ, for the vector cores of Atlas A2/A3.
 *
 * Token j of batch entry b (0 <= j < lens[b]) sits in block block_table[b, first_column[b] +
 * j / blockSize] at slot j % blockSize and goes to output row out_start[b] + j, for the key and
 * the value cache (each with its own row size and dtype). The tokens, numbered in batch order,
 * are split evenly over the cores. A core walks its tokens as runs that share one cache block:
 *   ND: the run's rows are contiguous in the cache and in the output: one large chunked copy.
 *   NZ: a token's row is T/E 32-byte pieces, blockSize * 32 bytes apart in the cache; each token
 *       is gathered with one strided copy (blockCount = pieces, blockLen = 1, gap = blockSize - 1,
 *       split at the 4095-block limit) into UB, several tokens per buffer, and the buffer is
 *       stored to the output rows with one contiguous copy. A row larger than a buffer moves in
 *       segments.
 * Metadata and block-table entries are staged into UB. A token whose block id, block-table
 * column or output row is out of range is skipped.
 */
#include "copy_common.h"

namespace ascend_kv {

/// One cache (key or value) and its output.
struct CachePair {
    AscendC::GlobalTensor<uint8_t> cache;  // ND [numBlocks, blockSize, rowBytes], NZ [numBlocks, rowBytes/32, blockSize, 32]
    AscendC::GlobalTensor<uint8_t> out;    // [rows, rowBytes]
    uint64_t rowBytes;
    uint64_t rows;
};

class PagedLoadKernel {
public:
    __aicore__ inline void Init(GM_ADDR keyCache, GM_ADDR valueCache, GM_ADDR blockTable, GM_ADDR lens,
                                GM_ADDR outStart, GM_ADDR firstColumn, GM_ADDR key, GM_ADDR value,
                                const PagedLoadTiling& tiling, AscendC::TPipe* pipe)
    {
        t_ = tiling;
        const uint64_t blockTokens = t_.numBlocks * t_.blockSize;
        InitPair(key_, keyCache, key, t_.keyRowBytes, t_.keyRows, blockTokens);
        InitPair(value_, valueCache, value, t_.valueRowBytes, t_.valueRows, blockTokens);
        lens_.Init(pipe, lens, t_.batch, t_.metaWindow);
        outStart_.Init(pipe, outStart, t_.batch, t_.metaWindow);
        firstColumn_.Init(pipe, firstColumn, t_.batch, t_.metaWindow);
        table_.Init(pipe, blockTable, t_.batch * t_.maxBlocks, t_.tableWindow);
        pipe->InitBuffer(queue_, kCopyBuffers, static_cast<uint32_t>(t_.chunkBytes));
    }

    __aicore__ inline void Process()
    {
        const uint64_t core = static_cast<uint64_t>(AscendC::GetBlockIdx());
        if (core >= t_.usedCores) {
            return;
        }
        const TokenRange mine = CoreTokens(core, t_.tokensPerCore, t_.remainder);
        uint64_t first = 0;  // number of entry b's first token
        for (uint64_t b = 0; b < t_.batch && first < mine.end; ++b) {
            const uint64_t count = ClampCount(lens_.Get(b), t_.numTokens);
            const uint64_t lo = MaxU64(first, mine.begin);
            const uint64_t hi = MinU64(first + count, mine.end);
            if (lo < hi) {
                LoadEntry(b, lo - first, hi - first);
            }
            first += count;
        }
    }

private:
    __aicore__ inline static void InitPair(CachePair& pair, GM_ADDR cache, GM_ADDR out, uint64_t rowBytes,
                                           uint64_t rows, uint64_t blockTokens)
    {
        pair.cache.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(cache), blockTokens * rowBytes);
        pair.out.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(out), rows * rowBytes);
        pair.rowBytes = rowBytes;
        pair.rows = rows;
    }

    /// Tokens [lo, hi) of batch entry b, one block-table column at a time.
    __aicore__ inline void LoadEntry(uint64_t b, uint64_t lo, uint64_t hi)
    {
        const int64_t outStart = outStart_.Get(b);
        const int64_t firstColumn = firstColumn_.Get(b);
        for (uint64_t j = lo; j < hi;) {
            const uint64_t c = j / t_.blockSize;
            const uint64_t runEnd = MinU64(hi, (c + 1) * t_.blockSize);
            uint64_t column = 0;
            if (IndexInRange(firstColumn, c, t_.maxBlocks, column)) {
                const int64_t block = table_.Get(b * t_.maxBlocks + column);
                if (block >= 0 && static_cast<uint64_t>(block) < t_.numBlocks) {
                    const uint64_t blockFirstToken = c * t_.blockSize;
                    LoadRun(key_, static_cast<uint64_t>(block), blockFirstToken, outStart, j, runEnd);
                    LoadRun(value_, static_cast<uint64_t>(block), blockFirstToken, outStart, j, runEnd);
                }
            }
            j = runEnd;
        }
    }

    /// Tokens [lo, hi) of one entry, all in cache block `block` (token j at slot j - blockFirstToken).
    __aicore__ inline void LoadRun(CachePair& pair, uint64_t block, uint64_t blockFirstToken, int64_t outStart,
                                   uint64_t lo, uint64_t hi)
    {
        ClipRun(lo, hi, outStart, pair.rows);
        if (lo >= hi) {
            return;
        }
        const uint64_t slot = lo - blockFirstToken;
        const uint64_t outRow = static_cast<uint64_t>(outStart) + lo;
        if (t_.layout == kLayoutNd) {
            const uint64_t cacheRow = block * t_.blockSize + slot;
            CopyContiguous(queue_, pair.out[outRow * pair.rowBytes], pair.cache[cacheRow * pair.rowBytes],
                           (hi - lo) * pair.rowBytes, t_.chunkBytes);
        } else {
            GatherNz(pair, block, slot, outRow, hi - lo);
        }
    }

    /// NZ: `tokens` tokens from slot `slot` of `block` to output rows outRow.., through UB.
    __aicore__ inline void GatherNz(CachePair& pair, uint64_t block, uint64_t slot, uint64_t outRow,
                                    uint64_t tokens)
    {
        const uint64_t rowPieces = pair.rowBytes / kBlockBytes;
        const uint64_t bufferPieces = t_.chunkBytes / kBlockBytes;
        // Whole tokens per buffer when a row fits, else one token in segments of a buffer.
        const uint64_t segmentPieces = MinU64(rowPieces, bufferPieces);
        const uint64_t tokensPerBuffer = rowPieces <= bufferPieces ? bufferPieces / rowPieces : 1;
        const uint64_t blockBase = block * t_.blockSize * pair.rowBytes;
        for (uint64_t done = 0; done < tokens;) {
            const uint64_t group = MinU64(tokensPerBuffer, tokens - done);
            for (uint64_t piece = 0; piece < rowPieces; piece += segmentPieces) {
                const uint64_t pieces = MinU64(segmentPieces, rowPieces - piece);
                AscendC::LocalTensor<uint8_t> buffer = queue_.AllocTensor<uint8_t>();
                for (uint64_t k = 0; k < group; ++k) {
                    const uint64_t first = blockBase + (piece * t_.blockSize + slot + done + k) * kBlockBytes;
                    GatherToken(pair, buffer, k * pieces * kBlockBytes, first, pieces);
                }
                queue_.EnQue(buffer);
                buffer = queue_.DeQue<uint8_t>();
                AscendC::DataCopy(pair.out[(outRow + done) * pair.rowBytes + piece * kBlockBytes], buffer,
                                  static_cast<uint32_t>(group * pieces * kBlockBytes));
                queue_.FreeTensor(buffer);
            }
            done += group;
        }
    }

    /// `pieces` 32-byte pieces of one token, the first at cache byte `first`, the next ones
    /// blockSize * 32 bytes apart, to UB bytes [ubOffset, ubOffset + pieces * 32).
    __aicore__ inline void GatherToken(CachePair& pair, AscendC::LocalTensor<uint8_t>& buffer, uint64_t ubOffset,
                                       uint64_t first, uint64_t pieces)
    {
        for (uint64_t p = 0; p < pieces;) {
            const uint64_t count = MinU64(t_.gatherBlocks, pieces - p);
            const uint16_t gap = count > 1 ? static_cast<uint16_t>(t_.blockSize - 1) : 0;
            AscendC::DataCopyParams params(static_cast<uint16_t>(count), 1, gap, 0);
            AscendC::DataCopy(buffer[static_cast<uint32_t>(ubOffset + p * kBlockBytes)],
                              pair.cache[first + p * t_.blockSize * kBlockBytes], params);
            p += count;
        }
    }

    PagedLoadTiling t_;
    CachePair key_;
    CachePair value_;
    StagedInt64 lens_;
    StagedInt64 outStart_;
    StagedInt64 firstColumn_;
    StagedInt64 table_;
    CopyQueue queue_;
};

}  // namespace ascend_kv

extern "C" __global__ __aicore__ void paged_cache_load_kernel(
    GM_ADDR keyCache,     // ND [numBlocks, blockSize, keyRowBytes] / NZ [numBlocks, keyRowBytes/32, blockSize, 32] bytes
    GM_ADDR valueCache,   // ND [numBlocks, blockSize, valueRowBytes] / NZ [numBlocks, valueRowBytes/32, blockSize, 32] bytes
    GM_ADDR blockTable,   // [batch, maxBlocks] int64: cache block ids
    GM_ADDR lens,         // [batch] int64: tokens per batch entry
    GM_ADDR outStart,     // [batch] int64: first output row of each entry
    GM_ADDR firstColumn,  // [batch] int64: block-table column of each entry's first token
    GM_ADDR key,          // [keyRows, keyRowBytes] bytes, written
    GM_ADDR value,        // [valueRows, valueRowBytes] bytes, written
    GM_ADDR tiling)       // [1] ascend_kv::PagedLoadTiling
{
    ascend_kv::PagedLoadTiling t;
    ascend_kv::LoadTiling(tiling, t);
    AscendC::TPipe pipe;
    ascend_kv::PagedLoadKernel kernel;
    kernel.Init(keyCache, valueCache, blockTable, lens, outStart, firstColumn, key, value, t, &pipe);
    kernel.Process();
}
