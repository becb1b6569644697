/*
 * Paged cache load (ATB PagedCacheLoadOperation), ND and NZ, for the vector cores of Atlas A2/A3.
 *
 * Reads the raw index tensors (block_table, context_lens, an optional seq_starts; int32 or int64
 * each). Batch entry b holds n_b = clamp(len_b, 0, R) tokens (R = the larger output's rows;
 * len_b = context_lens[b], or context_lens[b+1] - context_lens[b] in cumsum mode); token j sits in
 * block block_table[b, floor(seq_starts[b] / blockSize) + j / blockSize] at slot j % blockSize
 * and goes to output row first_b + j (first_b: the running sum of n, or context_lens[b] in cumsum
 * mode). Out-of-range columns, block ids and output rows are skipped.
 *
 * Work split (paged_walk.h): every core scans the lengths (staged into UB) for the range of output rows the
 * entries write, takes an even share of those rows, and scans again for the entries that write
 * into its share. A row several entries write (cumsum mode with decreasing context_lens) thus
 * has one core, which writes it in entry order (the last entry's token stays). A core walks its
 * rows as runs that share one cache block:
 *   ND: a run's rows are one strided run in the cache and in the output (contiguous when dense).
 *   NZ: a token's row is T/E 32-byte pieces pieceStride bytes apart in the cache; each token is
 *       gathered with one strided DataCopyPad (split at 4095 pieces) into UB, several tokens per
 *       buffer, then stored to the output rows. A row larger than a buffer moves in segments.
 */
#include "paged_walk.h"

namespace ascend_kv {

class PagedLoadKernel {
public:
    using Tiling = PagedLoadTiling;

    __aicore__ inline void Init(GM_ADDR keyCache, GM_ADDR valueCache, GM_ADDR blockTable, GM_ADDR contextLens,
                                GM_ADDR seqStarts, GM_ADDR key, GM_ADDR value, const Tiling& tiling,
                                AscendC::TPipe* pipe)
    {
        t_ = tiling;
        key_.Init(keyCache, key, t_.key);
        value_.Init(valueCache, value, t_.value);
        walk_.Init(blockTable, contextLens, seqStarts, t_, pipe);
        pipe->InitBuffer(queue_, kCopyBuffers, static_cast<uint32_t>(t_.chunkBytes));
    }

    /// The work of core `core` (< usedCores).
    __aicore__ inline void Process(uint64_t core) { walk_.Walk(core, *this); }

    /// The run of `tokens` tokens from slot `slot` of block `block` to output rows outRow.. of one side.
    __aicore__ inline void LoadRun(bool key, uint64_t block, uint64_t slot, uint64_t outRow, uint64_t tokens)
    {
        LoadRun(key ? key_ : value_, key ? t_.keyRows : t_.valueRows, block, slot, outRow, tokens);
    }

private:
    /// `tokens` tokens from slot `slot` of cache block `block` to output rows outRow.. (those of the
    /// `outRows` that exist).
    __aicore__ inline void LoadRun(CacheSide& pair, uint64_t outRows, uint64_t block, uint64_t slot, uint64_t outRow,
                                   uint64_t tokens)
    {
        if (outRow >= outRows) {
            return;
        }
        tokens = MinU64(tokens, outRows - outRow);
        const uint64_t tokenAt = block * pair.blockStride + slot * pair.slotStride;
        if (t_.layout == kLayoutNd) {
            CopyRows(queue_, pair.rows[outRow * pair.rowStride], pair.rowStride, pair.cache[tokenAt], pair.slotStride,
                     tokens, pair.rowBytes, t_.chunkBytes);
        } else {
            GatherNz(pair, tokenAt, outRow, tokens);
        }
    }

    /// NZ: `tokens` consecutive slots, the first at cache byte tokenAt, to output rows outRow.., through UB.
    __aicore__ inline void GatherNz(CacheSide& pair, uint64_t tokenAt, uint64_t outRow, uint64_t tokens)
    {
        const uint64_t rowPieces = pair.rowBytes / kBlockBytes;
        const uint64_t bufferPieces = t_.chunkBytes / kBlockBytes;
        // Whole tokens per buffer when a row fits, else one token in segments of a buffer.
        const uint64_t segmentPieces = MinU64(rowPieces, bufferPieces);
        const uint64_t tokensPerBuffer = rowPieces <= bufferPieces ? MinU64(bufferPieces / rowPieces, kMaxBlockCount) : 1;
        for (uint64_t done = 0; done < tokens;) {
            const uint64_t group = MinU64(tokensPerBuffer, tokens - done);
            for (uint64_t piece = 0; piece < rowPieces; piece += segmentPieces) {
                const uint64_t pieces = MinU64(segmentPieces, rowPieces - piece);
                AscendC::LocalTensor<uint8_t> buffer = queue_.AllocTensor<uint8_t>();
                for (uint64_t k = 0; k < group; ++k) {
                    const uint64_t first = tokenAt + (done + k) * pair.slotStride + piece * pair.pieceStride;
                    AscendC::LocalTensor<uint8_t> target = buffer[static_cast<uint32_t>(k * pieces * kBlockBytes)];
                    ReadPieces(pair, target, first, pieces);
                }
                queue_.EnQue(buffer);
                buffer = queue_.DeQue<uint8_t>();
                const uint64_t pieceBytes = pieces * kBlockBytes;
                WriteRows(pair.rows[(outRow + done) * pair.rowStride + piece * kBlockBytes], buffer, pair.rowStride,
                          group, pieceBytes);
                queue_.FreeTensor(buffer);
            }
            done += group;
        }
    }

    /// `pieces` 32-byte pieces of one token, pieceStride bytes apart from cache byte `first`, into UB.
    __aicore__ inline void ReadPieces(CacheSide& pair, AscendC::LocalTensor<uint8_t>& target, uint64_t first,
                                      uint64_t pieces)
    {
        for (uint64_t p = 0; p < pieces;) {
            const uint64_t count = MinU64(kMaxBlockCount, pieces - p);
            AscendC::LocalTensor<uint8_t> part = target[static_cast<uint32_t>(p * kBlockBytes)];
            ReadRows(part, pair.cache[first + p * pair.pieceStride], pair.pieceStride, count, kBlockBytes);
            p += count;
        }
    }

    PagedLoadTiling t_;
    CacheSide key_;
    CacheSide value_;
    PagedWalk walk_;
    CopyQueue queue_;
};

}  // namespace ascend_kv

extern "C" __global__ __aicore__ void paged_cache_load_kernel(
    GM_ADDR keyCache,     // ND [numBlocks, blockSize, keyRowBytes] / NZ [numBlocks, keyRowBytes/32, blockSize, 32] bytes, strided
    GM_ADDR valueCache,   // as keyCache, with valueRowBytes
    GM_ADDR blockTable,   // [batch, maxBlocks] int32/int64: cache block ids
    GM_ADDR contextLens,  // [batch] (or [batch + 1] cumulative) int32/int64
    GM_ADDR seqStarts,    // [batch] int32/int64 token offsets into each block-table row, or null
    GM_ADDR key,          // [keyRows, keyRowBytes] bytes, rows keyRowStride apart, written
    GM_ADDR value,        // [valueRows, valueRowBytes] bytes, rows valueRowStride apart, written
    GM_ADDR tiling)       // [1] ascend_kv::PagedLoadTiling
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    ascend_kv::RunKernel<ascend_kv::PagedLoadKernel>(tiling, keyCache, valueCache, blockTable, contextLens, seqStarts,
                                                     key, value);
}
