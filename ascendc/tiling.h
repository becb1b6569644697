/*
 * Tiling of the kernels: computed on the host from shapes, byte strides, the vector-core
 * count and the UB size (ascendc/host/tiling.cpp), read by the kernels (ascendc/kernels/).
 * Shared by the NPU build and the host build.
 *
 * Each struct is generated from one field list (an X-macro): the struct, the host's printout
 * and everything else that walks the fields follow from it. The paged kernels' lists name a
 * CacheTiling group (the geometry of one cache, one list) for key and for value. Every field is a
 * uint64_t, so the struct has no padding, one layout on every compiler, and a kernel reads it as
 * 64-bit words.
 * Sizes and strides are in bytes. The tiling never depends on index values: the kernels read
 * the raw index tensors themselves (int32 or int64 each, as the *ElemBytes fields say).
 */
#ifndef ASCEND_KV_TILING_H
#define ASCEND_KV_TILING_H

#include <cstdint>

namespace ascend_kv {

/// Bytes in one hardware data block (the unit of DataCopy lengths and UB addresses).
constexpr uint64_t kBlockBytes = 32;
/// Largest blockCount of one DataCopy / DataCopyPad (12 bits).
constexpr uint64_t kMaxBlockCount = 4095;
/// Largest GM-side gap of one DataCopyPad, in bytes (32-bit field).
constexpr uint64_t kMaxPadGapBytes = 0xFFFFFFFFull;
/// Largest blockLen of one DataCopyPad, in bytes: the documented range is [1, 65535]
/// (docs/host_model.md); longer rows move in several copies.
constexpr uint64_t kMaxPadBlockBytes = 65535;
/// UB buffers of the copy queue: 2 = double buffering (MTE2 of chunk i+1 overlaps MTE3 of chunk i).
constexpr uint64_t kCopyBuffers = 2;
/// Bytes of one staged window of an index tensor, at most: well below the 16-bit limits some
/// of AscendC's own checks put on a copy length.
constexpr uint64_t kMaxStageBytes = 16 * 1024;
static_assert(kMaxStageBytes <= kMaxPadBlockBytes, "a staged window is one DataCopyPad block");

/// Paged cache layouts, the values of ascend_kv.KvCacheCfg.
constexpr uint64_t kLayoutNz = 0;
constexpr uint64_t kLayoutNd = 1;

/*
 * kv_cache: for each batch entry b, n = clamp(seq_len[b], 0, ntokens) tokens; token j is row
 * prefix_b + j of new_kv (prefix_b = n_0 + ... + n_{b-1}) and goes to
 * past[layer, b, token_offset[b] - seq_len[b] + j]; tokens outside either tensor are skipped.
 * The token number prefix_b + j is the new_kv row, so the kernel splits the rows [0, ntokens)
 * evenly over usedCores cores (the first ntokens % usedCores cores take one more).
 */
#define ASCEND_KV_KV_CACHE_TILING_FIELDS(FIELD)                                                  \
    FIELD(usedCores, "cores launched (0: nothing to do, launch nothing)")                        \
    FIELD(ntokens, "rows of new_kv")                                                             \
    FIELD(rowBytes, "bytes of one token row (hidden * itemsize), a multiple of 32")              \
    FIELD(newKvRowStride, "bytes between new_kv rows")                                           \
    FIELD(newKvSpan, "bytes from new_kv's first element to the end of its last")                 \
    FIELD(layers, "past.shape[0]")                                                               \
    FIELD(batch, "past.shape[1]: entries of token_offset and seq_len")                           \
    FIELD(maxSeqLen, "past.shape[2]")                                                            \
    FIELD(pastLayerStride, "bytes between past layers")                                          \
    FIELD(pastBatchStride, "bytes between past batch entries")                                   \
    FIELD(pastSeqStride, "bytes between past positions")                                         \
    FIELD(pastSpan, "bytes from past's first element to the end of its last")                   \
    FIELD(layerId, "the layer written (two's complement) when there is no layer tensor")         \
    FIELD(layerElemBytes, "element size of the layer tensor (4 or 8), 0: no layer tensor")       \
    FIELD(offsetElemBytes, "element size of token_offset (4 or 8)")                              \
    FIELD(seqLenElemBytes, "element size of seq_len (4 or 8)")                                   \
    FIELD(stageBytes, "UB bytes of each staged index window, a multiple of 32")                  \
    FIELD(chunkBytes, "bytes of each copy buffer, a multiple of 32 (simultaneous: of each copy's UB slot)") \
    FIELD(simultaneous, "1: every source read before any destination is written (items: chunks, not copies)")

/*
 * One cache (key or value) of the paged kernels and its tensor of token rows (paged_cache_load's
 * output, reshape_and_cache's input): their byte geometry, one group for each of key and value.
 * Cache token (blk, slot): ND a row at blk * blockStride + slot * slotStride (a row is
 * contiguous); NZ 32-byte pieces p at blk * blockStride + p * pieceStride + slot * slotStride.
 */
#define ASCEND_KV_CACHE_TILING_FIELDS(FIELD)                                                     \
    FIELD(rowBytes, "bytes of one token row (0: no such cache)")                                 \
    FIELD(rowStride, "bytes between rows of the token tensor")                                   \
    FIELD(rowsSpan, "bytes from the token tensor's first element to the end of its last")        \
    FIELD(blockStride, "bytes between cache blocks")                                             \
    FIELD(slotStride, "bytes between cache slots of a block")                                    \
    FIELD(pieceStride, "NZ: bytes between the 32-byte pieces of a token (ND: 0)")                \
    FIELD(cacheSpan, "bytes from the cache's first element to the end of its last")

/*
 * paged_cache_load: for each batch entry b, n_b = clamp(lens_b, 0, R) tokens (R = max(keyRows,
 * valueRows); lens_b = context_lens[b], or context_lens[b+1] - context_lens[b] in cumsum mode);
 * token j sits in block block_table[b, floor(seq_starts[b] / blockSize) + j / blockSize] at slot
 * j % blockSize and goes to output row first_b + j (first_b: the running sum of n, or
 * context_lens[b] in cumsum mode); out-of-range columns, blocks and rows are skipped. Every core
 * scans the lengths for the output rows written and takes an even share of them itself.
 * Token rows (ND and NZ alike) are whole 32-byte blocks.
 */
#define ASCEND_KV_PAGED_LOAD_TILING_FIELDS(FIELD, CACHE)                                         \
    FIELD(usedCores, "cores launched (0: nothing to do, launch nothing)")                        \
    FIELD(layout, "kLayoutNd or kLayoutNz")                                                      \
    FIELD(cumsum, "1: context_lens holds batch + 1 cumulative lengths")                          \
    FIELD(batch, "block_table.shape[0]")                                                         \
    FIELD(maxBlocks, "block_table.shape[1]")                                                     \
    FIELD(numBlocks, "cache blocks (key_cache and value_cache alike)")                           \
    FIELD(blockSize, "token slots per cache block")                                              \
    FIELD(tableElemBytes, "element size of block_table (4 or 8)")                                \
    FIELD(lensElemBytes, "element size of context_lens (4 or 8)")                                \
    FIELD(startsElemBytes, "element size of seq_starts (4 or 8), 0: no seq_starts")              \
    CACHE(key, "key_cache and the key output")                                                   \
    FIELD(keyRows, "rows of the key output")                                                     \
    CACHE(value, "value_cache and the value output")                                             \
    FIELD(valueRows, "rows of the value output")                                                 \
    FIELD(stageBytes, "UB bytes of each staged index window, a multiple of 32")                  \
    FIELD(chunkBytes, "bytes of each copy buffer, a multiple of 32 (simultaneous: of each copy's UB slot)") \
    FIELD(simultaneous, "1: every source read before any destination is written (items: chunks, not copies)")

/*
 * reshape_and_cache: token i (i < tokens) goes to slot s = slot_mapping[i] of each cache when
 * 0 <= s < numBlocks * blockSize (block s / blockSize, position s % blockSize); other slots are
 * skipped. Every slot has one writing core: position p of block b lies in stripe p / stripeSlots,
 * which core (b * blockStripes + p / stripeSlots) % usedCores owns; each core scans all tokens and
 * writes those bound for its stripes, in token order. Input rows are contiguous; ND rows may be
 * any size (the kernel moves them with DataCopyPad), NZ rows are whole 32-byte pieces.
 */
#define ASCEND_KV_RESHAPE_TILING_FIELDS(FIELD, CACHE)                                            \
    FIELD(usedCores, "cores launched (0: nothing to do, launch nothing)")                        \
    FIELD(layout, "kLayoutNd or kLayoutNz")                                                      \
    FIELD(tokens, "entries of slot_mapping: the tokens written")                                 \
    FIELD(numBlocks, "cache blocks (key_cache and value_cache alike)")                           \
    FIELD(blockSize, "token slots per cache block")                                              \
    FIELD(stripeSlots, "positions per stripe, the unit of slots a core owns (1..blockSize)")     \
    FIELD(blockStripes, "stripe number step from block to block, coprime to usedCores")          \
    FIELD(slotElemBytes, "element size of slot_mapping (4 or 8)")                                \
    FIELD(hasValue, "1: value and value_cache given; 0: key-only mode (the value group all 0)")  \
    CACHE(key, "key and key_cache")                                                              \
    CACHE(value, "value and value_cache")                                                        \
    FIELD(stageBytes, "UB bytes of the staged slot_mapping window, a multiple of 32")            \
    FIELD(chunkBytes, "bytes of each copy buffer, a multiple of 32 (simultaneous: of each copy's UB slot)") \
    FIELD(simultaneous, "1: every source read before any destination is written (items: chunks, not copies)")

/*
 * block_copy: for each cache c of a table of numCaches caches (every layer's key and value caches
 * of one call), each copy j < copies and each chunk k of a block: chunk k of block src[i] goes to
 * chunk k of block dst[j], where i is the first source with cumSum[i] > j (no cumSum: i = j), when
 * i < pairs and both blocks are in [0, numBlocks); other copies are skipped. Work items are
 * (cache, copy, chunk), numbered in that order, split evenly over the cores. The caches' geometry
 * is a table in GM, kBlockCopyCacheWords uint64 words per cache (the kBlockCopy* word indices).
 * Transfer modes (gather_state_slots, scatter_state_slots): copy j moves block src[j] of each
 * cache from or to row j of a buffer, where the block's bytes lie dense from the cache's
 * bufferOffset (no dst, no cumSum; pairs = copies).
 */
#define ASCEND_KV_BLOCK_COPY_TILING_FIELDS(FIELD)                                                \
    FIELD(usedCores, "cores launched (0: nothing to do, launch nothing)")                        \
    FIELD(numCaches, "caches in the cache table")                                                \
    FIELD(numBlocks, "blocks of every cache")                                                    \
    FIELD(pairs, "entries of src (and of cumSum)")                                               \
    FIELD(copies, "entries of dst: the copies per cache")                                        \
    FIELD(srcElemBytes, "element size of src (4 or 8)")                                          \
    FIELD(dstElemBytes, "element size of dst (4 or 8)")                                          \
    FIELD(cumElemBytes, "element size of cumSum (4 or 8), 0: no cumSum (copy j takes src[j])")   \
    FIELD(items, "work items: copies times the chunks of a block, summed over the caches")       \
    FIELD(stageBytes, "UB bytes of each staged index window, a multiple of 32")                  \
    FIELD(chunkBytes, "bytes of each copy buffer, a multiple of 32 (simultaneous: of each copy's UB slot)") \
    FIELD(simultaneous, "1: every source read before any destination is written (items: chunks, not copies)") \
    FIELD(transfer, "kBlockCopyWithin, or kBlockCopyGather / kBlockCopyScatter: blocks to or from buffer rows") \
    FIELD(bufferRowStride, "transfer: bytes between buffer rows")                                \
    FIELD(bufferSpan, "transfer: bytes from the buffer's first element to the end of its last")

/// block_copy's modes: blocks copied within each cache, or moved to (gather) or from (scatter) buffer rows.
constexpr uint64_t kBlockCopyWithin = 0;
constexpr uint64_t kBlockCopyGather = 1;
constexpr uint64_t kBlockCopyScatter = 2;

/*
 * One side (key or value) of a quantizing reshape_and_cache (docs/semantics.md §13, int8 codes): how its
 * token rows become codes. A side with scheme kQuantNone is copied as bytes (the base tiling).
 * Element-type codes: kQuantFloat, kQuantHalf, kQuantBfloat16, kQuantInt8, kQuantInt32.
 * Static: scale (and offset) of scaleElems (offsetElems) elements, 1 = per tensor, heads = per
 * head, rowElems = per channel; the kernel expands them once per core to float vectors of rowElems,
 * rounded to the compute dtype. Dynamic: the row of each head gets multiplier 127 / amax (scalar
 * unit) and scale amax * fl32(1 / 127), stored to the scale cache at the token's slot.
 */
#define ASCEND_KV_QUANT_TILING_FIELDS(FIELD)                                                     \
    FIELD(scheme, "kQuantNone, kQuantDivide, kQuantMultiply or kQuantDynamic")                  \
    FIELD(inputType, "element type of the token rows: the write's input, the load's output")               \
    FIELD(compute, "static: compute dtype (kComputeFloat/Half/Bfloat16 of quant_row.h)")        \
    FIELD(heads, "heads of a token row")                                                         \
    FIELD(headSize, "elements of one head")                                                      \
    FIELD(rowElems, "elements of one token row (heads * headSize)")                              \
    FIELD(scaleElems, "static: elements of the scale (1, heads or rowElems)")                    \
    FIELD(scaleType, "static: element type of the scale")                                        \
    FIELD(offsetElems, "static: elements of the offset (0: none, 1, heads or rowElems)")         \
    FIELD(offsetType, "static: element type of the offset")                                      \
    FIELD(scaleCacheType, "dynamic: element type of the scale cache")                            \
    FIELD(scaleBlockStride, "dynamic: bytes between scale-cache blocks")                         \
    FIELD(scaleSlotStride, "dynamic: bytes between scale-cache slots")                           \
    FIELD(scaleHeadStride, "dynamic: bytes between scale-cache heads")                           \
    FIELD(scaleCacheSpan, "dynamic: bytes from the scale cache's first element to its last's end")

constexpr uint64_t kQuantNone = 0;
constexpr uint64_t kQuantDivide = 1;
constexpr uint64_t kQuantMultiply = 2;
constexpr uint64_t kQuantDynamic = 3;
/// Compute dtype of a static quantization (the promotion of input, scale and offset dtypes).
constexpr uint64_t kComputeFloat = 0;
constexpr uint64_t kComputeHalf = 1;
constexpr uint64_t kComputeBfloat16 = 2;
constexpr uint64_t kQuantFloat = 0;
constexpr uint64_t kQuantHalf = 1;
constexpr uint64_t kQuantBfloat16 = 2;
constexpr uint64_t kQuantInt8 = 3;
constexpr uint64_t kQuantInt32 = 4;

/// Words of one cache in block_copy's cache table: a block is `rows` rows of rowBytes bytes,
/// rowStride apart, blocks blockStride apart from `address`; a chunk is rowsPerChunk whole rows,
/// or, when segments > 1, one chunkBytes segment of one row (chunks = rows * segments).
constexpr uint64_t kBlockCopyAddress = 0;
constexpr uint64_t kBlockCopyBlockStride = 1;
constexpr uint64_t kBlockCopyRowStride = 2;
constexpr uint64_t kBlockCopyRows = 3;
constexpr uint64_t kBlockCopyRowBytes = 4;
constexpr uint64_t kBlockCopySpan = 5;
constexpr uint64_t kBlockCopyRowsPerChunk = 6;
constexpr uint64_t kBlockCopySegments = 7;
constexpr uint64_t kBlockCopyChunks = 8;
constexpr uint64_t kBlockCopyBufferOffset = 9;  ///< transfer modes: the cache's first byte in a buffer row
constexpr uint64_t kBlockCopyCacheWords = 10;

/*
 * batch_memcpy: copy i (< copies) moves sizes[i] bytes from address srcPtrs[i] to address
 * dstPtrs[i] (int64 tables, sizes int32 or int64; a size <= 0 copies nothing), the tables read in
 * device memory by every core. Copy i is chunks of chunkBytes; chunk k of copy i is core
 * (i + k) % usedCores's, so the bytes spread over the cores whatever the sizes (unknown on the host).
 */
#define ASCEND_KV_BATCH_MEMCPY_TILING_FIELDS(FIELD)                                              \
    FIELD(usedCores, "cores launched (0: nothing to do, launch nothing)")                        \
    FIELD(copies, "entries of each table")                                                       \
    FIELD(sizeElemBytes, "element size of sizes (4 or 8)")                                       \
    FIELD(stageBytes, "UB bytes of each staged table window, a multiple of 32")                  \
    FIELD(chunkBytes, "bytes of each copy buffer, a multiple of 32")

/*
 * transfer_blocks (gather_blocks, scatter_blocks): for each cache c of a table of numCaches caches
 * (key caches of every layer, then value caches), each j < blocks and each chunk k of a block:
 * block ids[j] of cache c and row j of the buffer's (c / layers, c % layers) exchange chunk k (gather:
 * cache to buffer; scatter: buffer to cache) when 0 <= ids[j] < numBlocks; other entries are
 * skipped. A block is a loop nest of up to three outer loops (outer*) around `rows` rows of rowBytes
 * contiguous bytes on both sides, the same for every cache (the relayout is in the two sides'
 * steps); a chunk is rowsPerChunk rows of one outer position, or, when segments > 1, one chunkBytes
 * segment of one row. Work items are (cache, j, chunk), split evenly over the cores. The cache
 * table holds kTransferCacheWords words per cache.
 */
#define ASCEND_KV_TRANSFER_TILING_FIELDS(FIELD)                                                  \
    FIELD(usedCores, "cores launched (0: nothing to do, launch nothing)")                        \
    FIELD(gather, "1: caches to the buffer (gather_blocks); 0: the buffer to the caches")         \
    FIELD(numCaches, "caches in the cache table: KV * layers")                                   \
    FIELD(layers, "caches per side (K or V)")                                                    \
    FIELD(blocks, "entries of ids: blocks per cache")                                            \
    FIELD(numBlocks, "blocks of every cache")                                                    \
    FIELD(idsElemBytes, "element size of ids (4 or 8)")                                          \
    FIELD(cacheBlockStride, "bytes between cache blocks")                                        \
    FIELD(bufferKvStride, "bytes between the buffer's K and V halves")                           \
    FIELD(bufferLayerStride, "bytes between the buffer's layers")                                \
    FIELD(bufferBlockStride, "bytes between the buffer's blocks (its n axis)")                   \
    FIELD(bufferSpan, "bytes from the buffer's first element to the end of its last")           \
    FIELD(rowBytes, "bytes of one row: contiguous on both sides")                                \
    FIELD(rows, "rows of the innermost loop")                                                    \
    FIELD(cacheRowStride, "bytes between rows in a cache block")                                 \
    FIELD(bufferRowStride, "bytes between rows in a buffer block")                               \
    FIELD(outer0, "positions of outer loop 0 (outermost)")                                       \
    FIELD(cacheOuter0, "its bytes per step in a cache block")                                    \
    FIELD(bufferOuter0, "its bytes per step in a buffer block")                                  \
    FIELD(outer1, "positions of outer loop 1")                                                   \
    FIELD(cacheOuter1, "its bytes per step in a cache block")                                    \
    FIELD(bufferOuter1, "its bytes per step in a buffer block")                                  \
    FIELD(outer2, "positions of outer loop 2 (innermost of the outer ones)")                     \
    FIELD(cacheOuter2, "its bytes per step in a cache block")                                    \
    FIELD(bufferOuter2, "its bytes per step in a buffer block")                                  \
    FIELD(rowsPerChunk, "whole rows per chunk (segments == 1)")                                  \
    FIELD(rowGroups, "chunks of rows per outer position")                                        \
    FIELD(segments, "chunks per row (> 1: a row larger than a copy buffer)")                     \
    FIELD(chunks, "chunks of one block")                                                         \
    FIELD(items, "work items: numCaches * blocks * chunks")                                      \
    FIELD(stageBytes, "UB bytes of the staged ids window, a multiple of 32")                     \
    FIELD(chunkBytes, "bytes of each copy buffer, a multiple of 32")

/// Words of one cache in transfer_blocks' cache table: its first byte and its span.
constexpr uint64_t kTransferAddress = 0;
constexpr uint64_t kTransferSpan = 1;
constexpr uint64_t kTransferCacheWords = 2;

#define ASCEND_KV_TILING_DECLARE_FIELD(name, doc) uint64_t name;
#define ASCEND_KV_TILING_DECLARE_CACHE(name, doc) CacheTiling name;

struct CacheTiling {
    ASCEND_KV_CACHE_TILING_FIELDS(ASCEND_KV_TILING_DECLARE_FIELD)
};

struct KvCacheTiling {
    ASCEND_KV_KV_CACHE_TILING_FIELDS(ASCEND_KV_TILING_DECLARE_FIELD)
};

struct PagedLoadTiling {
    ASCEND_KV_PAGED_LOAD_TILING_FIELDS(ASCEND_KV_TILING_DECLARE_FIELD, ASCEND_KV_TILING_DECLARE_CACHE)
};

struct ReshapeTiling {
    ASCEND_KV_RESHAPE_TILING_FIELDS(ASCEND_KV_TILING_DECLARE_FIELD, ASCEND_KV_TILING_DECLARE_CACHE)
};

struct BlockCopyTiling {
    ASCEND_KV_BLOCK_COPY_TILING_FIELDS(ASCEND_KV_TILING_DECLARE_FIELD)
};

struct QuantTiling {
    ASCEND_KV_QUANT_TILING_FIELDS(ASCEND_KV_TILING_DECLARE_FIELD)
};

/// reshape_and_cache with int8 quantization: the copy's tiling (its chunkBytes sized for the UB
/// the quantization leaves) and each side's quantization.
struct ReshapeQuantTiling {
    ReshapeTiling base;
    QuantTiling keyQuant;
    QuantTiling valueQuant;
    uint64_t usedCores;   ///< base.usedCores (RunKernel reads it here)
    uint64_t maxElems;    ///< largest rowElems of a quantized side: the row buffers' element count
};

/// paged_cache_load with int8 dequantization: the load's tiling (its chunkBytes sized for the UB
/// the dequantization leaves) and each side's dequantization (kQuantDivide: (q - offset) * scale,
/// kQuantDynamic: q * the token's scale from the scale cache; float32, one rounding at the end).
struct PagedLoadDequantTiling {
    PagedLoadTiling base;
    QuantTiling keyQuant;
    QuantTiling valueQuant;
    uint64_t usedCores;   ///< base.usedCores (RunKernel reads it here)
    uint64_t maxElems;    ///< largest rowElems of a dequantized side
};

struct TransferTiling {
    ASCEND_KV_TRANSFER_TILING_FIELDS(ASCEND_KV_TILING_DECLARE_FIELD)
};

struct BatchMemcpyTiling {
    ASCEND_KV_BATCH_MEMCPY_TILING_FIELDS(ASCEND_KV_TILING_DECLARE_FIELD)
};

#undef ASCEND_KV_TILING_DECLARE_FIELD
#undef ASCEND_KV_TILING_DECLARE_CACHE

// 64-bit words only: a field counts one word, a cache group as many as CacheTiling has fields.
#define ASCEND_KV_TILING_COUNT_FIELD(name, doc) +1
#define ASCEND_KV_TILING_COUNT_CACHE(name, doc) +(sizeof(CacheTiling) / 8)
static_assert(sizeof(CacheTiling) == (0 ASCEND_KV_CACHE_TILING_FIELDS(ASCEND_KV_TILING_COUNT_FIELD)) * 8,
              "CacheTiling must be uint64_t fields only");
static_assert(sizeof(KvCacheTiling) == (0 ASCEND_KV_KV_CACHE_TILING_FIELDS(ASCEND_KV_TILING_COUNT_FIELD)) * 8,
              "KvCacheTiling must be uint64_t fields only");
static_assert(sizeof(QuantTiling) == (0 ASCEND_KV_QUANT_TILING_FIELDS(ASCEND_KV_TILING_COUNT_FIELD)) * 8,
              "QuantTiling must be uint64_t fields only");
static_assert(sizeof(BlockCopyTiling) == (0 ASCEND_KV_BLOCK_COPY_TILING_FIELDS(ASCEND_KV_TILING_COUNT_FIELD)) * 8,
              "BlockCopyTiling must be uint64_t fields only");
static_assert(sizeof(TransferTiling) == (0 ASCEND_KV_TRANSFER_TILING_FIELDS(ASCEND_KV_TILING_COUNT_FIELD)) * 8,
              "TransferTiling must be uint64_t fields only");
static_assert(sizeof(BatchMemcpyTiling) == (0 ASCEND_KV_BATCH_MEMCPY_TILING_FIELDS(ASCEND_KV_TILING_COUNT_FIELD)) * 8,
              "BatchMemcpyTiling must be uint64_t fields only");
#define ASCEND_KV_TILING_COUNT(LIST) (0 LIST(ASCEND_KV_TILING_COUNT_FIELD, ASCEND_KV_TILING_COUNT_CACHE))
static_assert(sizeof(PagedLoadTiling) == ASCEND_KV_TILING_COUNT(ASCEND_KV_PAGED_LOAD_TILING_FIELDS) * 8,
              "PagedLoadTiling must be uint64_t fields and cache groups only");
static_assert(sizeof(ReshapeTiling) == ASCEND_KV_TILING_COUNT(ASCEND_KV_RESHAPE_TILING_FIELDS) * 8,
              "ReshapeTiling must be uint64_t fields and cache groups only");
static_assert(sizeof(ReshapeQuantTiling) == sizeof(ReshapeTiling) + 2 * sizeof(QuantTiling) + 16,
              "ReshapeQuantTiling must be uint64_t words only");
#undef ASCEND_KV_TILING_COUNT_FIELD
#undef ASCEND_KV_TILING_COUNT_CACHE
#undef ASCEND_KV_TILING_COUNT

}  // namespace ascend_kv

#endif  // ASCEND_KV_TILING_H
