/*
 * Tiling of the two kernels: computed on the host (ascendc/host/tiling.cpp), copied to device
 * memory, read by the kernels (ascendc/kernels/). Shared by the NPU build and the host build.
 *
 * Plain data only: every field is a uint64_t, so the struct has no padding, the same layout on
 * every compiler, and a kernel reads it as an array of 64-bit words.
 * Sizes are in bytes unless a name says otherwise. All tensors are addressed as bytes: a row
 * is a whole number of 32-byte blocks (validated before launch), so the kernels are
 * dtype-agnostic copies.
 */
#ifndef ASCEND_KV_TILING_H
#define ASCEND_KV_TILING_H

#include <cstdint>

namespace ascend_kv {

/// Bytes in one hardware data block (the unit of DataCopy lengths and gaps).
constexpr uint64_t kBlockBytes = 32;
/// Largest blockCount of one DataCopyParams copy (12 bits).
constexpr uint64_t kMaxBlockCount = 4095;
/// Largest srcStride (gap, in 32-byte blocks) of one DataCopyParams copy (16 bits).
constexpr uint64_t kMaxGapBlocks = 65535;
/// Buffers in the copy queue: 2 = double buffering (MTE2 of chunk i+1 overlaps MTE3 of chunk i).
constexpr uint64_t kCopyBuffers = 2;

/// Paged cache layouts, the values of ascend_kv.KvCacheCfg.
constexpr uint64_t kLayoutNz = 0;
constexpr uint64_t kLayoutNd = 1;

/**
 * KV cache write: token j of batch entry b (0 <= j < seq_len[b]) is row read_start[b] + j of
 * new_kv [ntokens, rowBytes] and goes to past[layerId, b, write_start[b] + j] of
 * past [layers, batch, maxSeqLen, rowBytes].
 *
 * Work split: the tokens, numbered in batch order (t = seq_len[0] + ... + seq_len[b-1] + j),
 * are split evenly over usedCores cores: core c takes [c * tokensPerCore + min(c, remainder),
 * ...) with tokensPerCore + (c < remainder) tokens. Each core copies its runs of contiguous
 * rows through UB in chunks of at most chunkBytes, double-buffered.
 */
struct KvCacheTiling {
    uint64_t usedCores;      ///< cores to launch (0: nothing to do, launch nothing)
    uint64_t ntokens;        ///< rows of new_kv
    uint64_t rowBytes;       ///< bytes of one token row (hidden * itemsize), a multiple of 32
    uint64_t layers;         ///< past.shape[0]
    uint64_t batch;          ///< past.shape[1], and the length of each metadata array
    uint64_t maxSeqLen;      ///< past.shape[2]
    uint64_t layerId;        ///< the layer written
    uint64_t tokensPerCore;  ///< floor(ntokens / usedCores)
    uint64_t remainder;      ///< ntokens % usedCores: the first `remainder` cores take one more
    uint64_t chunkBytes;     ///< bytes of each of the kCopyBuffers UB copy buffers, a multiple of 32
    uint64_t metaWindow;     ///< int64 entries of each metadata array staged in UB at once (multiple of 4)
};

/**
 * Paged cache load: token j of batch entry b (0 <= j < lens[b]) sits in block
 * block_table[b, first_column[b] + j / blockSize] at slot j % blockSize and goes to output row
 * out_start[b] + j, for the key and the value cache alike.
 *
 * Work split as for KvCacheTiling, over the tokens numbered in batch order. A core copies runs
 * of tokens that share a block: ND runs are contiguous rows (large copies); NZ tokens are
 * gathered piece by piece (blockCount = row blocks, blockLen = 1, gap = blockSize - 1, at most
 * gatherBlocks pieces per copy) into UB, several tokens per buffer, then stored contiguously.
 */
struct PagedLoadTiling {
    uint64_t usedCores;      ///< cores to launch (0: nothing to do, launch nothing)
    uint64_t numTokens;      ///< tokens gathered (sum of lens)
    uint64_t layout;         ///< kLayoutNd or kLayoutNz
    uint64_t batch;          ///< block_table.shape[0], and the length of lens/out_start/first_column
    uint64_t maxBlocks;      ///< block_table.shape[1] (columns)
    uint64_t numBlocks;      ///< cache blocks (key_cache.shape[0] == value_cache.shape[0])
    uint64_t blockSize;      ///< token slots per cache block
    uint64_t keyRowBytes;    ///< bytes of one key token row, a multiple of 32
    uint64_t valueRowBytes;  ///< bytes of one value token row, a multiple of 32
    uint64_t keyRows;        ///< rows of the key output
    uint64_t valueRows;      ///< rows of the value output
    uint64_t tokensPerCore;  ///< floor(numTokens / usedCores)
    uint64_t remainder;      ///< numTokens % usedCores: the first `remainder` cores take one more
    uint64_t chunkBytes;     ///< bytes of each of the kCopyBuffers UB copy buffers, a multiple of 32
    uint64_t metaWindow;     ///< int64 entries of each per-batch array staged in UB at once (multiple of 4)
    uint64_t tableWindow;    ///< int64 block-table entries staged in UB at once (multiple of 4)
    uint64_t gatherBlocks;   ///< NZ: most 32-byte pieces per gather copy (4095, or 1 if blockSize - 1 > 65535)
};

static_assert(sizeof(KvCacheTiling) == 11 * sizeof(uint64_t), "KvCacheTiling must be uint64_t fields only");
static_assert(sizeof(PagedLoadTiling) == 17 * sizeof(uint64_t), "PagedLoadTiling must be uint64_t fields only");

}  // namespace ascend_kv

#endif  // ASCEND_KV_TILING_H
