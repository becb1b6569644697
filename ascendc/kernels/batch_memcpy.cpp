/*
 * Batched byte copies from pointer tables in device memory (batch_memcpy, vLLM's mamba state
 * copies), for the vector cores of Atlas A2/A3: one launch for the whole batch, the tables read by
 * the kernel, never by the host.
 *
 * Copy i moves sizes[i] bytes from address srcPtrs[i] to dstPtrs[i]; a size <= 0 copies nothing.
 * The sizes are known only here, so every core scans the size table and takes its chunks: copy i is
 * chunks of chunkBytes, and chunk k of copy i is core (i + k) % usedCores's, which spreads one
 * large copy over every core and many small ones one to a core. Each chunk moves GM -> UB -> GM
 * with DataCopyPad (exact bytes, any alignment on the GM side), double-buffered. Chunks of one copy
 * are disjoint, so no two cores write one byte for ranges that do not overlap (the host checks
 * that for host tables; for device tables overlapping ranges are the caller's error).
 */
#include "copy_common.h"

namespace ascend_kv {

class BatchMemcpyKernel {
public:
    using Tiling = BatchMemcpyTiling;

    __aicore__ inline void Init(GM_ADDR srcPtrs, GM_ADDR dstPtrs, GM_ADDR sizes, const Tiling& tiling,
                                AscendC::TPipe* pipe)
    {
        t_ = tiling;
        src_.Init(pipe, srcPtrs, t_.copies, sizeof(int64_t), t_.stageBytes);
        dst_.Init(pipe, dstPtrs, t_.copies, sizeof(int64_t), t_.stageBytes);
        sizes_.Init(pipe, sizes, t_.copies, t_.sizeElemBytes, t_.stageBytes);
        pipe->InitBuffer(queue_, kCopyBuffers, static_cast<uint32_t>(t_.chunkBytes));
    }

    /// The chunks of core `core` (< usedCores).
    __aicore__ inline void Process(uint64_t core)
    {
        const uint64_t cores = t_.usedCores;
        for (uint64_t i = 0; i < t_.copies; ++i) {
            const int64_t size = sizes_.Get(i);
            if (size <= 0) {
                continue;
            }
            const uint64_t bytes = static_cast<uint64_t>(size);
            const uint64_t chunks = (bytes + t_.chunkBytes - 1) / t_.chunkBytes;
            uint64_t k = (core + cores - i % cores) % cores;  // this core's first chunk of copy i
            if (k >= chunks) {
                continue;
            }
            AscendC::GlobalTensor<uint8_t> from;
            AscendC::GlobalTensor<uint8_t> to;
            from.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(static_cast<uint64_t>(src_.Get(i))), bytes);
            to.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(static_cast<uint64_t>(dst_.Get(i))), bytes);
            for (; k < chunks; k += cores) {
                const uint64_t at = k * t_.chunkBytes;
                const uint64_t n = MinU64(t_.chunkBytes, bytes - at);
                AscendC::LocalTensor<uint8_t> buffer = queue_.AllocTensor<uint8_t>();
                ReadRow(buffer, 0, from[at], n);
                queue_.EnQue(buffer);
                buffer = queue_.DeQue<uint8_t>();
                WriteRow(to[at], buffer, 0, n);
                queue_.FreeTensor(buffer);
            }
        }
    }

private:
    BatchMemcpyTiling t_;
    StagedIndex src_;
    StagedIndex dst_;
    StagedIndex sizes_;
    CopyQueue queue_;
};

}  // namespace ascend_kv

extern "C" __global__ __aicore__ void batch_memcpy_kernel(
    GM_ADDR srcPtrs,  // [copies] int64 source addresses
    GM_ADDR dstPtrs,  // [copies] int64 destination addresses
    GM_ADDR sizes,    // [copies] int32/int64 byte counts
    GM_ADDR tiling)   // [1] ascend_kv::BatchMemcpyTiling
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    ascend_kv::RunKernel<ascend_kv::BatchMemcpyKernel>(tiling, srcPtrs, dstPtrs, sizes);
}
