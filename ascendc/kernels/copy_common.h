/*
 * Pieces shared by the copy kernels (kv_cache.cpp, paged_cache_load.cpp, reshape_and_cache.cpp):
 * reading the tiling, index arithmetic that never leaves the tensors, int32/int64 index tensors
 * staged into UB, a paged cache and its token rows, and copies of rows (contiguous or strided)
 * through a double-buffered UB queue. No DataCopyPad moves more than kMaxPadBlockBytes per block.
 *
 * Device code only: the same file is compiled by CANN for the NPU and by g++ against the host
 * model of the AscendC API (ascendc/sim/include) for the host build.
 */
#ifndef ASCEND_KV_COPY_COMMON_H
#define ASCEND_KV_COPY_COMMON_H

#include <cstdint>

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

/// a - b, saturated to the int64 range: a difference beyond it is out of range for every tensor,
/// and saturating keeps it out of range (wrapping could bring it back into a tensor).
__aicore__ inline int64_t SaturatingSub(int64_t a, int64_t b)
{
    const int64_t wrapped = static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
    const bool overflow = (a < 0) != (b < 0) && (wrapped < 0) != (a < 0);
    if (!overflow) {
        return wrapped;
    }
    return a < 0 ? INT64_MIN : INT64_MAX;
}

/// floor(value / divisor) for divisor > 0.
__aicore__ inline int64_t FloorDiv(int64_t value, uint64_t divisor)
{
    const int64_t d = static_cast<int64_t>(divisor);
    const int64_t q = value / d;
    return (value % d != 0 && value < 0) ? q - 1 : q;
}

/// A length read from an index tensor as a token count in [0, limit] (negative counts as 0).
__aicore__ inline uint64_t ClampCount(int64_t value, uint64_t limit)
{
    return value <= 0 ? 0 : MinU64(static_cast<uint64_t>(value), limit);
}

/// A half-open range [begin, end) of unsigned positions.
struct Range {
    uint64_t begin;
    uint64_t end;
};

/// The tokens [begin, end) of `total` that core `core` of `cores` takes: an even split.
__aicore__ inline Range CoreShare(uint64_t total, uint64_t core, uint64_t cores)
{
    const uint64_t perCore = total / cores;
    const uint64_t remainder = total % cores;
    Range range;
    range.begin = core * perCore + MinU64(core, remainder);
    range.end = range.begin + perCore + (core < remainder ? 1 : 0);
    return range;
}

/// Rows base + j (0 <= j < count) that fall inside [0, limit), as a range of rows (maybe empty).
__aicore__ inline Range RowsInside(int64_t base, uint64_t count, uint64_t limit)
{
    Range rows{0, 0};
    if (base >= 0) {
        const uint64_t first = static_cast<uint64_t>(base);
        if (first < limit) {
            rows.begin = first;
            rows.end = first + MinU64(count, limit - first);
        }
    } else {
        const uint64_t below = static_cast<uint64_t>(-(base + 1)) + 1;  // -base, without overflow
        if (count > below) {
            rows.end = MinU64(count - below, limit);
        }
    }
    return rows;
}

/// index = base + k if 0 <= base + k < limit (computed exactly, no overflow); otherwise false.
__aicore__ inline bool IndexInRange(int64_t base, uint64_t k, uint64_t limit, uint64_t& index)
{
    if (base >= 0) {
        const uint64_t first = static_cast<uint64_t>(base);
        if (first >= limit || k >= limit - first) {
            return false;
        }
        index = first + k;
        return true;
    }
    const uint64_t below = static_cast<uint64_t>(-(base + 1)) + 1;  // -base, without overflow
    if (k < below || k - below >= limit) {
        return false;
    }
    index = k - below;
    return true;
}

