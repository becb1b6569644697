#include "cpu_fallback/host.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>

#include "cpu_fallback/copy.h"
#include "cpu_fallback/slot_loops.h"
#include "csrc/rules/index_values.h"
#include "csrc/rules/kernel_domain.h"

namespace ascend_kv::host {
namespace {

const char* Bytes(const at::Tensor& t) { return static_cast<const char*>(t.const_data_ptr()); }
char* MutableBytes(const at::Tensor& t) { return static_cast<char*>(t.data_ptr()); }

/// An NZ token row of `t` [.., T] (a paged load's output) as [T // E, E] with `t`'s strides.
PieceCopy NzRow(const at::Tensor& cache, const at::Tensor& rows)
{
    const int64_t e = cache.size(3), pieces = cache.size(1), step = rows.stride(rows.dim() - 1);
    return PieceCopy::Of({pieces, e}, {cache.stride(1), cache.stride(3)}, {e * step, step}, cache.element_size());
}

/// The piece of one NZ token of `tokens` [n, heads, hs] in `cache` [nb, T // E, bs, E]: a head
/// holds whole pieces (hs * itemsize is a multiple of 32), so [heads, hs // E, E].
PieceCopy NzToken(const at::Tensor& tokens, const at::Tensor& cache)
{
    const int64_t e = cache.size(3), heads = tokens.size(1), per_head = tokens.size(2) / e;
    return PieceCopy::Of({heads, per_head, e}, {tokens.stride(1), e * tokens.stride(2), tokens.stride(2)},
                         {per_head * cache.stride(1), cache.stride(1), cache.stride(3)}, cache.element_size());
}

/// A piece copied as a run of `count` pieces over its outermost loop (a flat piece: a run of one).
struct BlockRun {
    int64_t count, src_step, dst_step;
    PieceCopy piece;
};
BlockRun RunOf(const PieceCopy& block)
{
    if (block.dims == 0) {
        return {1, 0, 0, block};
    }
    PieceCopy piece = block;
    piece.dims = block.dims - 1;
    for (int d = 0; d < piece.dims; ++d) {
        piece.size[d] = block.size[d + 1];
        piece.src_step[d] = block.src_step[d + 1];
        piece.dst_step[d] = block.dst_step[d + 1];
    }
    return {block.size[0], block.src_step[0], block.dst_step[0], piece};
}

/// Block `s` of `src` to block `d` of `dst` through ATen, on this thread: for blocks whose dims
/// do not merge into the loops of a PieceCopy (a cache of many strided dims).
void CopyBlock(const at::Tensor& src, int64_t s, const at::Tensor& dst, int64_t d)
{
    dst.select(0, d).copy_(src.select(0, s));
}

}  // namespace

void KvCache(const KvCacheCall& call, const KvCachePlan& plan)
{
    const at::Tensor& new_kv = call.new_kv;
    const at::Tensor& past = call.past;
    const int64_t ntokens = new_kv.size(0), size = past.element_size();
    if (ntokens == 0) {
        return;
    }
    const PieceCopy row = PieceCopy::Of({past.size(3)}, {new_kv.stride(1)}, {past.stride(3)}, size);
    const int64_t src_step = new_kv.stride(0) * size, dst_step = past.stride(2) * size;
    const char* src = Bytes(new_kv);
    char* layer = MutableBytes(past) + plan.layer * past.stride(0) * size;
    const int64_t entry_step = past.stride(1) * size;
    const bool stream = ShouldStream(ntokens * row.Bytes(), kStreamWrites);
    ParallelFor(ntokens, row.Bytes(), [&](int64_t begin, int64_t end) {
        for (int64_t b = EntryAt(plan.read_start, begin), t = begin; t < end; ++b) {
            const int64_t n = std::min(plan.read_start[b] + plan.seq_len[b], end) - t;
            if (n <= 0) {
                continue;
            }
            char* entry = layer + b * entry_step;
            CopyRun(src + t * src_step, entry + (plan.write_start[b] + t - plan.read_start[b]) * dst_step, n, src_step,
                    dst_step, row, stream);
            t += n;
        }
        EndStreaming(stream);
    });
}

void PagedLoad(const PagedLoadCall& call, const PagedLoadPlan& plan)
{
    if (call.quant.Any()) {
        PagedLoadDequant(call, plan);
        return;
    }
    int64_t tokens = 0;
    for (const int64_t n : plan.lens) {
        tokens += n;
    }
    if (tokens == 0) {
        return;
    }
    const bool nd = call.geometry.Nd();
    struct Side {  // a cache and its output: first bytes, one token's copy, byte steps
        const char* cache;
        char* out;
        PieceCopy token;
        int64_t block_step, slot_step, out_step;
    };
    const auto side = [&](const at::Tensor& cache, const at::Tensor& out) {
        const int64_t size = cache.element_size();
        const PieceCopy token = nd ? PieceCopy::Of(cache.sizes().slice(2), cache.strides().slice(2),
                                                   out.strides().slice(1), size)
                                   : NzRow(cache, out);
        return Side{Bytes(cache), MutableBytes(out), token, cache.stride(0) * size, cache.stride(nd ? 1 : 2) * size,
                    out.stride(0) * size};
    };
    const Side sides[2] = {side(call.key_cache, call.key), side(call.value_cache, call.value)};
    const int64_t token_bytes = sides[0].token.Bytes() + sides[1].token.Bytes();
    const bool stream = ShouldStream(tokens * token_bytes, kStreamLoads);
    const auto run = [&](int64_t r, int64_t block, int64_t slot, int64_t n, bool valid) {
        for (const Side& s : sides) {
            char* out = s.out + r * s.out_step;
            if (!valid) {
                for (int64_t k = 0; k < n; ++k) {
                    Zero(out + k * s.out_step, s.token);
                }
                continue;
            }
            CopyRun(s.cache + block * s.block_step + slot * s.slot_step, out, n, s.slot_step, s.out_step, s.token,
                    stream);
        }
    };
    ForEachLoadRun(call, plan, tokens, token_bytes, run, [&] { EndStreaming(stream); });
}

BatchValues SlotsOf(const at::Tensor& slots)
{
    // The slots as the rules checked them, read once before any write: slot_mapping may share
    // memory with a cache (an int32 cache), and a slot rewritten by an earlier token must not
    // send a later one outside the caches.
    const IndexReader reader(slots);
    BatchValues slot_of(reader.Rows());
    for (int64_t i = 0; i < reader.Rows(); ++i) {
        slot_of[i] = reader(i);
    }
    return slot_of;
}

void ReshapeAndCache(const ReshapeAndCacheCall& call, const at::Tensor& slots)
{
    const int64_t n = slots.size(0), block_size = call.geometry.block_size.expect_int();
    if (n == 0 || call.geometry.Capacity().expect_int() == 0) {
        return;
    }
    const BatchValues slot_of = SlotsOf(slots);
    const bool nd = call.geometry.Nd();
    struct Side {  // an input and its cache: first bytes, one token's copy, byte steps
        const char* tokens;
        char* cache;
        PieceCopy token;
        int64_t token_step, block_step, slot_step;
    };
    const int64_t slot_dim = call.geometry.SlotDim();
    const auto side = [&](const at::Tensor& tokens, const at::Tensor& cache) {
        const int64_t size = cache.element_size();
        const PieceCopy token = nd ? PieceCopy::Of(tokens.sizes().slice(1), tokens.strides().slice(1),
                                                   cache.strides().slice(2), size)
                                   : NzToken(tokens, cache);
        return Side{Bytes(tokens), MutableBytes(cache), token, tokens.stride(0) * size, cache.stride(0) * size,
                    cache.stride(slot_dim) * size};
    };
    const Side sides[2] = {side(call.key, call.key_cache),
                           call.KeyOnly() ? Side{} : side(call.value, call.value_cache)};
    const int64_t token_bytes = sides[0].token.Bytes() + sides[1].token.Bytes();  // an absent side's is 0
    const bool stream = ShouldStream(n * token_bytes, kStreamWrites);
    const auto write = [&](int64_t i, int64_t slot) {
        const int64_t block = slot / block_size, position = slot % block_size;
        for (const Side& s : sides) {  // an absent side copies nothing (its piece is empty)
            Copy(s.tokens + i * s.token_step, s.cache + block * s.block_step + position * s.slot_step, s.token, stream);
        }
    };
    ForEachSlot(slot_of, block_size, token_bytes, write, [&] { EndStreaming(stream); });
}

namespace {

/// The simultaneous form's staging: the source blocks some copy overwrites (a block both a source
/// and a destination), each listed once, and for each copy its slot among them (-1: read in place).
/// Self-copies change nothing and are dropped from `pairs`.
struct Staging {
    std::vector<int64_t> blocks;
    std::vector<int64_t> slot;
    BlockCopyPlan pairs;
};

Staging StagingOf(const BlockCopyPlan& plan)
{
    Staging staging;
    const std::unordered_set<int64_t> written(plan.destinations.begin(), plan.destinations.end());
    std::unordered_map<int64_t, int64_t> slot_of;
    for (size_t j = 0; j < plan.destinations.size(); ++j) {
        const int64_t s = plan.sources[j], d = plan.destinations[j];
        if (s == d) {
            continue;
        }
        int64_t slot = -1;
        if (written.count(s)) {
            const auto [at, added] = slot_of.emplace(s, static_cast<int64_t>(staging.blocks.size()));
            if (added) {
                staging.blocks.push_back(s);
            }
            slot = at->second;
        }
        staging.pairs.sources.push_back(s);
        staging.pairs.destinations.push_back(d);
        staging.slot.push_back(slot);
    }
    return staging;
}

/// Contiguous element strides of `sizes`, row-major.
std::vector<int64_t> DenseStrides(c10::IntArrayRef sizes)
{
    std::vector<int64_t> strides(sizes.size());
    int64_t step = 1;
    for (size_t d = sizes.size(); d-- > 0;) {
        strides[d] = step;
        step *= sizes[d];
    }
    return strides;
}

}  // namespace

void BlockCopy(const BlockCopyCall& call, const BlockCopyPlan& given)
{
    // Simultaneous: the overwritten sources are first copied out, then every copy reads its source
    // from there or in place (staged blocks only: a temporary proportional to the copies).
    const Staging staging = call.simultaneous ? StagingOf(given) : Staging{};
    const BlockCopyPlan& plan = call.simultaneous ? staging.pairs : given;
    const int64_t copies = static_cast<int64_t>(plan.destinations.size());
    const int64_t staged = static_cast<int64_t>(staging.blocks.size());
    struct Cache {  // first byte, bytes between blocks, one block's copy (in place, to and from its staging)
        char* data;
        int64_t block_step;
        PieceCopy block, to_stage, from_stage;
        char* stage;
    };
    std::vector<Cache> caches;
    std::vector<at::Tensor> stages;
    int64_t bytes = 0;
    for (const at::Tensor& given : call.caches) {
        if (!given.numel()) {
            continue;
        }
        const at::Tensor cache = InMemoryOrder(given);  // the same bytes, in as few loops as they allow
        const c10::IntArrayRef sizes = cache.sizes().slice(1), strides = cache.strides().slice(1);
        const PieceCopy block = PieceCopy::Of(sizes, strides, strides, cache.element_size());
        if (!block.Fits()) {  // blocks of more strided dims than a piece loops over: through ATen, the
            // overwritten sources staged first as below (none unless simultaneous)
            const at::Tensor stage = staged ? cache.index_select(0, at::tensor(staging.blocks, at::kLong)) : at::Tensor();
            for (int64_t j = 0; j < copies; ++j) {
                if (staged && staging.slot[j] >= 0) {
                    CopyBlock(stage, staging.slot[j], cache, plan.destinations[j]);
                } else {
                    CopyBlock(cache, plan.sources[j], cache, plan.destinations[j]);
                }
            }
            continue;
        }
        const std::vector<int64_t> dense = DenseStrides(sizes);
        char* stage = nullptr;
        if (staged) {
            stages.push_back(at::empty({staged * block.Bytes()}, cache.options().dtype(at::kByte)));
            stage = MutableBytes(stages.back());
        }
        caches.push_back({MutableBytes(cache), cache.stride(0) * cache.element_size(), block,
                          PieceCopy::Of(sizes, strides, dense, cache.element_size()),
                          PieceCopy::Of(sizes, dense, strides, cache.element_size()), stage});
        bytes = std::max(bytes, block.Bytes());
    }
    const int64_t count = static_cast<int64_t>(caches.size());
    if (staged) {
        ParallelFor(staged * count, bytes, [&](int64_t begin, int64_t end) {
            for (int64_t k = begin; k < end; ++k) {
                const Cache& cache = caches[k / staged];
                const int64_t i = k % staged;
                Copy(cache.data + staging.blocks[i] * cache.block_step, cache.stage + i * cache.block.Bytes(),
                     cache.to_stage, false);
            }
        });
    }
    const int64_t items = copies * count;
    const bool stream = ShouldStream(items * bytes, kStreamWrites);
    ParallelFor(items, bytes, [&](int64_t begin, int64_t end) {
        for (int64_t k = begin; k < end; ++k) {
            const Cache& cache = caches[k / copies];
            const int64_t j = k % copies;
            char* to = cache.data + plan.destinations[j] * cache.block_step;
            if (staged && staging.slot[j] >= 0) {
                Copy(cache.stage + staging.slot[j] * cache.block.Bytes(), to, cache.from_stage, stream);
            } else {
                Copy(cache.data + plan.sources[j] * cache.block_step, to, cache.block, stream);
            }
        }
        EndStreaming(stream);
    });
}

void SwapBlocks(const at::Tensor& src, const at::Tensor& dst, const BlockCopyPlan& pairs)
{
    if (src.numel() == 0 || dst.numel() == 0) {
        return;
    }
    const int64_t size = src.element_size(), n = static_cast<int64_t>(pairs.sources.size());
    const PieceCopy block = PieceCopy::Of(src.sizes().slice(1), src.strides().slice(1), dst.strides().slice(1), size);
    if (!block.Fits()) {  // blocks of more strided dims than a piece loops over
        for (int64_t i = 0; i < n; ++i) {
            CopyBlock(src, pairs.sources[i], dst, pairs.destinations[i]);
        }
        return;
    }
    const bool stream = ShouldStream(n * block.Bytes(), kStreamWrites);
    ParallelFor(n, block.Bytes(), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            Copy(Bytes(src) + pairs.sources[i] * src.stride(0) * size,
                 MutableBytes(dst) + pairs.destinations[i] * dst.stride(0) * size, block, stream);
        }
        EndStreaming(stream);
    });
}

