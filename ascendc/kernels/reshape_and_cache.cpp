/*
 * Paged cache write (ATB ReshapeAndCacheOperation), ND and NZ, for the vector cores of Atlas A2/A3.
 *
 * Reads the raw slot_mapping (int32 or int64). Token i (i < tokens) goes to slot
 * s = slot_mapping[i] of the key cache (and of the value cache) when 0 <= s < numBlocks *
 * blockSize: block s / blockSize, position s % blockSize. Other slots (padding, garbage) are
 * skipped, so slot values nobody checked never make the kernel touch memory outside its tensors.
 *
 * Work split: every cache slot has one writing core. The slots of a block are cut into stripes of
 * stripeSlots positions; stripe j of block b belongs to core (b * blockStripes + j) % usedCores
 * (blockStripes is coprime to usedCores, so consecutive blocks start on different cores). Each core
 * scans all of slot_mapping in token order, cuts it into runs (consecutive tokens bound for
 * consecutive slots of one stripe) and copies the runs it owns: the rows of up to a UB buffer of
 * tokens come in with one strided DataCopyPad (rows 32-byte aligned in UB), then
 *   ND: go out as one strided run. Rows may be any number of bytes: DataCopyPad moves exactly a
 *       row's bytes both ways.
 *   NZ: a token's row is T/E 32-byte pieces pieceStride bytes apart in the cache: one strided
 *       DataCopyPad per token (split at 4095 pieces).
 * A row larger than a buffer moves in segments. A slot named twice (a broken precondition) is
 * written by its one core, whose stores leave in token order on one pipe (MTE3): the slot ends up
 * with the last token that names it.
 */
#include "copy_common.h"

namespace ascend_kv {

class ReshapeAndCacheKernel {
public:
    using Tiling = ReshapeTiling;

    __aicore__ inline void Init(GM_ADDR key, GM_ADDR value, GM_ADDR keyCache, GM_ADDR valueCache,
                                GM_ADDR slotMapping, const Tiling& tiling, AscendC::TPipe* pipe)
    {
        t_ = tiling;
        key_.Init(keyCache, key, t_.key);
        if (t_.hasValue != 0) {
            value_.Init(valueCache, value, t_.value);
        }
        slotCount_ = t_.numBlocks * t_.blockSize;
        slots_.Init(pipe, slotMapping, t_.tokens, t_.slotElemBytes, t_.stageBytes);
        pipe->InitBuffer(queue_, kCopyBuffers, static_cast<uint32_t>(t_.chunkBytes));
    }

    /// The work of core `core` (< usedCores).
    __aicore__ inline void Process(uint64_t core)
    {
        for (uint64_t i = 0; i < t_.tokens;) {
            uint64_t slot = 0;
            if (!SlotOf(i, slot)) {
                ++i;
                continue;
            }
            const uint64_t block = slot / t_.blockSize;
            const uint64_t position = slot - block * t_.blockSize;
            const uint64_t stripe = position / t_.stripeSlots;
            const uint64_t stripeEnd = MinU64((stripe + 1) * t_.stripeSlots, t_.blockSize);
            const uint64_t run = RunLength(i, slot, MinU64(t_.tokens - i, stripeEnd - position));
            if ((block * t_.blockStripes + stripe) % t_.usedCores == core) {
                CopyRun(key_, i, block, position, run);
                if (t_.hasValue != 0) {
                    CopyRun(value_, i, block, position, run);
                }
            }
            i += run;
        }
    }

private:
    /// The slot token i goes to, or false when slot_mapping[i] is padding or outside the caches.
    __aicore__ inline bool SlotOf(uint64_t i, uint64_t& slot)
    {
        const int64_t s = slots_.Get(i);
        if (s < 0 || static_cast<uint64_t>(s) >= slotCount_) {
            return false;
        }
        slot = static_cast<uint64_t>(s);
        return true;
    }

    /// Tokens from token i (bound for `slot`), at most `limit`, bound for consecutive slots.
    __aicore__ inline uint64_t RunLength(uint64_t i, uint64_t slot, uint64_t limit)
    {
        uint64_t run = 1;
        while (run < limit && slots_.Get(i + run) == static_cast<int64_t>(slot + run)) {
            ++run;
        }
        return run;
    }

