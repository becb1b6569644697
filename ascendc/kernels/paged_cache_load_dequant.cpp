/*
 * Paged cache load with int8 dequantization (docs/semantics.md §13.2), ND and NZ, for the
 * vector cores of Atlas A2/A3.
 *
 * Entries, rows, skipping and the work split are paged_cache_load_kernel's (paged_walk.h). A
 * dequantized side moves one token at a time: its codes in (ND one row, NZ its 32-byte pieces),
 * int8 -> half -> float (exact), (q - offset) * scale with per-channel float vectors expanded once
 * per core (static) or q * the token's per-head scale read from the scale cache (dynamic), in
 * float32; then one rounding to the output type (CAST_RINT) and the row out. A side without
 * dequantization is gathered as bytes, token by token.
 */
#include "paged_walk.h"
#include "quant_params.h"
#include "quant_row.h"

namespace ascend_kv {

class PagedLoadDequantKernel {
public:
    using Tiling = PagedLoadDequantTiling;

    __aicore__ inline void Init(GM_ADDR keyCache, GM_ADDR valueCache, GM_ADDR blockTable, GM_ADDR contextLens,
                                GM_ADDR seqStarts, GM_ADDR key, GM_ADDR value, GM_ADDR keyScale, GM_ADDR keyOffset,
                                GM_ADDR keyScaleCache, GM_ADDR valueScale, GM_ADDR valueOffset,
                                GM_ADDR valueScaleCache, const Tiling& tiling, AscendC::TPipe* pipe)
    {
        t_ = tiling;
        key_.Init(keyCache, key, t_.base.key);
        value_.Init(valueCache, value, t_.base.value);
        walk_.Init(blockTable, contextLens, seqStarts, t_.base, pipe);
        pipe->InitBuffer(copy_, kCopyBuffers, static_cast<uint32_t>(t_.base.chunkBytes));
        const uint32_t n = static_cast<uint32_t>(t_.maxElems);
        pipe->InitBuffer(in_, kCopyBuffers, n * sizeof(float));
        pipe->InitBuffer(out_, kCopyBuffers, n * sizeof(float));
        rows_.Init(pipe, n);
        keyParams_ = rows_.Params()[0];
        valueParams_ = rows_.Params()[2 * rows_.Pitch()];
        PrepareSide(t_.keyQuant, keyParams_, keyScale, keyOffset, keyScaleCache, keyScaleCache_);
        PrepareSide(t_.valueQuant, valueParams_, valueScale, valueOffset, valueScaleCache, valueScaleCache_);
    }

    /// The work of core `core` (< usedCores).
    __aicore__ inline void Process(uint64_t core) { walk_.Walk(core, *this); }

    /// `tokens` tokens from slot `slot` of block `block` to output rows outRow.. of one side.
    __aicore__ inline void LoadRun(bool key, uint64_t block, uint64_t slot, uint64_t outRow, uint64_t tokens)
    {
        CacheSide& side = key ? key_ : value_;
        const uint64_t outRows = key ? t_.base.keyRows : t_.base.valueRows;
        const QuantTiling& q = key ? t_.keyQuant : t_.valueQuant;
        if (outRow >= outRows) {
            return;
        }
        tokens = MinU64(tokens, outRows - outRow);
        for (uint64_t k = 0; k < tokens; ++k) {
            const uint64_t tokenAt = block * side.blockStride + (slot + k) * side.slotStride;
            if (q.scheme == kQuantNone) {
                CopyToken(side, tokenAt, outRow + k);
            } else {
                DequantToken(side, q, key ? keyParams_ : valueParams_, key ? keyScaleCache_ : valueScaleCache_,
                             tokenAt, block, slot + k, outRow + k);
            }
        }
    }

private:
    __aicore__ inline void PrepareSide(const QuantTiling& q, const AscendC::LocalTensor<float>& params, GM_ADDR scale,
                                       GM_ADDR offset, GM_ADDR scaleCacheGm,
                                       ScaleCache& scaleCache)
    {
        if (q.scheme == kQuantDynamic) {
            scaleCache.Init(scaleCacheGm, q.scaleCacheSpan);
        } else if (q.scheme != kQuantNone) {
            rows_.Expand(in_, params, scale, q.scaleElems, q.scaleType, q);
            if (q.offsetElems != 0) {
                rows_.Expand(in_, params[rows_.Pitch()], offset, q.offsetElems, q.offsetType, q);
            }
        }
    }

