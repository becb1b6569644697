/*
 * Paged cache write with int8 quantization (docs/semantics.md §13.1), ND and NZ, for the vector cores
 * of Atlas A2/A3.
 *
 * Slots, skipping and the work split are reshape_and_cache_kernel's (reshape_and_cache.cpp):
 * token i goes to slot slot_mapping[i] when it lies inside the caches, every slot has one owning
 * core (stripes of stripeSlots positions, core (block * blockStripes + stripe) % usedCores), which
 * writes the tokens bound for it in token order, so a duplicated slot keeps the last token's codes
 * (and, dynamic, its scale).
 *
 * A quantized side (its QuantTiling) moves one token row at a time: the row in (DataCopyPad),
 * converted to float, quantized by quant_row.h, and the int8 codes out (ND: one row; NZ: its
 * 32-byte pieces, pieceStride apart). Static scales and offsets are loaded once per core and
 * expanded to float vectors of a row, rounded to the compute dtype. Dynamic: per head, amax on the
 * scalar unit (NaN propagates explicitly: the vector Max's NaN behaviour is not documented), the
 * multiplier 127 / amax (scalar float division, IEEE) broadcast with Duplicate, and the scale
 * amax * fl32(1 / 127) written to the scale cache at the slot. A side without quantization is
 * copied as bytes, row by row.
 */
#include "copy_common.h"
#include "quant_params.h"

namespace ascend_kv {

class ReshapeAndCacheQuantKernel {
public:
    using Tiling = ReshapeQuantTiling;

    __aicore__ inline void Init(GM_ADDR key, GM_ADDR value, GM_ADDR keyCache, GM_ADDR valueCache, GM_ADDR slotMapping,
                                GM_ADDR keyScale, GM_ADDR keyOffset, GM_ADDR keyScaleCache, GM_ADDR valueScale,
                                GM_ADDR valueOffset, GM_ADDR valueScaleCache, const Tiling& tiling,
                                AscendC::TPipe* pipe)
    {
        t_ = tiling;
        pipe_ = pipe;
        const ReshapeTiling& b = t_.base;
        key_.Init(keyCache, key, b.key);
        if (b.hasValue != 0) {
            value_.Init(valueCache, value, b.value);
        }
        slotCount_ = b.numBlocks * b.blockSize;
        slots_.Init(pipe, slotMapping, b.tokens, b.slotElemBytes, b.stageBytes);
        pipe->InitBuffer(copy_, kCopyBuffers, static_cast<uint32_t>(b.chunkBytes));
        if (t_.maxElems == 0) {
            return;
        }
        const uint32_t n = static_cast<uint32_t>(t_.maxElems);
        pipe->InitBuffer(in_, kCopyBuffers, n * sizeof(float));
        pipe->InitBuffer(out_, kCopyBuffers, n);
        rows_.Init(pipe, n);
        keyParams_ = rows_.Params();
        valueParams_ = keyParams_[2 * rows_.Pitch()];
        PrepareSide(t_.keyQuant, keyParams_, keyScale, keyOffset, keyScaleCache, keyScaleCache_);
        if (b.hasValue != 0) {
            PrepareSide(t_.valueQuant, valueParams_, valueScale, valueOffset, valueScaleCache, valueScaleCache_);
        }
    }