    /// The `count` tokens from token `first` into positions from `position` of `block` of one
    /// cache: as many tokens per UB buffer as fit, whole rows when a row fits in a buffer, else one
    /// token in segments of a buffer.
    __aicore__ inline void CopyRun(CacheSide& target, uint64_t first, uint64_t block, uint64_t position,
                                   uint64_t count)
    {
        if (target.rowBytes == 0) {  // rows of no bytes (one side of a call): nothing to write
            return;
        }
        const uint64_t segmentBytes = MinU64(target.rowBytes, t_.chunkBytes);
        const uint64_t ubRow = UbPitch(target.rowBytes);
        const uint64_t tokensPerBuffer = ubRow <= t_.chunkBytes ? MinU64(t_.chunkBytes / ubRow, kMaxBlockCount) : 1;
        for (uint64_t done = 0; done < count;) {
            const uint64_t group = MinU64(tokensPerBuffer, count - done);
            const uint64_t tokenAt = block * target.blockStride + (position + done) * target.slotStride;
            for (uint64_t offset = 0; offset < target.rowBytes; offset += segmentBytes) {
                const uint64_t bytes = MinU64(segmentBytes, target.rowBytes - offset);
                AscendC::LocalTensor<uint8_t> buffer = queue_.AllocTensor<uint8_t>();
                ReadRows(buffer, target.rows[(first + done) * target.rowStride + offset], target.rowStride, group, bytes);
                queue_.EnQue(buffer);
                buffer = queue_.DeQue<uint8_t>();
                if (t_.layout == kLayoutNd) {
                    WriteRows(target.cache[tokenAt + offset], buffer, target.slotStride, group, bytes);
                } else {
                    StorePieces(target, buffer, tokenAt + offset / kBlockBytes * target.pieceStride, group, bytes);
                }
                queue_.FreeTensor(buffer);
            }
            done += group;
        }
    }

    /// NZ: `bytes` (a multiple of 32) of each of `group` tokens, UB rows `bytes` apart, to
    /// consecutive slots; the first token's first piece goes to cache byte `first`.
    __aicore__ inline void StorePieces(CacheSide& target, AscendC::LocalTensor<uint8_t>& buffer, uint64_t first,
                                       uint64_t group, uint64_t bytes)
    {
        for (uint64_t k = 0; k < group; ++k) {
            AscendC::LocalTensor<uint8_t> row = buffer[static_cast<uint32_t>(k * bytes)];
            WritePieces(target, row, first + k * target.slotStride, bytes / kBlockBytes);
        }
    }

    /// NZ: `pieces` 32-byte pieces of one token from UB to the cache, pieceStride bytes apart from cache byte `first`.
    __aicore__ inline void WritePieces(CacheSide& target, AscendC::LocalTensor<uint8_t>& row, uint64_t first,
                                       uint64_t pieces)
    {
        for (uint64_t p = 0; p < pieces;) {
            const uint64_t count = MinU64(kMaxBlockCount, pieces - p);
            AscendC::LocalTensor<uint8_t> part = row[static_cast<uint32_t>(p * kBlockBytes)];
            WriteRows(target.cache[first + p * target.pieceStride], part, target.pieceStride, count, kBlockBytes);
            p += count;
        }
    }

    ReshapeTiling t_;
    CacheSide key_;
    CacheSide value_;
    uint64_t slotCount_ = 0;
    StagedIndex slots_;
    CopyQueue queue_;
};

}  // namespace ascend_kv

extern "C" __global__ __aicore__ void reshape_and_cache_kernel(
    GM_ADDR key,          // [tokens.., keyRowBytes] bytes, rows keyRowStride apart (at least `tokens` rows)
    GM_ADDR value,        // as key, with valueRowBytes; null in key-only mode
    GM_ADDR keyCache,     // ND [numBlocks, blockSize, keyRowBytes] / NZ [numBlocks, keyRowBytes/32, blockSize, 32] bytes, strided, written
    GM_ADDR valueCache,   // as keyCache, with valueRowBytes; null in key-only mode
    GM_ADDR slotMapping,  // [tokens] int32/int64: the slot of each token
    GM_ADDR tiling)       // [1] ascend_kv::ReshapeTiling
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    ascend_kv::RunKernel<ascend_kv::ReshapeAndCacheKernel>(tiling, key, value, keyCache, valueCache, slotMapping);
}