/**
 * An int32 or int64 index tensor in GM, read through a window staged into UB (one DataCopyPad
 * per window, at most stageBytes). Get(i) restages when i is outside the window; the kernels
 * read mostly in increasing order, so each entry is staged about once. Scalar reads of the
 * window and the copy that refills it are ordered by paired flags (S_MTE2 before the refill,
 * MTE2_S after it), not by a barrier on every pipe.
 */
class StagedIndex {
public:
    __aicore__ inline void Init(AscendC::TPipe* pipe, GM_ADDR array, uint64_t length, uint64_t elemBytes,
                                uint64_t stageBytes)
    {
        pipe_ = pipe;
        elemBytes_ = elemBytes;
        length_ = length;
        window_ = stageBytes / elemBytes;
        global_.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(array), length * elemBytes);
        pipe->InitBuffer(buffer_, static_cast<uint32_t>(stageBytes));
        local_ = buffer_.Get<uint8_t>();
        base_ = 0;
        count_ = 0;
    }

    /// Entry i (0 <= i < length), sign-extended to int64.
    __aicore__ inline int64_t Get(uint64_t i)
    {
        if (i < base_ || i >= base_ + count_) {
            Stage(i);
        }
        const uint32_t k = static_cast<uint32_t>(i - base_);
        if (elemBytes_ == sizeof(int64_t)) {
            return local_.ReinterpretCast<int64_t>().GetValue(k);
        }
        return static_cast<int64_t>(local_.ReinterpretCast<int32_t>().GetValue(k));
    }

private:
    __aicore__ inline void Stage(uint64_t first)
    {
        count_ = MinU64(window_, length_ - first);
        base_ = first;
        const AscendC::TEventID before = pipe_->FetchEventID(AscendC::HardEvent::S_MTE2);
        AscendC::SetFlag<AscendC::HardEvent::S_MTE2>(before);
        AscendC::WaitFlag<AscendC::HardEvent::S_MTE2>(before);
        AscendC::DataCopyExtParams params(1, static_cast<uint32_t>(count_ * elemBytes_), 0, 0, 0);
        AscendC::DataCopyPadExtParams<uint8_t> padding(false, 0, 0, 0);
        AscendC::DataCopyPad(local_, global_[first * elemBytes_], params, padding);
        const AscendC::TEventID after = pipe_->FetchEventID(AscendC::HardEvent::MTE2_S);
        AscendC::SetFlag<AscendC::HardEvent::MTE2_S>(after);
        AscendC::WaitFlag<AscendC::HardEvent::MTE2_S>(after);
    }

    AscendC::TPipe* pipe_ = nullptr;
    AscendC::TBuf<AscendC::TPosition::VECCALC> buffer_;
    AscendC::GlobalTensor<uint8_t> global_;
    AscendC::LocalTensor<uint8_t> local_;
    uint64_t elemBytes_ = 8;
    uint64_t length_ = 0;
    uint64_t window_ = 0;
    uint64_t base_ = 0;
    uint64_t count_ = 0;
};

/// The first element of a one-element int32/int64 tensor, sign-extended (a scalar GM read).
__aicore__ inline int64_t ReadScalar(GM_ADDR tensor, uint64_t elemBytes)
{
    if (elemBytes == sizeof(int64_t)) {
        AscendC::GlobalTensor<int64_t> value;
        value.SetGlobalBuffer(reinterpret_cast<__gm__ int64_t*>(tensor), 1);
        return value.GetValue(0);
    }
    AscendC::GlobalTensor<int32_t> value;
    value.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(tensor), 1);
    return static_cast<int64_t>(value.GetValue(0));
}

/**
 * A kernel's work on this core: its tiling read from GM, then, on the cores the tiling uses,
 * `Kernel` set up over the tensors `gm` (Init(gm..., tiling, pipe)) and run (Process(core)).
 * The entry function declares the kernel type itself.
 */
