/*
 * Paged cache write (ATB ReshapeAndCacheOperation), ND and NZ, for the vector cores of Atlas A2/A3.
 *
 * Reads the raw slot_mapping (int32 or int64). Token i (i < tokens) goes to slot
 * s = slot_mapping[i] of the key cache (and of the value cache) when 0 <= s < numBlocks *
 * blockSize: block s / blockSize, position s % blockSize. Other slots (padding, garbage) are
 * skipped, so slot values nobody checked never make the kernel touch memory outside its tensors.
 *
 * Work split: each core takes an even share of the tokens. It reads the rows of as many
 * consecutive tokens as fit in a UB buffer with one strided DataCopyPad (rows 32-byte aligned in
 * UB), then stores each token where its slot says:
 *   ND: tokens bound for consecutive positions of one block go out as one strided run. Rows
 *       may be any number of bytes: DataCopyPad moves exactly a row's bytes both ways.
 *   NZ: a token's row is T/E 32-byte pieces pieceStride bytes apart in the cache: one strided
 *       DataCopyPad per token (split at 4095 pieces).
 * A row larger than a buffer moves in segments. A slot named twice (a broken precondition) gets
 * the later token when one core writes both; tokens of different cores race on the hardware.
 */
#include "copy_common.h"

namespace ascend_kv {

/// One input (key or value) and its cache, with their byte geometry from the tiling.
struct CacheTarget {
    AscendC::GlobalTensor<uint8_t> in;
    AscendC::GlobalTensor<uint8_t> cache;
    uint64_t rowBytes = 0;
    uint64_t rowStride = 0;
    uint64_t blockStride = 0;
    uint64_t slotStride = 0;
    uint64_t pieceStride = 0;
};

class ReshapeAndCacheKernel {
public:
    __aicore__ inline void Init(GM_ADDR key, GM_ADDR value, GM_ADDR keyCache, GM_ADDR valueCache,
                                GM_ADDR slotMapping, const ReshapeTiling& tiling, AscendC::TPipe* pipe)
    {
        t_ = tiling;
        key_.in.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(key), t_.keySpan);
        key_.cache.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(keyCache), t_.keyCacheSpan);
        key_.rowBytes = t_.keyRowBytes;
        key_.rowStride = t_.keyRowStride;
        key_.blockStride = t_.keyBlockStride;
        key_.slotStride = t_.keySlotStride;
        key_.pieceStride = t_.keyPieceStride;
        if (t_.hasValue != 0) {
            value_.in.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(value), t_.valueSpan);
            value_.cache.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(valueCache), t_.valueCacheSpan);
            value_.rowBytes = t_.valueRowBytes;
            value_.rowStride = t_.valueRowStride;
            value_.blockStride = t_.valueBlockStride;
            value_.slotStride = t_.valueSlotStride;
            value_.pieceStride = t_.valuePieceStride;
        }
        slotCount_ = t_.numBlocks * t_.blockSize;
        slots_.Init(pipe, slotMapping, t_.tokens, t_.slotElemBytes, t_.stageBytes);
        pipe->InitBuffer(queue_, kCopyBuffers, static_cast<uint32_t>(t_.chunkBytes));
    }

    __aicore__ inline void Process()
    {
        const uint64_t core = static_cast<uint64_t>(AscendC::GetBlockIdx());
        if (core >= t_.usedCores) {
            return;
        }
        const Range mine = CoreShare(t_.tokens, core, t_.usedCores);
        Scatter(key_, mine);
        if (t_.hasValue != 0) {
            Scatter(value_, mine);
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

    /// Tokens `mine` into one cache: groups of consecutive tokens through UB, whole rows when a
    /// row fits in a buffer, else one token in segments of a buffer.
    __aicore__ inline void Scatter(CacheTarget& target, Range mine)
    {
        const uint64_t segmentBytes = MinU64(target.rowBytes, t_.chunkBytes);
        const uint64_t ubRow = UbPitch(target.rowBytes);
        const uint64_t tokensPerBuffer = ubRow <= t_.chunkBytes ? MinU64(t_.chunkBytes / ubRow, kMaxBlockCount) : 1;
        for (uint64_t first = mine.begin; first < mine.end;) {
            const uint64_t group = MinU64(tokensPerBuffer, mine.end - first);
            for (uint64_t offset = 0; offset < target.rowBytes; offset += segmentBytes) {
                const uint64_t bytes = MinU64(segmentBytes, target.rowBytes - offset);
                AscendC::LocalTensor<uint8_t> buffer = queue_.AllocTensor<uint8_t>();
                ReadRows(buffer, target.in[first * target.rowStride + offset], target.rowStride, group, bytes);
                queue_.EnQue(buffer);
                buffer = queue_.DeQue<uint8_t>();
                StoreGroup(target, buffer, first, group, offset, bytes);
                queue_.FreeTensor(buffer);
            }
            first += group;
        }
    }

    /// Bytes [offset, offset + bytes) of the `group` tokens from token `first` (UB rows
    /// UbPitch(bytes) apart) to their slots; tokens without a slot are skipped.
    __aicore__ inline void StoreGroup(CacheTarget& target, AscendC::LocalTensor<uint8_t>& buffer, uint64_t first,
                                      uint64_t group, uint64_t offset, uint64_t bytes)
    {
        for (uint64_t k = 0; k < group;) {
            uint64_t slot = 0;
            if (!SlotOf(first + k, slot)) {
                ++k;
                continue;
            }
            const uint64_t block = slot / t_.blockSize;
            const uint64_t position = slot - block * t_.blockSize;
            const uint64_t tokenAt = block * target.blockStride + position * target.slotStride;
            AscendC::LocalTensor<uint8_t> rows = buffer[static_cast<uint32_t>(k * UbPitch(bytes))];
            if (t_.layout == kLayoutNd) {
                const uint64_t run = RunLength(first + k, slot, MinU64(group - k, t_.blockSize - position));
                WriteRows(target.cache[tokenAt + offset], rows, target.slotStride, run, bytes);
                k += run;
            } else {
                WritePieces(target, rows, tokenAt + offset / kBlockBytes * target.pieceStride, bytes / kBlockBytes);
                ++k;
            }
        }
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

    /// NZ: `pieces` 32-byte pieces of one token from UB to the cache, pieceStride bytes apart from cache byte `first`.
    __aicore__ inline void WritePieces(CacheTarget& target, AscendC::LocalTensor<uint8_t>& row, uint64_t first,
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
    CacheTarget key_;
    CacheTarget value_;
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
    ascend_kv::ReshapeTiling t;
    ascend_kv::LoadTiling(tiling, t);
    AscendC::TPipe pipe;
    ascend_kv::ReshapeAndCacheKernel kernel;
    kernel.Init(key, value, keyCache, valueCache, slotMapping, t, &pipe);
    kernel.Process();
}