    /// The work of core `core` (< usedCores): the tokens bound for the slots it owns, in order.
    __aicore__ inline void Process(uint64_t core)
    {
        const ReshapeTiling& b = t_.base;
        for (uint64_t i = 0; i < b.tokens; ++i) {
            const int64_t s = slots_.Get(i);
            if (s < 0 || static_cast<uint64_t>(s) >= slotCount_) {
                continue;
            }
            const uint64_t slot = static_cast<uint64_t>(s);
            const uint64_t block = slot / b.blockSize;
            const uint64_t position = slot - block * b.blockSize;
            if ((block * b.blockStripes + position / b.stripeSlots) % b.usedCores != core) {
                continue;
            }
            WriteToken(key_, t_.keyQuant, keyParams_, keyScaleCache_, i, block, position);
            if (b.hasValue != 0) {
                WriteToken(value_, t_.valueQuant, valueParams_, valueScaleCache_, i, block, position);
            }
        }
    }

private:
    /// One side's static parameters as float vectors of rowElems (scale at params, offset at
    /// params[Pitch()]), rounded to the compute dtype; or its scale cache (dynamic).
    __aicore__ inline void PrepareSide(const QuantTiling& q, const AscendC::LocalTensor<float>& params, GM_ADDR scale,
                                       GM_ADDR offset, GM_ADDR scaleCacheGm,
                                       ScaleCache& scaleCache)
    {
        if (q.scheme == kQuantDynamic) {
            scaleCache.Init(scaleCacheGm, q.scaleCacheSpan);
        } else if (q.scheme != kQuantNone && q.rowElems != 0) {
            const uint32_t n = static_cast<uint32_t>(q.rowElems);
            rows_.Expand(in_, params, scale, q.scaleElems, q.scaleType, q);
            if (q.offsetElems != 0) {
                AscendC::LocalTensor<float> offsetRow = params[rows_.Pitch()];
                rows_.Expand(in_, offsetRow, offset, q.offsetElems, q.offsetType, q);
                RoundToCompute(offsetRow, rows_.scratch.narrow, q.compute, n);
            }
        }
    }

    /// Token i of one side to position `position` of block `block`: codes, or bytes.
    __aicore__ inline void WriteToken(CacheSide& side, const QuantTiling& q, const AscendC::LocalTensor<float>& params,
                                      ScaleCache& scaleCache, uint64_t i, uint64_t block,
                                      uint64_t position)
    {
        const uint64_t tokenAt = block * side.blockStride + position * side.slotStride;
        if (q.scheme == kQuantNone) {
            CopyToken(side, i, tokenAt);
            return;
        }
        if (q.rowElems == 0) {  // no codes; a dynamic side's heads are empty, their amax and scale 0
            if (q.scheme == kQuantDynamic) {
                StoreZeroScales(q, scaleCache, block, position);
            }
            return;
        }
        const uint32_t n = static_cast<uint32_t>(q.rowElems);
        const uint64_t inBytes = q.rowElems * (q.inputType == kQuantFloat ? 4 : 2);
        AscendC::LocalTensor<uint8_t> raw = in_.AllocTensor<uint8_t>();
        ReadRow(raw, 0, side.rows[i * side.rowStride], inBytes);
        in_.EnQue(raw);
        raw = in_.DeQue<uint8_t>();
        AscendC::LocalTensor<float> x = raw.ReinterpretCast<float>();
        if (q.inputType == kQuantHalf) {
            AscendC::Cast(rows_.scratch.work, raw.ReinterpretCast<half>(), AscendC::RoundMode::CAST_NONE, n);
            x = rows_.scratch.work;
        } else if (q.inputType == kQuantBfloat16) {
            AscendC::Cast(rows_.scratch.work, raw.ReinterpretCast<bfloat16_t>(), AscendC::RoundMode::CAST_NONE, n);
            x = rows_.scratch.work;
        }
        AscendC::LocalTensor<int8_t> codes = out_.AllocTensor<int8_t>();
        if (q.scheme == kQuantDynamic) {
            QuantizeDynamic(codes, x, q, params, scaleCache, block, position);
        } else {
            QuantizeStaticRow(codes, rows_.scratch, x, params, params[rows_.Pitch()],
                              q.scheme == kQuantDivide, q.offsetElems != 0, q.compute, n);
        }
        in_.FreeTensor(raw);
        out_.EnQue(codes);
        codes = out_.DeQue<int8_t>();
        AscendC::LocalTensor<uint8_t> bytes = codes.ReinterpretCast<uint8_t>();
        StoreRow(side, bytes, tokenAt, q.rowElems);
        out_.FreeTensor(codes);
    }

    /// amax of head h's elements of `magnitude` (|x|) on the scalar unit, a NaN kept: the path of
    /// head sizes that are no multiple of kHeadsByVector.
    __aicore__ inline float ScalarAmax(const AscendC::LocalTensor<float>& magnitude, uint64_t h, uint64_t headSize)
    {
        float amax = 0.0f;
        for (uint64_t d = 0; d < headSize; ++d) {
            const float v = magnitude.GetValue(static_cast<uint32_t>(h * headSize + d));
            if (v != v || amax != amax) {
                amax = v != v ? v : amax;  // NaN stays
            } else if (v > amax) {
                amax = v;
            }
        }
        return amax;
    }