template <typename Kernel, typename... Gm>
__aicore__ inline void RunKernel(GM_ADDR tilingGm, Gm... gm)
{
    typename Kernel::Tiling tiling;
    LoadTiling(tilingGm, tiling);
    const uint64_t core = static_cast<uint64_t>(AscendC::GetBlockIdx());
    if (core >= tiling.usedCores) {
        return;
    }
    AscendC::TPipe pipe;
    Kernel kernel;
    kernel.Init(gm..., tiling, &pipe);
    kernel.Process(core);
}

/// One cache (key or value) of the paged kernels and its tensor of token rows (paged_cache_load's
/// output, reshape_and_cache's input), with their byte geometry from the tiling.
struct CacheSide : CacheTiling {
    AscendC::GlobalTensor<uint8_t> cache;
    AscendC::GlobalTensor<uint8_t> rows;

    __aicore__ inline void Init(GM_ADDR cacheGm, GM_ADDR rowsGm, const CacheTiling& tiling)
    {
        CacheTiling::operator=(tiling);
        cache.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(cacheGm), cacheSpan);
        rows.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(rowsGm), rowsSpan);
    }
};

/// The UB copy queue: VECIN bound to VECOUT (no UB-to-UB move). Depth 1: every EnQue is
/// followed by its DeQue; double buffering comes from InitBuffer's kCopyBuffers buffers.
using CopyQueue = AscendC::TQueBind<AscendC::TPosition::VECIN, AscendC::TPosition::VECOUT, 1>;

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

/// Bytes between consecutive rows of rowBytes in UB: DataCopyPad starts each row on a 32-byte boundary.
__aicore__ inline uint64_t UbPitch(uint64_t rowBytes) { return (rowBytes + kBlockBytes - 1) / kBlockBytes * kBlockBytes; }

/// The GM-side gap between rows `pitch` bytes apart, if one DataCopyPad can express it.
__aicore__ inline bool PadGap(uint64_t pitch, uint64_t rowBytes, uint32_t& gap)
{
    if (pitch < rowBytes || pitch - rowBytes > kMaxPadGapBytes) {
        return false;
    }
    gap = static_cast<uint32_t>(pitch - rowBytes);
    return true;
}

/// The largest piece of a row one DataCopyPad moves: kMaxPadBlockBytes rounded down to whole
/// 32-byte blocks, so every piece of a row starts on a 32-byte boundary in UB.
constexpr uint64_t kPadPieceBytes = kMaxPadBlockBytes / kBlockBytes * kBlockBytes;

/// One row of rowBytes (any size) from GM `src` into UB from byte `at` of `buffer`, in pieces of at
/// most kPadPieceBytes.
__aicore__ inline void ReadRow(AscendC::LocalTensor<uint8_t>& buffer, uint64_t at,
                               const AscendC::GlobalTensor<uint8_t>& src, uint64_t rowBytes)
{
    AscendC::DataCopyPadExtParams<uint8_t> padding(false, 0, 0, 0);
    for (uint64_t done = 0; done < rowBytes; done += kPadPieceBytes) {
        AscendC::DataCopyExtParams one(1, static_cast<uint32_t>(MinU64(kPadPieceBytes, rowBytes - done)), 0, 0, 0);
        AscendC::DataCopyPad(buffer[static_cast<uint32_t>(at + done)], src[done], one, padding);
    }
}

/// One row of rowBytes (any size) from UB byte `at` of `buffer` to GM `dst`, as ReadRow.
__aicore__ inline void WriteRow(const AscendC::GlobalTensor<uint8_t>& dst, AscendC::LocalTensor<uint8_t>& buffer,
                                uint64_t at, uint64_t rowBytes)
{
    for (uint64_t done = 0; done < rowBytes; done += kPadPieceBytes) {
        AscendC::DataCopyExtParams one(1, static_cast<uint32_t>(MinU64(kPadPieceBytes, rowBytes - done)), 0, 0, 0);
        AscendC::DataCopyPad(dst[done], buffer[static_cast<uint32_t>(at + done)], one);
    }
}

