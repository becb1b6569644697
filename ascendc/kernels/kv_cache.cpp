/*
 * KV cache write (ATB KVCacheOperation), for the vector cores of Atlas A2/A3.
 *
 * Token j of batch entry b (0 <= j < seq_len[b]) is row read_start[b] + j of new_kv and goes to
 * past[layerId, b, write_start[b] + j]. The tokens, numbered in batch order, are split evenly
 * over the cores (batch entries may be very uneven); a core's tokens form at most one run of
 * contiguous rows per batch entry, contiguous in new_kv and in past, copied through UB in large
 * double-buffered chunks. Metadata is staged into UB. A token whose source or destination row
 * falls outside its tensor is skipped, so bad metadata never makes the kernel touch memory
 * outside its tensors.
 */
#include "copy_common.h"

namespace ascend_kv {

class KvCacheKernel {
public:
    __aicore__ inline void Init(GM_ADDR newKv, GM_ADDR past, GM_ADDR seqLen, GM_ADDR readStart,
                                GM_ADDR writeStart, const KvCacheTiling& tiling, AscendC::TPipe* pipe)
    {
        t_ = tiling;
        newKv_.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(newKv), t_.ntokens * t_.rowBytes);
        past_.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(past),
                              t_.layers * t_.batch * t_.maxSeqLen * t_.rowBytes);
        seqLen_.Init(pipe, seqLen, t_.batch, t_.metaWindow);
        readStart_.Init(pipe, readStart, t_.batch, t_.metaWindow);
        writeStart_.Init(pipe, writeStart, t_.batch, t_.metaWindow);
        pipe->InitBuffer(queue_, kCopyBuffers, static_cast<uint32_t>(t_.chunkBytes));
    }

    __aicore__ inline void Process()
    {
        const uint64_t core = static_cast<uint64_t>(AscendC::GetBlockIdx());
        if (core >= t_.usedCores || t_.layerId >= t_.layers) {
            return;
        }
        const TokenRange mine = CoreTokens(core, t_.tokensPerCore, t_.remainder);
        uint64_t first = 0;  // number of entry b's first token
        for (uint64_t b = 0; b < t_.batch && first < mine.end; ++b) {
            const uint64_t count = ClampCount(seqLen_.Get(b), t_.ntokens);
            const uint64_t lo = MaxU64(first, mine.begin);
            const uint64_t hi = MinU64(first + count, mine.end);
            if (lo < hi) {
                CopyRun(b, lo - first, hi - first);
            }
            first += count;
        }
    }

private:
    /// Tokens [lo, hi) of batch entry b.
    __aicore__ inline void CopyRun(uint64_t b, uint64_t lo, uint64_t hi)
    {
        const int64_t readStart = readStart_.Get(b);
        const int64_t writeStart = writeStart_.Get(b);
        ClipRun(lo, hi, readStart, t_.ntokens);
        ClipRun(lo, hi, writeStart, t_.maxSeqLen);
        if (lo >= hi) {
            return;
        }
        const uint64_t srcRow = static_cast<uint64_t>(readStart) + lo;
        const uint64_t dstRow = (t_.layerId * t_.batch + b) * t_.maxSeqLen + static_cast<uint64_t>(writeStart) + lo;
        CopyContiguous(queue_, past_[dstRow * t_.rowBytes], newKv_[srcRow * t_.rowBytes], (hi - lo) * t_.rowBytes,
                       t_.chunkBytes);
    }

    KvCacheTiling t_;
    AscendC::GlobalTensor<uint8_t> newKv_;
    AscendC::GlobalTensor<uint8_t> past_;
    StagedInt64 seqLen_;
    StagedInt64 readStart_;
    StagedInt64 writeStart_;
    CopyQueue queue_;
};

}  // namespace ascend_kv

extern "C" __global__ __aicore__ void kv_cache_kernel(
    GM_ADDR newKv,       // [ntokens, rowBytes] bytes: new_kv's rows (float16, bfloat16 or int8)
    GM_ADDR past,        // [layers, batch, maxSeqLen, rowBytes] bytes, written in place
    GM_ADDR seqLen,      // [batch] int64: tokens per batch entry
    GM_ADDR readStart,   // [batch] int64: first new_kv row of each entry
    GM_ADDR writeStart,  // [batch] int64: first past position written in each entry
    GM_ADDR tiling)      // [1] ascend_kv::KvCacheTiling
{
    ascend_kv::KvCacheTiling t;
    ascend_kv::LoadTiling(tiling, t);
    AscendC::TPipe pipe;
    ascend_kv::KvCacheKernel kernel;
    kernel.Init(newKv, past, seqLen, readStart, writeStart, t, &pipe);
    kernel.Process();
}
