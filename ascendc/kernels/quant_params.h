/*
 * UB of the quantizing kernels (reshape_and_cache_quant.cpp, paged_cache_load_dequant.cpp): the
 * scratch rows of quant_row.h and four float parameter rows (scale and offset of each side), and
 * the expansion of a static scale or offset to a float row, once per core.
 */
#ifndef ASCEND_KV_QUANT_PARAMS_H
#define ASCEND_KV_QUANT_PARAMS_H

#include "copy_common.h"
#include "quant_row.h"

namespace ascend_kv {

/// A dynamic side's scale cache [num_blocks, block_size, heads] of float, half or bfloat16, at the
/// tiling's byte strides: one typed view per element width, so each cell is read and written by
/// its byte offset through GlobalTensor (no raw GM pointers).
struct ScaleCache {
    AscendC::GlobalTensor<float> wide;      // float caches
    AscendC::GlobalTensor<uint16_t> narrow; // half / bfloat16 caches, as their bits

    __aicore__ inline void Init(GM_ADDR gm, uint64_t spanBytes)
    {
        wide.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(gm), spanBytes / sizeof(float));
        narrow.SetGlobalBuffer(reinterpret_cast<__gm__ uint16_t*>(gm), spanBytes / sizeof(uint16_t));
    }
};

struct QuantRows {
    AscendC::TBuf<AscendC::TPosition::VECCALC> work, narrow, wide, params;
    QuantScratch scratch;
    uint32_t pitch = 0;

    /// Buffers for rows of up to n elements (ascendc/host/tiling.cpp's QuantReservedBytes counts them).
    __aicore__ inline void Init(AscendC::TPipe* pipe, uint32_t n)
    {
        pipe->InitBuffer(work, n * sizeof(float));
        pipe->InitBuffer(narrow, n * sizeof(half));
        pipe->InitBuffer(wide, n * sizeof(int32_t));
        pitch = (n + 7) / 8 * 8;  // every parameter row starts 32-byte aligned
        pipe->InitBuffer(params, 4 * pitch * sizeof(float));
        scratch.work = work.Get<float>();
        scratch.narrow = narrow.Get<half>();
        scratch.wide = wide.Get<int32_t>();
    }

    /// The four parameter rows of n floats, Pitch() apart.
    __aicore__ inline AscendC::LocalTensor<float> Params() { return params.Get<float>(); }
    __aicore__ inline uint32_t Pitch() const { return pitch; }

    /// dst[0, rowElems) = the parameter of `count` elements (staged through a buffer of `in`) of `type` at `gm`, as float, repeated
    /// over the heads (count = heads) or the row (count = 1).
    __aicore__ inline void Expand(AscendC::TQue<AscendC::TPosition::VECIN, 1>& in, const AscendC::LocalTensor<float>& dst, GM_ADDR gm, uint64_t count,
                                       uint64_t type, const QuantTiling& q)
    {
        const uint32_t n = static_cast<uint32_t>(count);
        const uint64_t elemBytes = type == kQuantFloat || type == kQuantInt32 ? 4 : type == kQuantInt8 ? 1 : 2;
        AscendC::GlobalTensor<uint8_t> source;
        source.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(gm), count * elemBytes);
        AscendC::LocalTensor<uint8_t> raw = in.AllocTensor<uint8_t>();
        ReadRow(raw, 0, source, count * elemBytes);
        in.EnQue(raw);
        raw = in.DeQue<uint8_t>();
        // as float into dst when the parameter is per channel, else into the work row
        const AscendC::LocalTensor<float> values = count == q.rowElems ? dst : scratch.work;
        if (type == kQuantFloat) {
            AscendC::Muls(values, raw.ReinterpretCast<float>(), 1.0f, static_cast<int32_t>(n));  // keeps -0 and NaN
        } else if (type == kQuantHalf) {
            AscendC::Cast(values, raw.ReinterpretCast<half>(), AscendC::RoundMode::CAST_NONE, n);
        } else if (type == kQuantBfloat16) {
            AscendC::Cast(values, raw.ReinterpretCast<bfloat16_t>(), AscendC::RoundMode::CAST_NONE, n);
        } else if (type == kQuantInt8) {
            AscendC::Cast(scratch.narrow, raw.ReinterpretCast<int8_t>(), AscendC::RoundMode::CAST_NONE, n);
            AscendC::Cast(values, scratch.narrow, AscendC::RoundMode::CAST_NONE, n);
        } else {
            AscendC::Cast(values, raw.ReinterpretCast<int32_t>(), AscendC::RoundMode::CAST_RINT, n);
        }
        in.FreeTensor(raw);
        if (count == q.rowElems) {
            return;
        }
        // per tensor / per head: the scalar unit reads each head's value and fills its elements
        AscendC::SetFlag<AscendC::HardEvent::V_S>(EVENT_ID0);
        AscendC::WaitFlag<AscendC::HardEvent::V_S>(EVENT_ID0);
        for (uint64_t h = 0; h < q.heads; ++h) {
            FillHead(dst, h, q.headSize, values.GetValue(static_cast<uint32_t>(count == 1 ? 0 : h)));
        }
        AscendC::SetFlag<AscendC::HardEvent::S_V>(EVENT_ID0);
        AscendC::WaitFlag<AscendC::HardEvent::S_V>(EVENT_ID0);
    }

};

}  // namespace ascend_kv

#endif  // ASCEND_KV_QUANT_PARAMS_H
