/*
 * Host-side tiling: how many cores, how many tokens each, and how UB is divided between staged
 * metadata and the double-buffered copy queue.
 *
 * UB plan per core (all buffers 32-byte multiples):
 *   metadata: three int64 per-batch arrays, each a window of metaWindow entries, together at
 *             most 1/8 of UB (the whole arrays when they fit, which is the common case);
 *   block table (paged load only): a window of tableWindow int64 entries, at most 1/8 of UB;
 *   copy queue: the rest, split into kCopyBuffers equal buffers of chunkBytes (a multiple of
 *               512 bytes once they are at least 1 KB).
 * Tokens are split evenly over min(coreCount, tokens) cores.
 */
#include "tiling.h"

namespace ascend_kv {
namespace {

constexpr uint64_t kInt64Bytes = 8;
constexpr uint64_t kInt64PerBlock = kBlockBytes / kInt64Bytes;
constexpr uint64_t kMetaArrays = 3;
constexpr uint64_t kMetaShareDivisor = 8;  // each staged-metadata kind gets at most ubBytes / 8
constexpr uint64_t kGmBurstBytes = 512;    // GM accesses aligned to 512 B are faster on A2

uint64_t RoundUp(uint64_t value, uint64_t multiple) { return (value + multiple - 1) / multiple * multiple; }
uint64_t RoundDown(uint64_t value, uint64_t multiple) { return value / multiple * multiple; }

/// Entries of a staged int64 window: all `needed` entries when they fit the share, at least one block.
uint64_t StageWindow(uint64_t needed, uint64_t arrays, uint64_t ubBytes)
{
    const uint64_t share = RoundDown(ubBytes / kMetaShareDivisor / arrays / kInt64Bytes, kInt64PerBlock);
    const uint64_t window = needed < share ? RoundUp(needed, kInt64PerBlock) : share;
    return window < kInt64PerBlock ? kInt64PerBlock : window;
}

/// Bytes of each copy buffer once `reserved` bytes are taken, or 0 if not even 32 bytes remain.
/// Large buffers are whole multiples of 512 bytes, so a run that starts 512-byte aligned stays
/// aligned from chunk to chunk.
uint64_t ChunkBytes(uint64_t ubBytes, uint64_t reserved)
{
    if (reserved >= ubBytes) {
        return 0;
    }
    const uint64_t chunk = (ubBytes - reserved) / kCopyBuffers;
    return RoundDown(chunk, chunk >= 2 * kGmBurstBytes ? kGmBurstBytes : kBlockBytes);
}

bool RowOk(uint64_t rowBytes) { return rowBytes > 0 && rowBytes % kBlockBytes == 0; }

/// Even split of `tokens` over at most coreCount cores.
void SplitTokens(uint64_t tokens, uint64_t coreCount, uint64_t& used, uint64_t& perCore, uint64_t& remainder)
{
    used = tokens < coreCount ? tokens : coreCount;
    perCore = used == 0 ? 0 : tokens / used;
    remainder = used == 0 ? 0 : tokens % used;
}

}  // namespace

const char* TilingStatusMessage(int status)
{
    switch (status) {
        case kTilingOk:
            return "ok";
        case kTilingNoCores:
            return "the core count must be at least 1";
        case kTilingUbTooSmall:
            return "the UB size leaves no room for the staged metadata and two 32-byte copy buffers";
        case kTilingBadShape:
            return "a row size is not a positive multiple of 32 bytes, the block size is 0, or the layout is unknown";
        default:
            return "unknown tiling status";
    }
}

int ComputeKvCacheTiling(const KvCacheShape& shape, uint64_t coreCount, uint64_t ubBytes, KvCacheTiling* tiling)
{
    if (coreCount == 0) {
        return kTilingNoCores;
    }
    if (!RowOk(shape.rowBytes)) {
        return kTilingBadShape;
    }
    KvCacheTiling t{};
    t.ntokens = shape.ntokens;
    t.rowBytes = shape.rowBytes;
    t.layers = shape.layers;
    t.batch = shape.batch;
    t.maxSeqLen = shape.maxSeqLen;
    t.layerId = shape.layerId;
    t.metaWindow = StageWindow(shape.batch, kMetaArrays, ubBytes);
    t.chunkBytes = ChunkBytes(ubBytes, kMetaArrays * t.metaWindow * kInt64Bytes);
    if (t.chunkBytes < kBlockBytes) {
        return kTilingUbTooSmall;
    }
    SplitTokens(shape.ntokens, coreCount, t.usedCores, t.tokensPerCore, t.remainder);
    *tiling = t;
    return kTilingOk;
}

int ComputePagedLoadTiling(const PagedLoadShape& shape, uint64_t coreCount, uint64_t ubBytes,
                           PagedLoadTiling* tiling)
{
    if (coreCount == 0) {
        return kTilingNoCores;
    }
    const bool layoutOk = shape.layout == kLayoutNd || shape.layout == kLayoutNz;
    if (!layoutOk || !RowOk(shape.keyRowBytes) || !RowOk(shape.valueRowBytes) ||
        (shape.blockSize == 0 && shape.numTokens > 0)) {
        return kTilingBadShape;
    }
    PagedLoadTiling t{};
    t.numTokens = shape.numTokens;
    t.layout = shape.layout;
    t.batch = shape.batch;
    t.maxBlocks = shape.maxBlocks;
    t.numBlocks = shape.numBlocks;
    t.blockSize = shape.blockSize;
    t.keyRowBytes = shape.keyRowBytes;
    t.valueRowBytes = shape.valueRowBytes;
    t.keyRows = shape.keyRows;
    t.valueRows = shape.valueRows;
    t.metaWindow = StageWindow(shape.batch, kMetaArrays, ubBytes);
    t.tableWindow = StageWindow(shape.batch * shape.maxBlocks, 1, ubBytes);
    t.chunkBytes = ChunkBytes(ubBytes, (kMetaArrays * t.metaWindow + t.tableWindow) * kInt64Bytes);
    if (t.chunkBytes < kBlockBytes) {
        return kTilingUbTooSmall;
    }
    // A gather copy's gap is 16 bits; with a larger block the pieces move one per copy.
    t.gatherBlocks = shape.blockSize - 1 <= kMaxGapBlocks ? kMaxBlockCount : 1;
    SplitTokens(shape.numTokens, coreCount, t.usedCores, t.tokensPerCore, t.remainder);
    *tiling = t;
    return kTilingOk;
}

}  // namespace ascend_kv
