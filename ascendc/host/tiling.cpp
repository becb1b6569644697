/*
 * Host-side tiling: how many cores, how UB is divided between the staged index windows and the
 * double-buffered copy queue, and the byte geometry the kernels address.
 *
 * UB plan per core (all buffers 32-byte multiples):
 *   index windows: one per staged index tensor (2 for kv_cache, 2 or 3 for paged_cache_load, 1
 *                  for reshape_and_cache),
 *                  each stageBytes: the whole tensor when it fits, capped at kMaxStageBytes and
 *                  at a quarter of UB over all windows;
 *   copy queue:    the rest, split into kCopyBuffers equal buffers of chunkBytes (a multiple of
 *                  512 bytes once they are at least 1 KB).
 * Cores: as many as there are rows that can be written (new_kv rows, output rows, tokens; for
 * reshape_and_cache also at most one per cache slot), at most coreCount; kv_cache and
 * paged_cache_load split their rows over them, reshape_and_cache its cache slots (SplitSlots).
 */
#include "tiling.h"

#include <sstream>

namespace ascend_kv {
namespace {

constexpr uint64_t kIndexShareDivisor = 4;  // the index windows together get at most ubBytes / 4
constexpr uint64_t kGmBurstBytes = 512;     // GM accesses aligned to 512 B are faster on A2
constexpr uint64_t kStripesPerCore = 16;    // reshape_and_cache: slot stripes per core a call's tokens fill
constexpr uint64_t kMaxBlockCopyChunkBytes = 65536 - 512;  // block_copy: segments below 64 KB, 512-byte multiples

uint64_t CeilDiv(uint64_t value, uint64_t divisor) { return (value + divisor - 1) / divisor; }
uint64_t UbPitch(uint64_t rowBytes) { return (rowBytes + kBlockBytes - 1) / kBlockBytes * kBlockBytes; }
uint64_t RoundUp(uint64_t value, uint64_t multiple) { return CeilDiv(value, multiple) * multiple; }
uint64_t RoundDown(uint64_t value, uint64_t multiple) { return value / multiple * multiple; }
uint64_t Min(uint64_t a, uint64_t b) { return a < b ? a : b; }
uint64_t Max(uint64_t a, uint64_t b) { return a > b ? a : b; }

/// Bytes of each of `windows` staged index windows, when the largest tensor has `needed` bytes.
uint64_t StageBytes(uint64_t needed, uint64_t windows, uint64_t ubBytes)
{
    const uint64_t share = Min(RoundDown(ubBytes / kIndexShareDivisor / windows, kBlockBytes), kMaxStageBytes);
    return Max(Min(RoundUp(needed, kBlockBytes), share), kBlockBytes);
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

bool IndexOk(const TensorGeom& index) { return index.elemBytes == 4 || index.elemBytes == 8; }

uint64_t Size(const TensorGeom& t, int dim) { return static_cast<uint64_t>(t.sizes[dim]); }
uint64_t Stride(const TensorGeom& t, int dim) { return static_cast<uint64_t>(t.strides[dim]); }
uint64_t Numel(const TensorGeom& t)
{
    uint64_t n = 1;
    for (int d = 0; d < t.dims; ++d) {
        n *= Size(t, d);
    }
    return n;
}

/// Bytes of one row made of dims [firstDim, dims) (dense).
uint64_t RowBytes(const TensorGeom& t, int firstDim)
{
    uint64_t elements = 1;
    for (int d = firstDim; d < t.dims; ++d) {
        elements *= Size(t, d);
    }
    return elements * t.elemBytes;
}

uint64_t Gcd(uint64_t a, uint64_t b)
{
    while (b != 0) {
        const uint64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

/**
 * reshape_and_cache: the stripes that give every cache slot one writing core (t.usedCores and
 * t.blockSize set). About kStripesPerCore stripes of the call's tokens per core: a prefill into
 * consecutive positions spreads over all cores in stripes that stay long runs, while the runs a
 * core copies (each a DMA in and out) stay few. Decode tokens lie in distinct blocks, whose
 * owners spread because blockStripes, the step from block to block, is coprime to usedCores
 * (with a step sharing a factor with the core count, equal positions of consecutive blocks would
 * land on a fraction of the cores). One core owns everything: one stripe per block.
 */
void SplitSlots(ReshapeTiling& t)
{
    if (t.usedCores == 0) {
        return;
    }
    const uint64_t stripes = kStripesPerCore * t.usedCores;
    const uint64_t wanted = t.usedCores == 1 ? t.blockSize : Min(CeilDiv(t.tokens, stripes), t.blockSize);
    t.stripeSlots = CeilDiv(t.blockSize, CeilDiv(t.blockSize, wanted));  // as many stripes, evened out
    t.blockStripes = CeilDiv(t.blockSize, t.stripeSlots);
    while (Gcd(t.blockStripes, t.usedCores) != 1) {
        ++t.blockStripes;
    }
}

/// The byte geometry of one cache and its token rows (absent: all 0). ND cache (block, slot, row);
/// NZ (block, piece, slot, 32-byte piece).
CacheTiling CacheTilingOf(const CacheGeometry& call, bool nd)
{
    CacheTiling t{};
    const TensorGeom& cache = call.cache;
    if (!cache.present) {
        return t;
    }
    t.rowBytes = nd ? RowBytes(cache, 2) : Size(cache, 1) * Size(cache, 3) * cache.elemBytes;
    t.rowStride = Stride(call.rows, 0);
    t.rowsSpan = SpanBytes(call.rows);
    t.blockStride = Stride(cache, 0);
    t.slotStride = Stride(cache, nd ? 1 : 2);
    t.pieceStride = nd ? 0 : Stride(cache, 1);
    t.cacheSpan = SpanBytes(cache);
    return t;
}

}  // namespace

uint64_t SpanBytes(const TensorGeom& tensor)
{
    if (!tensor.present || Numel(tensor) == 0) {
        return 0;
    }
    uint64_t last = 0;
    for (int d = 0; d < tensor.dims; ++d) {
        last += (Size(tensor, d) - 1) * Stride(tensor, d);
    }
    return last + tensor.elemBytes;
}

const char* TilingStatusMessage(int status)
{
    switch (status) {
        case kTilingOk:
            return "ok";
        case kTilingNoCores:
            return "the core count must be at least 1";
        case kTilingUbTooSmall:
            return "the UB size leaves no room for the staged index windows and two 32-byte copy buffers";
        case kTilingBadShape:
            return "a row is empty or not a multiple of 32 bytes where the kernel needs it, the layout is "
                   "unknown, or an index tensor's elements are not 4 or 8 bytes";
        default:
            return "unknown tiling status";
    }
}

int ComputeKvCacheTiling(const KvCacheGeometry& call, uint64_t coreCount, uint64_t ubBytes, KvCacheTiling* tiling)
{
    if (coreCount == 0) {
        return kTilingNoCores;
    }
    const TensorGeom& past = call.past;
    KvCacheTiling t{};
    t.rowBytes = RowBytes(past, 3);
    if (!RowOk(t.rowBytes) || !IndexOk(call.tokenOffset) || !IndexOk(call.seqLen) ||
        (call.layer.present && !IndexOk(call.layer))) {
        return kTilingBadShape;
    }
    t.ntokens = Size(call.newKv, 0);
    t.newKvRowStride = Stride(call.newKv, 0);
    t.newKvSpan = SpanBytes(call.newKv);
    t.layers = Size(past, 0);
    t.batch = Size(past, 1);
    t.maxSeqLen = Size(past, 2);
    t.pastLayerStride = Stride(past, 0);
    t.pastBatchStride = Stride(past, 1);
    t.pastSeqStride = Stride(past, 2);
    t.pastSpan = SpanBytes(past);
    t.layerId = static_cast<uint64_t>(call.layerId);
    t.layerElemBytes = call.layer.present ? call.layer.elemBytes : 0;
    t.offsetElemBytes = call.tokenOffset.elemBytes;
    t.seqLenElemBytes = call.seqLen.elemBytes;
    constexpr uint64_t windows = 2;
    t.stageBytes = StageBytes(t.batch * Max(t.offsetElemBytes, t.seqLenElemBytes), windows, ubBytes);
    t.chunkBytes = ChunkBytes(ubBytes, windows * t.stageBytes);
    if (t.chunkBytes < kBlockBytes) {
        return kTilingUbTooSmall;
    }
    const bool nowhere = t.layers == 0 || t.batch == 0 || t.maxSeqLen == 0;
    t.usedCores = nowhere ? 0 : Min(coreCount, t.ntokens);
    *tiling = t;
    return kTilingOk;
}

int ComputePagedLoadTiling(const PagedLoadGeometry& call, uint64_t coreCount, uint64_t ubBytes,
                           PagedLoadTiling* tiling)
{
    if (coreCount == 0) {
        return kTilingNoCores;
    }
    const bool nd = call.layout == kLayoutNd;
    if ((!nd && call.layout != kLayoutNz) || !IndexOk(call.blockTable) || !IndexOk(call.contextLens) ||
        (call.seqStarts.present && !IndexOk(call.seqStarts))) {
        return kTilingBadShape;
    }
    PagedLoadTiling t{};
    t.layout = call.layout;
    t.cumsum = call.cumsum ? 1 : 0;
    t.batch = Size(call.blockTable, 0);
    t.maxBlocks = Size(call.blockTable, 1);
    t.numBlocks = Size(call.key.cache, 0);
    t.blockSize = Size(call.key.cache, nd ? 1 : 2);
    t.tableElemBytes = call.blockTable.elemBytes;
    t.lensElemBytes = call.contextLens.elemBytes;
    t.startsElemBytes = call.seqStarts.present ? call.seqStarts.elemBytes : 0;
    t.key = CacheTilingOf(call.key, nd);
    t.keyRows = Size(call.key.rows, 0);
    t.value = CacheTilingOf(call.value, nd);
    t.valueRows = Size(call.value.rows, 0);
    if (!RowOk(t.key.rowBytes) || !RowOk(t.value.rowBytes)) {
        return kTilingBadShape;
    }
    const uint64_t windows = call.seqStarts.present ? 3 : 2;
    const uint64_t needed = Max(Max((t.batch + t.cumsum) * t.lensElemBytes, t.batch * t.startsElemBytes),
                                t.batch * t.maxBlocks * t.tableElemBytes);
    t.stageBytes = StageBytes(needed, windows, ubBytes);
    t.chunkBytes = ChunkBytes(ubBytes, windows * t.stageBytes);
    if (t.chunkBytes < kBlockBytes) {
        return kTilingUbTooSmall;
    }
    const uint64_t rows = Max(t.keyRows, t.valueRows);
    const bool nothing = t.batch == 0 || rows == 0 || t.maxBlocks == 0 || t.numBlocks == 0 || t.blockSize == 0;
    t.usedCores = nothing ? 0 : Min(coreCount, rows);
    *tiling = t;
    return kTilingOk;
}

int ComputeReshapeTiling(const ReshapeGeometry& call, uint64_t coreCount, uint64_t ubBytes, ReshapeTiling* tiling)
{
    if (coreCount == 0) {
        return kTilingNoCores;
    }
    const bool nd = call.layout == kLayoutNd;
    if ((!nd && call.layout != kLayoutNz) || !IndexOk(call.slotMapping)) {
        return kTilingBadShape;
    }
    ReshapeTiling t{};
    t.layout = call.layout;
    t.tokens = Size(call.slotMapping, 0);
    t.numBlocks = Size(call.key.cache, 0);
    t.blockSize = Size(call.key.cache, nd ? 1 : 2);
    t.slotElemBytes = call.slotMapping.elemBytes;
    t.hasValue = call.value.rows.present ? 1 : 0;
    t.key = CacheTilingOf(call.key, nd);
    t.value = CacheTilingOf(call.value, nd);
    // ND rows may be any size (DataCopyPad); NZ rows are whole 32-byte pieces; rows of no bytes
    // are taken as on the host paths (the kernels write no codes for them, only a dynamic side's scales).
    const auto rowOk = [nd](uint64_t rowBytes) { return nd || rowBytes % kBlockBytes == 0; };
    if (!rowOk(t.key.rowBytes) || (t.hasValue != 0 && !rowOk(t.value.rowBytes))) {
        return kTilingBadShape;
    }
    constexpr uint64_t windows = 1;
    t.stageBytes = StageBytes(t.tokens * t.slotElemBytes, windows, ubBytes);
    t.chunkBytes = ChunkBytes(ubBytes, windows * t.stageBytes);
    if (t.chunkBytes < kBlockBytes) {
        return kTilingUbTooSmall;
    }
    t.usedCores = Min(Min(coreCount, t.tokens), t.numBlocks * t.blockSize);
    SplitSlots(t);
    *tiling = t;
    return kTilingOk;
}

namespace {

/// One side's QuantTiling; false when the kernel cannot take it (a parameter of another length,
/// a scale cache that is not [numBlocks, blockSize, heads]).
bool QuantTilingOf(const QuantSideGeometry& side, const CacheTiling& cache, QuantTiling* q)
{
    *q = QuantTiling{};
    q->scheme = side.scheme;
    if (side.scheme == kQuantNone) {
        return true;
    }
    q->inputType = side.inputType;
    q->compute = side.compute;
    q->heads = side.heads;
    q->headSize = side.headSize;
    q->rowElems = side.heads * side.headSize;
    if (q->rowElems != cache.rowBytes) {  // int8 codes: one byte per element (rows of none: no codes)
        return false;
    }
    const auto elemsOk = [q](uint64_t n) { return n == 1 || n == q->heads || n == q->rowElems; };
    if (side.scheme == kQuantDynamic) {
        const TensorGeom& c = side.scaleCache;
        if (!c.present || c.dims != 3 || Size(c, 2) != side.heads) {
            return false;
        }
        q->scaleCacheType = side.scaleCacheType;
        q->scaleBlockStride = Stride(c, 0);
        q->scaleSlotStride = Stride(c, 1);
        q->scaleHeadStride = Stride(c, 2);
        q->scaleCacheSpan = SpanBytes(c);
        return true;
    }
    q->scaleElems = Numel(side.scale);
    q->scaleType = side.scaleType;
    q->offsetElems = side.offset.present ? Numel(side.offset) : 0;
    q->offsetType = side.offsetType;
    return side.scale.present && elemsOk(q->scaleElems) && (q->offsetElems == 0 || elemsOk(q->offsetElems));
}

/// UB of the quantizing kernels for rows of n elements (quant_params.h and the kernels' queues):
/// two input rows of up to 4 bytes an element, two output rows of outBytes, the float work row,
/// the 16-bit and int32 stages and four float parameter rows.
uint64_t QuantReservedBytes(uint64_t n, uint64_t outBytes)
{
    if (n == 0) {
        return 0;
    }
    return kCopyBuffers * RoundUp(n * 4, kBlockBytes) + kCopyBuffers * RoundUp(outBytes, kBlockBytes) +
           RoundUp(n * 4, kBlockBytes) + RoundUp(n * 2, kBlockBytes) + RoundUp(n * 4, kBlockBytes) +
           16 * RoundUp(n, 8);
}

}  // namespace

int ComputeReshapeQuantTiling(const ReshapeQuantGeometry& call, uint64_t coreCount, uint64_t ubBytes,
                              ReshapeQuantTiling* tiling)
{
    if (coreCount == 0) {
        return kTilingNoCores;
    }
    ReshapeQuantTiling t{};
    const bool nd = call.base.layout == kLayoutNd;
    const CacheTiling keyCache = CacheTilingOf(call.base.key, nd);
    const CacheTiling valueCache = CacheTilingOf(call.base.value, nd);
    if (!QuantTilingOf(call.key, keyCache, &t.keyQuant) || !QuantTilingOf(call.value, valueCache, &t.valueQuant)) {
        return kTilingBadShape;
    }
    t.maxElems = Max(t.keyQuant.rowElems, t.valueQuant.rowElems);
    const uint64_t reserved = QuantReservedBytes(t.maxElems, t.maxElems);
    if (reserved >= ubBytes) {
        return kTilingUbTooSmall;
    }
    const int status = ComputeReshapeTiling(call.base, coreCount, ubBytes - reserved, &t.base);
    if (status != kTilingOk) {
        return status;
    }
    t.usedCores = t.base.usedCores;
    *tiling = t;
    return kTilingOk;
}

int ComputePagedLoadDequantTiling(const PagedLoadDequantGeometry& call, uint64_t coreCount, uint64_t ubBytes,
                                  PagedLoadDequantTiling* tiling)
{
    if (coreCount == 0) {
        return kTilingNoCores;
    }
    PagedLoadDequantTiling t{};
    const bool nd = call.base.layout == kLayoutNd;
    if (!QuantTilingOf(call.key, CacheTilingOf(call.base.key, nd), &t.keyQuant) ||
        !QuantTilingOf(call.value, CacheTilingOf(call.base.value, nd), &t.valueQuant)) {
        return kTilingBadShape;
    }
    t.maxElems = Max(t.keyQuant.rowElems, t.valueQuant.rowElems);
    const uint64_t reserved = QuantReservedBytes(t.maxElems, 4 * t.maxElems);  // float output rows at most
    if (reserved >= ubBytes) {
        return kTilingUbTooSmall;
    }
    const int status = ComputePagedLoadTiling(call.base, coreCount, ubBytes - reserved, &t.base);
    if (status != kTilingOk) {
        return status;
    }
    t.usedCores = t.base.usedCores;
    *tiling = t;
    return kTilingOk;
}

int ComputeBlockCopyTiling(const BlockCopyGeometry& call, uint64_t coreCount, uint64_t ubBytes, BlockCopyTiling* tiling,
                           std::vector<uint64_t>* table)
{
    if (coreCount == 0) {
        return kTilingNoCores;
    }
    const bool transfer = call.transfer != kBlockCopyWithin;
    if (!IndexOk(call.src) || (!transfer && !IndexOk(call.dst)) || (call.cumSum.present && !IndexOk(call.cumSum)) ||
        call.addresses.size() != call.caches.size() || call.transfer > kBlockCopyScatter ||
        (transfer && (!call.buffer.present || call.bufferOffsets.size() != call.caches.size() || call.simultaneous))) {
        return kTilingBadShape;
    }
    BlockCopyTiling t{};
    t.numCaches = call.caches.size();
    t.numBlocks = call.caches.empty() ? 0 : Size(call.caches[0], 0);
    t.pairs = Size(call.src, 0);
    t.copies = transfer ? t.pairs : Size(call.dst, 0);  // a transfer's copy j is buffer row j
    t.srcElemBytes = call.src.elemBytes;
    t.dstElemBytes = transfer ? 0 : call.dst.elemBytes;
    t.cumElemBytes = call.cumSum.present ? call.cumSum.elemBytes : 0;
    t.transfer = call.transfer;
    if (transfer) {
        t.bufferRowStride = Stride(call.buffer, 0);
        t.bufferSpan = SpanBytes(call.buffer);
    }
    const uint64_t windows = transfer ? 1 : 3;
    const uint64_t needed = Max(Max(t.pairs * t.srcElemBytes, t.copies * t.dstElemBytes), t.pairs * t.cumElemBytes);
    t.stageBytes = StageBytes(needed, windows, ubBytes);
    // Segments below 64 KB: the range of DataCopyPad's blockLen that every checker accepts.
    t.chunkBytes = Min(ChunkBytes(ubBytes, windows * t.stageBytes), kMaxBlockCopyChunkBytes);
    t.simultaneous = call.simultaneous ? 1 : 0;
    if (call.simultaneous && t.copies > 0) {  // one UB slot per copy, all of them in one buffer
        const uint64_t free = ubBytes > windows * t.stageBytes ? ubBytes - windows * t.stageBytes : 0;
        t.chunkBytes = Min(RoundDown(free / t.copies, kBlockBytes), kMaxBlockCopyChunkBytes);
    }
    if (t.chunkBytes < kBlockBytes) {
        return kTilingUbTooSmall;
    }
    std::vector<uint64_t> words;
    for (size_t c = 0; c < call.caches.size(); ++c) {
        const TensorGeom& cache = call.caches[c];
        if (cache.dims != 3 || Size(cache, 0) != t.numBlocks) {
            return kTilingBadShape;
        }
        uint64_t rows = Size(cache, 1);
        uint64_t rowBytes = Size(cache, 2) * cache.elemBytes;
        uint64_t rowStride = Stride(cache, 1);
        if (rows == 1 || rowStride == rowBytes) {  // a dense block: one row
            rowBytes *= rows;
            rows = 1;
            rowStride = rowBytes;
        }
        const uint64_t ubRow = UbPitch(rowBytes);
        const uint64_t rowsPerChunk = ubRow <= t.chunkBytes ? Min(t.chunkBytes / ubRow, kMaxBlockCount) : 1;
        const uint64_t segments = ubRow <= t.chunkBytes ? 1 : CeilDiv(rowBytes, t.chunkBytes);
        const uint64_t chunks = rowBytes == 0 ? 0 : segments > 1 ? rows * segments : CeilDiv(rows, rowsPerChunk);
        const uint64_t entry[kBlockCopyCacheWords] = {call.addresses[c], Stride(cache, 0), rowStride, rows, rowBytes,
                                                      SpanBytes(cache), rowsPerChunk, segments, chunks,
                                                      transfer ? call.bufferOffsets[c] : 0};
        words.insert(words.end(), entry, entry + kBlockCopyCacheWords);
        t.items += (t.simultaneous ? 1 : t.copies) * chunks;  // simultaneous: a core owns a chunk of every copy
    }
    t.usedCores = t.numBlocks == 0 || t.pairs == 0 || t.copies == 0 ? 0 : Min(coreCount, t.items);
    *tiling = t;
    *table = std::move(words);
    return kTilingOk;
}

int ComputeBatchMemcpyTiling(const BatchMemcpyGeometry& call, uint64_t coreCount, uint64_t ubBytes,
                             BatchMemcpyTiling* tiling)
{
    if (coreCount == 0) {
        return kTilingNoCores;
    }
    if (call.src.elemBytes != 8 || call.dst.elemBytes != 8 || !IndexOk(call.sizes) || Size(call.dst, 0) != Size(call.src, 0) ||
        Size(call.sizes, 0) != Size(call.src, 0)) {
        return kTilingBadShape;
    }
    BatchMemcpyTiling t{};
    t.copies = Size(call.src, 0);
    t.sizeElemBytes = call.sizes.elemBytes;
    constexpr uint64_t windows = 3;
    t.stageBytes = StageBytes(t.copies * 8, windows, ubBytes);
    t.chunkBytes = Min(ChunkBytes(ubBytes, windows * t.stageBytes), kMaxBlockCopyChunkBytes);
    if (t.chunkBytes < kBlockBytes) {
        return kTilingUbTooSmall;
    }
    t.usedCores = t.copies == 0 ? 0 : coreCount;  // the sizes are the kernel's to read: every core takes a share
    *tiling = t;
    return kTilingOk;
}

int ComputeTransferTiling(const TransferGeometry& call, uint64_t coreCount, uint64_t ubBytes, TransferTiling* tiling,
                          std::vector<uint64_t>* table)
{
    if (coreCount == 0) {
        return kTilingNoCores;
    }
    if (!IndexOk(call.ids) || call.addresses.size() != call.spans.size() || call.layers == 0) {
        return kTilingBadShape;
    }
    TransferTiling t{};
    const uint64_t e = call.cache.elemBytes;
    t.gather = call.gather ? 1 : 0;
    t.numCaches = call.addresses.size();
    t.layers = call.layers;
    t.blocks = Size(call.ids, 0);
    t.numBlocks = Size(call.cache, 0);
    t.idsElemBytes = call.ids.elemBytes;
    t.cacheBlockStride = Stride(call.cache, 0);
    t.bufferKvStride = static_cast<uint64_t>(call.bufferSteps[0]);
    t.bufferLayerStride = static_cast<uint64_t>(call.bufferSteps[1]);
    t.bufferBlockStride = static_cast<uint64_t>(call.bufferSteps[2]);
    t.bufferSpan = call.bufferSpan;
    // Loops of size > 1, outermost first, in bytes; the innermost contiguous on both sides become the row.
    uint64_t size[kTransferFrameDims], cache[kTransferFrameDims], buffer[kTransferFrameDims];
    int n = 0;
    for (int d = 0; d < kTransferFrameDims; ++d) {
        if (call.frame[d] == 0) {
            *tiling = t;  // an empty block: nothing to move
            return kTilingOk;
        }
        if (call.frame[d] > 1) {
            size[n] = static_cast<uint64_t>(call.frame[d]);
            cache[n] = static_cast<uint64_t>(call.cacheStrides[d]) * e;
            buffer[n] = static_cast<uint64_t>(call.bufferStrides[d]) * e;
            ++n;
        }
    }
    t.rowBytes = e;
    while (n > 0 && cache[n - 1] == t.rowBytes && buffer[n - 1] == t.rowBytes) {
        t.rowBytes *= size[--n];
    }
    int loops = 0;  // merge each loop into the previous one where both sides allow
    for (int d = 0; d < n; ++d) {
        if (loops > 0 && cache[loops - 1] == cache[d] * size[d] && buffer[loops - 1] == buffer[d] * size[d]) {
            size[loops - 1] *= size[d];
            cache[loops - 1] = cache[d];
            buffer[loops - 1] = buffer[d];
            continue;
        }
        size[loops] = size[d];
        cache[loops] = cache[d];
        buffer[loops] = buffer[d];
        ++loops;
    }
    if (loops > 4) {
        return kTilingBadShape;
    }
    uint64_t outer[3] = {1, 1, 1}, cacheOuter[3] = {0, 0, 0}, bufferOuter[3] = {0, 0, 0};
    t.rows = 1;
    if (loops > 0) {
        t.rows = size[loops - 1];
        t.cacheRowStride = cache[loops - 1];
        t.bufferRowStride = buffer[loops - 1];
        for (int d = 0; d < loops - 1; ++d) {
            const int slot = 3 - (loops - 1) + d;
            outer[slot] = size[d];
            cacheOuter[slot] = cache[d];
            bufferOuter[slot] = buffer[d];
        }
    } else {
        t.cacheRowStride = t.rowBytes;
        t.bufferRowStride = t.rowBytes;
    }
    t.outer0 = outer[0], t.cacheOuter0 = cacheOuter[0], t.bufferOuter0 = bufferOuter[0];
    t.outer1 = outer[1], t.cacheOuter1 = cacheOuter[1], t.bufferOuter1 = bufferOuter[1];
    t.outer2 = outer[2], t.cacheOuter2 = cacheOuter[2], t.bufferOuter2 = bufferOuter[2];
    constexpr uint64_t windows = 1;
    t.stageBytes = StageBytes(t.blocks * t.idsElemBytes, windows, ubBytes);
    t.chunkBytes = Min(ChunkBytes(ubBytes, windows * t.stageBytes), kMaxBlockCopyChunkBytes);
    if (t.chunkBytes < kBlockBytes) {
        return kTilingUbTooSmall;
    }
    const uint64_t ubRow = UbPitch(t.rowBytes);
    t.rowsPerChunk = ubRow <= t.chunkBytes ? Min(t.chunkBytes / ubRow, kMaxBlockCount) : 1;
    t.segments = ubRow <= t.chunkBytes ? 1 : CeilDiv(t.rowBytes, t.chunkBytes);
    t.rowGroups = t.segments > 1 ? t.rows : CeilDiv(t.rows, t.rowsPerChunk);
    if (t.segments > 1) {  // one row per chunk: its groups are its rows
        t.rowsPerChunk = 1;
    }
    t.chunks = outer[0] * outer[1] * outer[2] * t.rowGroups * t.segments;
    t.items = t.numCaches * t.blocks * t.chunks;
    t.usedCores = t.numBlocks == 0 ? 0 : Min(coreCount, t.items);
    std::vector<uint64_t> words;
    for (size_t c = 0; c < call.addresses.size(); ++c) {
        words.push_back(call.addresses[c]);
        words.push_back(call.spans[c]);
    }
    *tiling = t;
    *table = std::move(words);
    return kTilingOk;
}

namespace {

void Field(std::ostringstream& out, const char* name, uint64_t value)
{
    if (out.tellp() > 0) {
        out << ' ';
    }
    out << name << '=' << value;
}

#define ASCEND_KV_DESCRIBE_FIELD(name, doc) Field(out, (group + #name).c_str(), tiling.name);

/// The fields of a cache group as "<group>.<field>=value".
void Cache(std::ostringstream& out, const std::string& group, const CacheTiling& tiling)
{
    ASCEND_KV_CACHE_TILING_FIELDS(ASCEND_KV_DESCRIBE_FIELD)
}

#undef ASCEND_KV_DESCRIBE_FIELD

}  // namespace

#define ASCEND_KV_DESCRIBE_FIELD(name, doc) Field(out, #name, tiling.name);
#define ASCEND_KV_DESCRIBE_CACHE(name, doc) Cache(out, #name ".", tiling.name);

std::string DescribeTiling(const KvCacheTiling& tiling)
{
    std::ostringstream out;
    ASCEND_KV_KV_CACHE_TILING_FIELDS(ASCEND_KV_DESCRIBE_FIELD)
    return out.str();
}

std::string DescribeTiling(const PagedLoadTiling& tiling)
{
    std::ostringstream out;
    ASCEND_KV_PAGED_LOAD_TILING_FIELDS(ASCEND_KV_DESCRIBE_FIELD, ASCEND_KV_DESCRIBE_CACHE)
    return out.str();
}

std::string DescribeTiling(const ReshapeTiling& tiling)
{
    std::ostringstream out;
    ASCEND_KV_RESHAPE_TILING_FIELDS(ASCEND_KV_DESCRIBE_FIELD, ASCEND_KV_DESCRIBE_CACHE)
    return out.str();
}

#undef ASCEND_KV_DESCRIBE_FIELD
#undef ASCEND_KV_DESCRIBE_CACHE

}  // namespace ascend_kv

namespace ascend_kv {

std::string DescribeTiling(const BlockCopyTiling& tiling)
{
    std::ostringstream out;
#define ASCEND_KV_DESCRIBE_BLOCK_COPY_FIELD(name, doc) Field(out, #name, tiling.name);
    ASCEND_KV_BLOCK_COPY_TILING_FIELDS(ASCEND_KV_DESCRIBE_BLOCK_COPY_FIELD)
#undef ASCEND_KV_DESCRIBE_BLOCK_COPY_FIELD
    return out.str();
}

std::string DescribeTiling(const TransferTiling& tiling)
{
    std::ostringstream out;
#define ASCEND_KV_DESCRIBE_TRANSFER_FIELD(name, doc) Field(out, #name, tiling.name);
    ASCEND_KV_TRANSFER_TILING_FIELDS(ASCEND_KV_DESCRIBE_TRANSFER_FIELD)
#undef ASCEND_KV_DESCRIBE_TRANSFER_FIELD
    return out.str();
}

std::string DescribeTiling(const BatchMemcpyTiling& tiling)
{
    std::ostringstream out;
#define ASCEND_KV_DESCRIBE_BATCH_MEMCPY_FIELD(name, doc) Field(out, #name, tiling.name);
    ASCEND_KV_BATCH_MEMCPY_TILING_FIELDS(ASCEND_KV_DESCRIBE_BATCH_MEMCPY_FIELD)
#undef ASCEND_KV_DESCRIBE_BATCH_MEMCPY_FIELD
    return out.str();
}

}  // namespace ascend_kv