/// `rows` (<= kMaxBlockCount) rows of rowBytes (any size), `pitch` bytes apart in GM, into UB rows
/// UbPitch(rowBytes) apart: one strided DataCopyPad when the gap and the row fit its fields, else row by row.
__aicore__ inline void ReadRows(AscendC::LocalTensor<uint8_t>& buffer, const AscendC::GlobalTensor<uint8_t>& src,
                                uint64_t pitch, uint64_t rows, uint64_t rowBytes)
{
    uint32_t gap = 0;
    if (rowBytes <= kMaxPadBlockBytes && PadGap(pitch, rowBytes, gap)) {
        AscendC::DataCopyPadExtParams<uint8_t> padding(false, 0, 0, 0);
        AscendC::DataCopyExtParams params(static_cast<uint16_t>(rows), static_cast<uint32_t>(rowBytes), gap, 0, 0);
        AscendC::DataCopyPad(buffer, src, params, padding);
        return;
    }
    for (uint64_t r = 0; r < rows; ++r) {
        ReadRow(buffer, r * UbPitch(rowBytes), src[r * pitch], rowBytes);
    }
}

/// `rows` (<= kMaxBlockCount) UB rows of rowBytes (any size), UbPitch(rowBytes) apart, to GM rows
/// `pitch` bytes apart, as ReadRows.
__aicore__ inline void WriteRows(const AscendC::GlobalTensor<uint8_t>& dst, AscendC::LocalTensor<uint8_t>& buffer,
                                 uint64_t pitch, uint64_t rows, uint64_t rowBytes)
{
    uint32_t gap = 0;
    if (rowBytes <= kMaxPadBlockBytes && PadGap(pitch, rowBytes, gap)) {
        AscendC::DataCopyExtParams params(static_cast<uint16_t>(rows), static_cast<uint32_t>(rowBytes), 0, gap, 0);
        AscendC::DataCopyPad(dst, buffer, params);
        return;
    }
    for (uint64_t r = 0; r < rows; ++r) {
        WriteRow(dst[r * pitch], buffer, r * UbPitch(rowBytes), rowBytes);
    }
}

/**
 * Copy `rows` rows of rowBytes (a multiple of 32) from src rows srcPitch bytes apart to dst
 * rows dstPitch bytes apart. Dense rows on both sides are one contiguous run (large chunks);
 * otherwise as many whole rows per UB buffer as fit, moved by strided DataCopyPad, and a row
 * larger than a buffer moves on its own in chunks.
 */
__aicore__ inline void CopyRows(CopyQueue& queue, const AscendC::GlobalTensor<uint8_t>& dst, uint64_t dstPitch,
                                const AscendC::GlobalTensor<uint8_t>& src, uint64_t srcPitch, uint64_t rows,
                                uint64_t rowBytes, uint64_t chunkBytes)
{
    if (srcPitch == rowBytes && dstPitch == rowBytes) {
        CopyContiguous(queue, dst, src, rows * rowBytes, chunkBytes);
        return;
    }
    if (rowBytes > chunkBytes) {
        for (uint64_t r = 0; r < rows; ++r) {
            CopyContiguous(queue, dst[r * dstPitch], src[r * srcPitch], rowBytes, chunkBytes);
        }
        return;
    }
    const uint64_t rowsPerBuffer = MinU64(chunkBytes / rowBytes, kMaxBlockCount);
    for (uint64_t done = 0; done < rows;) {
        const uint64_t group = MinU64(rowsPerBuffer, rows - done);
        AscendC::LocalTensor<uint8_t> buffer = queue.AllocTensor<uint8_t>();
        ReadRows(buffer, src[done * srcPitch], srcPitch, group, rowBytes);
        queue.EnQue(buffer);
        buffer = queue.DeQue<uint8_t>();
        WriteRows(dst[done * dstPitch], buffer, dstPitch, group, rowBytes);
        queue.FreeTensor(buffer);
        done += group;
    }
}

}  // namespace ascend_kv

#endif  // ASCEND_KV_COPY_COMMON_H