    /// The codes of the token at cache byte tokenAt into UB (ND one row, NZ its pieces).
    __aicore__ inline void ReadCodes(CacheSide& side, AscendC::LocalTensor<uint8_t>& buffer, uint64_t tokenAt,
                                     uint64_t rowBytes)
    {
        if (t_.base.layout == kLayoutNd) {
            ReadRow(buffer, 0, side.cache[tokenAt], rowBytes);
            return;
        }
        const uint64_t pieces = rowBytes / kBlockBytes;
        for (uint64_t p = 0; p < pieces;) {
            const uint64_t count = MinU64(kMaxBlockCount, pieces - p);
            AscendC::LocalTensor<uint8_t> part = buffer[static_cast<uint32_t>(p * kBlockBytes)];
            ReadRows(part, side.cache[tokenAt + p * side.pieceStride], side.pieceStride, count, kBlockBytes);
            p += count;
        }
    }

    __aicore__ inline void DequantToken(CacheSide& side, const QuantTiling& q, const AscendC::LocalTensor<float>& params,
                                        ScaleCache& scaleCache, uint64_t tokenAt, uint64_t block,
                                        uint64_t slot, uint64_t row)
    {
        const uint32_t n = static_cast<uint32_t>(q.rowElems);
        const QuantScratch& s = rows_.scratch;
        AscendC::LocalTensor<uint8_t> raw = in_.AllocTensor<uint8_t>();
        ReadCodes(side, raw, tokenAt, q.rowElems);
        in_.EnQue(raw);
        raw = in_.DeQue<uint8_t>();
        AscendC::LocalTensor<uint8_t> out = out_.AllocTensor<uint8_t>();
        const AscendC::LocalTensor<float> y = q.inputType == kQuantFloat ? out.ReinterpretCast<float>() : s.work;
        if (q.scheme == kQuantDynamic) {
            RowScales(q, params, scaleCache, block, slot);
            DequantizeRow(y, s, raw.ReinterpretCast<int8_t>(), params, params, false, n);
        } else {
            DequantizeRow(y, s, raw.ReinterpretCast<int8_t>(), params, params[rows_.Pitch()],
                          q.offsetElems != 0, n);
        }
        in_.FreeTensor(raw);
        if (q.inputType == kQuantHalf) {
            AscendC::Cast(out.ReinterpretCast<half>(), y, AscendC::RoundMode::CAST_RINT, n);
        } else if (q.inputType == kQuantBfloat16) {
            AscendC::Cast(out.ReinterpretCast<bfloat16_t>(), y, AscendC::RoundMode::CAST_RINT, n);
        }
        out_.EnQue(out);
        out = out_.DeQue<uint8_t>();
        WriteRow(side.rows[row * side.rowStride], out, 0, q.rowElems * (q.inputType == kQuantFloat ? 4 : 2));
        out_.FreeTensor(out);
    }

    /// Dynamic: params[0, rowElems) = the token's scale of each head (scale_cache[block, slot, h] as
    /// float), repeated over the head's elements (FillHead: one Duplicate per head).
    __aicore__ inline void RowScales(const QuantTiling& q, const AscendC::LocalTensor<float>& params,
                                     ScaleCache& scaleCache, uint64_t block, uint64_t slot)
    {
        const uint32_t heads = static_cast<uint32_t>(q.heads);
        const uint64_t at = block * q.scaleBlockStride + slot * q.scaleSlotStride;
        const AscendC::LocalTensor<float> scales = params[rows_.Pitch()];
        const AscendC::LocalTensor<uint16_t> bits = rows_.scratch.narrow.ReinterpretCast<uint16_t>();
        // the previous token's vector work read and wrote these rows
        AscendC::SetFlag<AscendC::HardEvent::V_S>(EVENT_ID0);
        AscendC::WaitFlag<AscendC::HardEvent::V_S>(EVENT_ID0);
        for (uint32_t h = 0; h < heads; ++h) {
            const uint64_t byte = at + h * q.scaleHeadStride;
            if (q.scaleCacheType == kQuantFloat) {
                scales.SetValue(h, scaleCache.wide.GetValue(byte / sizeof(float)));
            } else {
                bits.SetValue(h, scaleCache.narrow.GetValue(byte / sizeof(uint16_t)));
            }
        }
        AscendC::SetFlag<AscendC::HardEvent::S_V>(EVENT_ID0);
        AscendC::WaitFlag<AscendC::HardEvent::S_V>(EVENT_ID0);
        if (q.scaleCacheType == kQuantHalf) {
            AscendC::Cast(scales, rows_.scratch.narrow, AscendC::RoundMode::CAST_NONE, heads);
        } else if (q.scaleCacheType == kQuantBfloat16) {
            AscendC::Cast(scales, rows_.scratch.narrow.ReinterpretCast<bfloat16_t>(), AscendC::RoundMode::CAST_NONE,
                          heads);
        }
        AscendC::SetFlag<AscendC::HardEvent::V_S>(EVENT_ID0);
        AscendC::WaitFlag<AscendC::HardEvent::V_S>(EVENT_ID0);
        for (uint64_t h = 0; h < q.heads; ++h) {
            FillHead(params, h, q.headSize, scales.GetValue(static_cast<uint32_t>(h)));
        }
        AscendC::SetFlag<AscendC::HardEvent::S_V>(EVENT_ID0);
        AscendC::WaitFlag<AscendC::HardEvent::S_V>(EVENT_ID0);
    }

