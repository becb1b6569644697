/*
 * KV cache write (ATB KVCacheOperation), for the vector cores of Atlas A2/A3.
 *
 * Reads the raw index tensors (token_offset, seq_len, an optional one-element layer tensor;
 * int32 or int64 each). For batch entry b, n = clamp(seq_len[b], 0, ntokens) tokens; token j is
 * new_kv row prefix + j (prefix: the n of the entries before) and goes to
 * past[layer, b, token_offset[b] - seq_len[b] + j]. A token whose row or position falls outside
 * its tensor is skipped, and nothing is written when the layer is out of range, so index values
 * nobody checked never make the kernel touch memory outside its tensors.
 *
 * Work split: a token's number is its new_kv row, so each core takes an even share of the
 * ntokens rows and scans seq_len (staged into UB) for the entries that own them. A core's tokens
 * form at most one run per entry, copied through UB in large double-buffered chunks (strided
 * rows by strided copies).
 */
#include "copy_common.h"

namespace ascend_kv {

class KvCacheKernel {
public:
    using Tiling = KvCacheTiling;

    __aicore__ inline void Init(GM_ADDR newKv, GM_ADDR past, GM_ADDR tokenOffset, GM_ADDR seqLen, GM_ADDR layer,
                                const Tiling& tiling, AscendC::TPipe* pipe)
    {
        t_ = tiling;
        layer_ = layer;
        newKv_.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(newKv), t_.newKvSpan);
        past_.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(past), t_.pastSpan);
        seqLen_.Init(pipe, seqLen, t_.batch, t_.seqLenElemBytes, t_.stageBytes);
        tokenOffset_.Init(pipe, tokenOffset, t_.batch, t_.offsetElemBytes, t_.stageBytes);
        pipe->InitBuffer(queue_, kCopyBuffers, static_cast<uint32_t>(t_.chunkBytes));
    }

    /// The work of core `core` (< usedCores).
    __aicore__ inline void Process(uint64_t core)
    {
        const int64_t layer = t_.layerElemBytes != 0 ? ReadScalar(layer_, t_.layerElemBytes)
                                                     : static_cast<int64_t>(t_.layerId);
        if (layer < 0 || static_cast<uint64_t>(layer) >= t_.layers) {
            return;
        }
        const Range mine = CoreShare(t_.ntokens, core, t_.usedCores);
        uint64_t prefix = 0;  // new_kv row of entry b's first token
        for (uint64_t b = 0; b < t_.batch && prefix < mine.end; ++b) {
            const int64_t seqLen = seqLen_.Get(b);
            const uint64_t count = ClampCount(seqLen, t_.ntokens);
            const uint64_t lo = MaxU64(prefix, mine.begin);
            const uint64_t hi = MinU64(prefix + count, mine.end);
            if (lo < hi) {
                const int64_t start = SaturatingSub(tokenOffset_.Get(b), seqLen);
                CopyRun(static_cast<uint64_t>(layer), b, start, lo - prefix, hi - prefix, prefix);
            }
            prefix += count;
        }
    }

private:
    /// Tokens [lo, hi) of batch entry b: new_kv rows prefix + j to positions start + j.
    __aicore__ inline void CopyRun(uint64_t layer, uint64_t b, int64_t start, uint64_t lo, uint64_t hi,
                                   uint64_t prefix)
    {
        const Range positions = RowsInside(start, hi, t_.maxSeqLen);  // j in [0, hi) landing inside past
        const uint64_t first = MaxU64(lo, positions.begin - static_cast<uint64_t>(start));
        const uint64_t last = MinU64(hi, positions.end - static_cast<uint64_t>(start));
        if (positions.begin >= positions.end || first >= last) {
            return;
        }
        const uint64_t srcRow = prefix + first;
        const uint64_t dstPos = static_cast<uint64_t>(start) + first;
        const uint64_t dst = layer * t_.pastLayerStride + b * t_.pastBatchStride + dstPos * t_.pastSeqStride;
        CopyRows(queue_, past_[dst], t_.pastSeqStride, newKv_[srcRow * t_.newKvRowStride], t_.newKvRowStride,
                 last - first, t_.rowBytes, t_.chunkBytes);
    }

    KvCacheTiling t_;
    GM_ADDR layer_ = nullptr;
    AscendC::GlobalTensor<uint8_t> newKv_;
    AscendC::GlobalTensor<uint8_t> past_;
    StagedIndex seqLen_;
    StagedIndex tokenOffset_;
    CopyQueue queue_;
};

}  // namespace ascend_kv

extern "C" __global__ __aicore__ void kv_cache_kernel(
    GM_ADDR newKv,        // [ntokens, rowBytes] bytes, rows newKvRowStride apart
    GM_ADDR past,         // [layers, batch, maxSeqLen, rowBytes] bytes at the tiling's strides, written in place
    GM_ADDR tokenOffset,  // [batch] int32/int64: position after each entry's last token
    GM_ADDR seqLen,       // [batch] int32/int64: tokens per batch entry
    GM_ADDR layerId,      // [1] int32/int64: the layer written, or null (the tiling's layerId)
    GM_ADDR tiling)       // [1] ascend_kv::KvCacheTiling
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    ascend_kv::RunKernel<ascend_kv::KvCacheKernel>(tiling, newKv, past, tokenOffset, seqLen, layerId);
}