bool TransferBlocks(const TransferCall& call, const std::vector<int64_t>& ids)
{
    const int64_t n = static_cast<int64_t>(ids.size()), layers = call.Layers();
    const int64_t items = static_cast<int64_t>(call.caches.size()) * layers * n;
    if (items == 0 || call.buffer.numel() == 0) {
        return true;
    }
    const at::Tensor& buffer = call.buffer;
    const int64_t size = buffer.element_size();
    // The frame's loops in the call's order (TransferCall::Ordered); the outermost left is the run.
    const FrameArray sizes = call.Ordered(call.frame);
    const FrameArray buffer_strides = call.Ordered(call.Strides(buffer, call.buffer_layout, true));
    struct Cache {  // first byte, bytes between blocks, one block's copy as a run of pieces
        char* data;
        int64_t block_step;
        BlockRun block;
    };
    std::vector<Cache> caches;
    for (const auto& side : call.caches) {
        for (const at::Tensor& cache : side) {
            const FrameArray cache_strides = call.Ordered(call.Strides(cache, call.cache_layout, false));
            const PieceCopy block = PieceCopy::Of(sizes, call.gather ? cache_strides : buffer_strides,
                                                  call.gather ? buffer_strides : cache_strides, size);
            if (!block.Fits()) {
                return false;
            }
            caches.push_back({MutableBytes(cache), cache.stride(0) * size, RunOf(block)});
        }
    }
    const int64_t block_bytes = caches[0].block.count * caches[0].block.piece.Bytes();
    const int64_t kv_step = buffer.stride(0) * size, layer_step = buffer.stride(1) * size, row_step = buffer.stride(2) * size;
    char* rows = MutableBytes(buffer);
    const bool stream = ShouldStream(items * block_bytes, kStreamWrites);
    ParallelFor(items, block_bytes, [&](int64_t begin, int64_t end) {
        for (int64_t k = begin; k < end; ++k) {
            const int64_t cache_index = k / n, j = k % n;
            const Cache& cache = caches[cache_index];
            char* block = cache.data + ids[j] * cache.block_step;
            char* row = rows + (cache_index / layers) * kv_step + (cache_index % layers) * layer_step + j * row_step;
            const BlockRun& run = cache.block;
            CopyRun(call.gather ? block : row, call.gather ? row : block, run.count, run.src_step, run.dst_step,
                    run.piece, stream);
        }
        EndStreaming(stream);
    });
    return true;
}

