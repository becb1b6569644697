/*
 * Pieces shared by the two copy kernels (kv_cache.cpp, paged_cache_load.cpp): reading the
 * tiling, splitting the tokens over the cores, staging int64 metadata into UB, clipping runs of
 * tokens to the tensors' bounds, and the double-buffered contiguous copy through UB.
 *
 * Device code only: the same file is compiled by CANN for the NPU and by g++ against the host
 * model of the AscendC API for the sim backend.
 */
#ifndef ASCEND_KV_COPY_COMMON_H
#define ASCEND_KV_COPY_COMMON_H

#include "kernel_operator.h"
#include "../tiling.h"

namespace ascend_kv {

/// Copy the tiling struct (all uint64_t fields) from GM into a scalar struct, word by word.
template <typename Tiling>
__aicore__ inline void LoadTiling(GM_ADDR tilingGm, Tiling& tiling)
{
    constexpr uint64_t words = sizeof(Tiling) / sizeof(uint64_t);
    AscendC::GlobalTensor<uint64_t> source;
    source.SetGlobalBuffer(reinterpret_cast<__gm__ uint64_t*>(tilingGm), words);
    uint64_t* target = reinterpret_cast<uint64_t*>(&tiling);
    for (uint64_t i = 0; i < words; ++i) {
        target[i] = source.GetValue(i);
    }
}

__aicore__ inline uint64_t MinU64(uint64_t a, uint64_t b) { return a < b ? a : b; }
__aicore__ inline uint64_t MaxU64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/// A length read from metadata as a token count in [0, limit] (negative counts as 0).
__aicore__ inline uint64_t ClampCount(int64_t value, uint64_t limit)
{
    if (value <= 0) {
        return 0;
    }
    return MinU64(static_cast<uint64_t>(value), limit);
}

/// The tokens [begin, end) (numbered in batch order) that core `core` copies.
struct TokenRange {
    uint64_t begin;
    uint64_t end;
};

__aicore__ inline TokenRange CoreTokens(uint64_t core, uint64_t tokensPerCore, uint64_t remainder)
{
    TokenRange range;
    range.begin = core * tokensPerCore + MinU64(core, remainder);
    range.end = range.begin + tokensPerCore + (core < remainder ? 1 : 0);
    return range;
}

/// Narrow [lo, hi) to the j with 0 <= start + j < limit (an empty range stays empty: lo >= hi).
__aicore__ inline void ClipRun(uint64_t& lo, uint64_t& hi, int64_t start, uint64_t limit)
{
    if (start >= 0) {
        const uint64_t s = static_cast<uint64_t>(start);
        hi = (s >= limit) ? lo : MinU64(hi, limit - s);
    } else {
        const uint64_t below = static_cast<uint64_t>(-(start + 1)) + 1;  // -start, without overflow
        if (below >= hi) {
            hi = lo;
        } else {
            lo = MaxU64(lo, below);
            hi = MinU64(hi, limit + below);
        }
    }
}

/// base + k if 0 <= base + k < limit; otherwise false.
__aicore__ inline bool IndexInRange(int64_t base, uint64_t k, uint64_t limit, uint64_t& index)
{
    uint64_t lo = k;
    uint64_t hi = k + 1;
    ClipRun(lo, hi, base, limit);
    if (lo >= hi) {
        return false;
    }
    index = static_cast<uint64_t>(base) + k;  // wraps back into [0, limit) when base < 0
    return true;
}

/**
 * An int64 array in GM read through a window staged into UB (one DataCopyPad per window).
 * Get(i) restages when i is outside the window; the kernels read indices in increasing order,
 * so each entry is staged about once.
 */
class StagedInt64 {
public:
    __aicore__ inline void Init(AscendC::TPipe* pipe, GM_ADDR array, uint64_t length, uint64_t window)
    {
        global_.SetGlobalBuffer(reinterpret_cast<__gm__ int64_t*>(array), length);
        length_ = length;
        window_ = window;
        pipe->InitBuffer(buffer_, static_cast<uint32_t>(window * sizeof(int64_t)));
        local_ = buffer_.Get<int64_t>();
        base_ = 0;
        count_ = 0;
    }

    /// Entry i, 0 <= i < length.
    __aicore__ inline int64_t Get(uint64_t i)
    {
        if (i < base_ || i >= base_ + count_) {
            Stage(i);
        }
        return local_.GetValue(static_cast<uint32_t>(i - base_));
    }

private:
    __aicore__ inline void Stage(uint64_t first)
    {
        count_ = MinU64(window_, length_ - first);
        // Earlier scalar reads of the window are done before MTE2 overwrites it; the scalar
        // reads after the copy wait for MTE2.
        AscendC::PipeBarrier<PIPE_ALL>();
        AscendC::DataCopyExtParams params(1, static_cast<uint32_t>(count_ * sizeof(int64_t)), 0, 0, 0);
        AscendC::DataCopyPadExtParams<int64_t> padding(false, 0, 0, 0);
        AscendC::DataCopyPad(local_, global_[first], params, padding);
        AscendC::PipeBarrier<PIPE_ALL>();
        base_ = first;
    }

    AscendC::TBuf<AscendC::TPosition::VECCALC> buffer_;
    AscendC::GlobalTensor<int64_t> global_;
    AscendC::LocalTensor<int64_t> local_;
    uint64_t length_ = 0;
    uint64_t window_ = 0;
    uint64_t base_ = 0;
    uint64_t count_ = 0;
};

/// The UB copy queue: VECIN bound to VECOUT (no UB-to-UB move), kCopyBuffers buffers.
using CopyQueue = AscendC::TQueBind<AscendC::TPosition::VECIN, AscendC::TPosition::VECOUT, kCopyBuffers>;

/**
 * Copy `bytes` contiguous bytes (a multiple of 32) from src to dst through UB, in chunks of at
 * most chunkBytes. With two queue buffers the copy-in of chunk i+1 (MTE2) runs while chunk i is
 * copied out (MTE3); the queue's EnQue/DeQue and Alloc/Free order the two engines.
 */
__aicore__ inline void CopyContiguous(CopyQueue& queue, const AscendC::GlobalTensor<uint8_t>& dst,
                                      const AscendC::GlobalTensor<uint8_t>& src, uint64_t bytes, uint64_t chunkBytes)
{
    for (uint64_t done = 0; done < bytes;) {
        const uint32_t n = static_cast<uint32_t>(MinU64(chunkBytes, bytes - done));
        AscendC::LocalTensor<uint8_t> buffer = queue.AllocTensor<uint8_t>();
        AscendC::DataCopy(buffer, src[done], n);
        queue.EnQue(buffer);
        buffer = queue.DeQue<uint8_t>();
        AscendC::DataCopy(dst[done], buffer, n);
        queue.FreeTensor(buffer);
        done += n;
    }
}

}  // namespace ascend_kv

#endif  // ASCEND_KV_COPY_COMMON_H