    /// Dynamic: per head h, amax_h over the head's row (NaN propagates), codes Q(x * (127 / amax_h))
    /// and the scale amax_h * fl32(1/127) to scale_cache[block, position, h] (an fp16/bf16 cache
    /// takes it rounded to nearest even).
    __aicore__ inline void QuantizeDynamic(const AscendC::LocalTensor<int8_t>& codes,
                                           const AscendC::LocalTensor<float>& x, const QuantTiling& q,
                                           const AscendC::LocalTensor<float>& params,
                                           ScaleCache& scaleCache, uint64_t block,
                                           uint64_t position)
    {
        const uint32_t n = static_cast<uint32_t>(q.rowElems);
        AscendC::LocalTensor<float> magnitude = rows_.scratch.wide.ReinterpretCast<float>();
        AscendC::Abs(magnitude, x, static_cast<int32_t>(n));
        AscendC::LocalTensor<float> scales = params[rows_.Pitch()];
        AscendC::LocalTensor<float> extremes = scales[(static_cast<uint32_t>(q.heads) + 7) / 8 * 8];
        const bool byVector = q.headSize % kHeadsByVector == 0;
        if (byVector) {
            HeadExtremes(extremes, magnitude, x, rows_.scratch.narrow, q.heads, q.headSize);
        }
        AscendC::SetFlag<AscendC::HardEvent::V_S>(EVENT_ID0);
        AscendC::WaitFlag<AscendC::HardEvent::V_S>(EVENT_ID0);
        for (uint64_t h = 0; h < q.heads; ++h) {
            const float amax = byVector ? HeadAmax(extremes, h) : ScalarAmax(magnitude, h, q.headSize);
            scales.SetValue(static_cast<uint32_t>(h), amax * (1.0f / 127.0f));
            FillHead(params, h, q.headSize, 127.0f / amax);
        }
        AscendC::SetFlag<AscendC::HardEvent::S_V>(EVENT_ID0);
        AscendC::WaitFlag<AscendC::HardEvent::S_V>(EVENT_ID0);
        AscendC::Mul(rows_.scratch.work, x, params, static_cast<int32_t>(n));
        ToInt8Codes(codes, rows_.scratch, n);
        StoreScales(q, scales, scaleCache, block, position);
    }

    /// The heads' float scales to the scale cache at (block, position), in its element type.
    __aicore__ inline void StoreScales(const QuantTiling& q, const AscendC::LocalTensor<float>& scales,
                                       ScaleCache& scaleCache, uint64_t block, uint64_t position)
    {
        const uint32_t heads = static_cast<uint32_t>(q.heads);
        const uint64_t at = block * q.scaleBlockStride + position * q.scaleSlotStride;
        AscendC::LocalTensor<uint16_t> narrowBits = rows_.scratch.narrow.ReinterpretCast<uint16_t>();
        if (q.scaleCacheType == kQuantHalf) {
            AscendC::Cast(rows_.scratch.narrow, scales, AscendC::RoundMode::CAST_RINT, heads);
        } else if (q.scaleCacheType == kQuantBfloat16) {
            AscendC::Cast(rows_.scratch.narrow.ReinterpretCast<bfloat16_t>(), scales, AscendC::RoundMode::CAST_RINT,
                          heads);
        }
        AscendC::SetFlag<AscendC::HardEvent::V_S>(EVENT_ID0);
        AscendC::WaitFlag<AscendC::HardEvent::V_S>(EVENT_ID0);
        for (uint32_t h = 0; h < heads; ++h) {
            const uint64_t byte = at + h * q.scaleHeadStride;
            if (q.scaleCacheType == kQuantFloat) {
                scaleCache.wide.SetValue(byte / sizeof(float), scales.GetValue(h));
            } else {
                scaleCache.narrow.SetValue(byte / sizeof(uint16_t), narrowBits.GetValue(h));
            }
        }
        // the next token's vector work overwrites the scales and the narrow stage read here
        AscendC::SetFlag<AscendC::HardEvent::S_V>(EVENT_ID0);
        AscendC::WaitFlag<AscendC::HardEvent::S_V>(EVENT_ID0);
    }