    /// A side without dequantization: the token's row bytes to output row `row`, in segments.
    __aicore__ inline void CopyToken(CacheSide& side, uint64_t tokenAt, uint64_t row)
    {
        const uint64_t segmentBytes = MinU64(side.rowBytes, t_.base.chunkBytes / kBlockBytes * kBlockBytes);
        for (uint64_t offset = 0; offset < side.rowBytes; offset += segmentBytes) {
            const uint64_t bytes = MinU64(segmentBytes, side.rowBytes - offset);
            AscendC::LocalTensor<uint8_t> buffer = copy_.AllocTensor<uint8_t>();
            const uint64_t at = t_.base.layout == kLayoutNd ? tokenAt + offset
                                                             : tokenAt + offset / kBlockBytes * side.pieceStride;
            ReadCodes(side, buffer, at, bytes);
            copy_.EnQue(buffer);
            buffer = copy_.DeQue<uint8_t>();
            WriteRow(side.rows[row * side.rowStride + offset], buffer, 0, bytes);
            copy_.FreeTensor(buffer);
        }
    }

    PagedLoadDequantTiling t_;
    CacheSide key_;
    CacheSide value_;
    PagedWalk walk_;
    CopyQueue copy_;
    AscendC::TQue<AscendC::TPosition::VECIN, 1> in_;
    AscendC::TQue<AscendC::TPosition::VECOUT, 1> out_;
    QuantRows rows_;
    AscendC::LocalTensor<float> keyParams_;
    AscendC::LocalTensor<float> valueParams_;
    ScaleCache keyScaleCache_;
    ScaleCache valueScaleCache_;
};

}  // namespace ascend_kv

extern "C" __global__ __aicore__ void paged_cache_load_dequant_kernel(
    GM_ADDR keyCache,         // ND [numBlocks, blockSize, row] / NZ [numBlocks, row/32, blockSize, 32] bytes (int8 when dequantized)
    GM_ADDR valueCache,       // as keyCache
    GM_ADDR blockTable,       // [batch, maxBlocks] int32/int64
    GM_ADDR contextLens,      // [batch] (or [batch + 1] cumulative) int32/int64
    GM_ADDR seqStarts,        // [batch] int32/int64, or null
    GM_ADDR key,              // [keyRows, row] of the output type (bytes when not dequantized), written
    GM_ADDR value,            // as key
    GM_ADDR keyScale,         // static: [1], [heads] or [row] scale; else null
    GM_ADDR keyOffset,        // static: the zero point, same forms; or null
    GM_ADDR keyScaleCache,    // dynamic: [numBlocks, blockSize, heads] at the tiling's strides; else null
    GM_ADDR valueScale,       // as keyScale
    GM_ADDR valueOffset,      // as keyOffset
    GM_ADDR valueScaleCache,  // as keyScaleCache
    GM_ADDR tiling)           // [1] ascend_kv::PagedLoadDequantTiling
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    ascend_kv::RunKernel<ascend_kv::PagedLoadDequantKernel>(tiling, keyCache, valueCache, blockTable, contextLens,
                                                             seqStarts, key, value, keyScale, keyOffset, keyScaleCache,
                                                             valueScale, valueOffset, valueScaleCache);
}