void TransferStateSlots(const StateTransferCall& call, const std::vector<int64_t>& ids)
{
    const int64_t n = static_cast<int64_t>(ids.size()), count = static_cast<int64_t>(call.states.size());
    struct Slots {  // a state's first byte, bytes between slots, one slot's copy, its place in a buffer row
        char* data;
        int64_t slot_step, offset;
        PieceCopy piece;
    };
    std::vector<Slots> slots;
    char* rows = MutableBytes(call.buffer);
    const int64_t row_step = call.buffer.stride(0);
    int64_t bytes = 0;
    for (int64_t c = 0; c < count; ++c) {
        const at::Tensor& state = call.states[c];
        const c10::IntArrayRef sizes = state.sizes().slice(1), strides = state.strides().slice(1);
        const std::vector<int64_t> dense = DenseStrides(sizes);
        const int64_t size = state.element_size();
        PieceCopy piece = call.gather ? PieceCopy::Of(sizes, strides, dense, size) : PieceCopy::Of(sizes, dense, strides, size);
        if (!piece.Fits()) {  // more strided loops than a piece holds: slot by slot through one slot of memory
            for (int64_t j = 0; j < n; ++j) {
                if (ids[j] < 0) {
                    continue;
                }
                char* row = rows + j * row_step + call.offsets[c];
                const at::Tensor slot = state.select(0, ids[j]);
                at::Tensor dense_slot = call.gather ? slot.contiguous() : at::empty(sizes, state.options());
                if (call.gather) {
                    std::memcpy(row, Bytes(dense_slot), dense_slot.nbytes());
                } else {
                    std::memcpy(MutableBytes(dense_slot), row, dense_slot.nbytes());
                    slot.copy_(dense_slot);
                }
            }
            piece = PieceCopy{};  // nothing left for the threads
        }
        slots.push_back({MutableBytes(state), state.stride(0) * size, call.offsets[c], piece});
        bytes = std::max(bytes, piece.Bytes());
    }
    const int64_t items = n * count;
    const bool stream = ShouldStream(items * bytes, kStreamWrites);
    ParallelFor(items, bytes, [&](int64_t begin, int64_t end) {
        for (int64_t k = begin; k < end; ++k) {
            const int64_t j = k / count;
            const Slots& state = slots[k % count];
            if (ids[j] < 0 || state.piece.Bytes() == 0) {
                continue;
            }
            char* slot = state.data + ids[j] * state.slot_step;
            char* row = rows + j * row_step + state.offset;
            Copy(call.gather ? slot : row, call.gather ? row : slot, state.piece, stream);
        }
        EndStreaming(stream);
    });
}

void MemcpyBatch(const BatchCopies& copies)
{
    const int64_t n = static_cast<int64_t>(copies.sizes.size());
    int64_t average = 0;  // bytes per copy, for the split over threads (summed without overflow)
    for (const int64_t size : copies.sizes) {
        average += size / n;
    }
    ParallelFor(n, average, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            if (copies.sizes[i] > 0) {
                std::memcpy(reinterpret_cast<void*>(copies.dst[i]), reinterpret_cast<const void*>(copies.src[i]),
                            static_cast<size_t>(copies.sizes[i]));
            }
        }
    });
}

}  // namespace ascend_kv::host