    /// Scale 0 (all bits clear in float, half and bfloat16) for each head at (block, position), by the scalar unit.
    __aicore__ inline void StoreZeroScales(const QuantTiling& q, ScaleCache& scaleCache, uint64_t block,
                                           uint64_t position)
    {
        const uint64_t at = block * q.scaleBlockStride + position * q.scaleSlotStride;
        for (uint64_t h = 0; h < q.heads; ++h) {
            const uint64_t byte = at + h * q.scaleHeadStride;
            if (q.scaleCacheType == kQuantFloat) {
                scaleCache.wide.SetValue(byte / sizeof(float), 0.0f);
            } else {
                scaleCache.narrow.SetValue(byte / sizeof(uint16_t), static_cast<uint16_t>(0));
            }
        }
    }

    /// `rowBytes` bytes from UB `bytes` to the cache token at byte tokenAt: ND one row; NZ its
    /// 32-byte pieces, pieceStride apart (split at kMaxBlockCount pieces).
    __aicore__ inline void StoreRow(CacheSide& side, AscendC::LocalTensor<uint8_t>& bytes, uint64_t tokenAt,
                                    uint64_t rowBytes)
    {
        if (t_.base.layout == kLayoutNd) {
            WriteRow(side.cache[tokenAt], bytes, 0, rowBytes);
            return;
        }
        const uint64_t pieces = rowBytes / kBlockBytes;
        for (uint64_t p = 0; p < pieces;) {
            const uint64_t count = MinU64(kMaxBlockCount, pieces - p);
            AscendC::LocalTensor<uint8_t> part = bytes[static_cast<uint32_t>(p * kBlockBytes)];
            WriteRows(side.cache[tokenAt + p * side.pieceStride], part, side.pieceStride, count, kBlockBytes);
            p += count;
        }
    }

    /// A side without quantization: token i's row bytes, in segments of a copy buffer.
    __aicore__ inline void CopyToken(CacheSide& side, uint64_t i, uint64_t tokenAt)
    {
        const uint64_t segmentBytes = MinU64(side.rowBytes, t_.base.chunkBytes);
        for (uint64_t offset = 0; offset < side.rowBytes; offset += segmentBytes) {
            const uint64_t bytes = MinU64(segmentBytes, side.rowBytes - offset);
            AscendC::LocalTensor<uint8_t> buffer = copy_.AllocTensor<uint8_t>();
            ReadRow(buffer, 0, side.rows[i * side.rowStride + offset], bytes);
            copy_.EnQue(buffer);
            buffer = copy_.DeQue<uint8_t>();
            const uint64_t at = t_.base.layout == kLayoutNd ? tokenAt + offset
                                                             : tokenAt + offset / kBlockBytes * side.pieceStride;
            StoreRow(side, buffer, at, bytes);
            copy_.FreeTensor(buffer);
        }
    }

    ReshapeQuantTiling t_;
    AscendC::TPipe* pipe_ = nullptr;
    CacheSide key_;
    CacheSide value_;
    uint64_t slotCount_ = 0;
    StagedIndex slots_;
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

extern "C" __global__ __aicore__ void reshape_and_cache_quant_kernel(
    GM_ADDR key,              // [tokens.., key row] float/half/bfloat16 (or bytes for an unquantized side)
    GM_ADDR value,            // as key; null in key-only mode
    GM_ADDR keyCache,         // ND [numBlocks, blockSize, row] / NZ [numBlocks, row/32, blockSize, 32] bytes, written
    GM_ADDR valueCache,       // as keyCache; null in key-only mode
    GM_ADDR slotMapping,      // [tokens] int32/int64
    GM_ADDR keyScale,         // static: [1], [heads] or [row] scale (divide) / inverse scale (multiply); else null
    GM_ADDR keyOffset,        // static: the zero point, same forms; or null
    GM_ADDR keyScaleCache,    // dynamic: [numBlocks, blockSize, heads] at the tiling's strides, written; else null
    GM_ADDR valueScale,       // as keyScale for the value side
    GM_ADDR valueOffset,      // as keyOffset
    GM_ADDR valueScaleCache,  // as keyScaleCache
    GM_ADDR tiling)           // [1] ascend_kv::ReshapeQuantTiling
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    ascend_kv::RunKernel<ascend_kv::ReshapeAndCacheQuantKernel>(tiling, key, value, keyCache, valueCache, slotMapping,
                                                                 keyScale, keyOffset, keyScaleCache, valueScale,
                                                                 valueOffset, valueScaleCache);
}
