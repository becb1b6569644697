#include "cpu_fallback/on_device.h"

#include <algorithm>
#include <limits>
#include <tuple>

#include <ATen/ATen.h>

#include "cpu_fallback/quant_aten.h"
#include "csrc/ops/upload.h"
#include "csrc/rules/dtypes.h"
#include "csrc/rules/swap_batch.h"

namespace ascend_kv::on_device {

at::Tensor Bits(const at::Tensor& t)
{
    switch (t.element_size()) {
        case 1: return t.view(at::kChar);
        case 2: return t.view(at::kShort);
        case 4: return t.view(at::kInt);
        default: return t.view(at::kLong);
    }
}

namespace {

using at::indexing::Slice;

/// A [n] mask as [n, 1, ...] for rows of `dims` dims.
at::Tensor RowMask(const at::Tensor& mask, int64_t dims)
{
    std::vector<int64_t> shape(dims, 1);
    shape[0] = -1;
    return mask.reshape(shape);
}

/// target[index][i] = rows[i] where written[i], by adding rows - target[index] to the integer bits
/// (exact, wrapping); elsewhere add zero, which changes no byte. No two written entries name one place.
void AddDifference(at::Tensor& target, const c10::List<std::optional<at::Tensor>>& index, const at::Tensor& rows,
                   const at::Tensor& written)
{
    const at::Tensor difference = rows - at::index(target, index);
    const at::Tensor kept = at::where(RowMask(written, rows.dim()), difference, at::zeros_like(difference));
    target.index_put_(index, kept, /*accumulate=*/true);
}

c10::List<std::optional<at::Tensor>> Index(std::initializer_list<at::Tensor> tensors)
{
    c10::List<std::optional<at::Tensor>> index;
    for (const at::Tensor& t : tensors) {
        index.push_back(t.defined() ? std::optional<at::Tensor>(t) : std::nullopt);
    }
    return index;
}

/// Each batch entry's token count and first output row, [batch] int64 each. Counts are clamped to
/// [0, rows]; first rows to [-rows - 1, rows], which changes no covered row and keeps first + count from wrapping.
std::pair<at::Tensor, at::Tensor> EntryRows(const at::Tensor& context_lens, bool cumsum, int64_t rows)
{
    at::Tensor lengths, first_rows;
    if (cumsum) {
        const at::Tensor low = context_lens.narrow(0, 0, context_lens.size(0) - 1);
        const at::Tensor high = context_lens.narrow(0, 1, context_lens.size(0) - 1);
        const at::Tensor difference = high - low;  // negative here: wrapped, more than rows
        lengths = at::where(high > low, at::where(difference < 0, at::scalar_tensor(rows, difference.options()),
                                                  difference.clamp_max(rows)),
                            at::zeros_like(difference));
        first_rows = low;
    } else {
        lengths = context_lens.clamp(0, rows);
        first_rows = lengths.cumsum(0) - lengths;
    }
    return {lengths, first_rows.clamp(-rows - 1, rows)};
}

/// For each output row, an entry whose range [first, first + length) covers it, and whether one
/// does: among the entries starting at or before the row, the one that reaches furthest.
std::pair<at::Tensor, at::Tensor> Writer(const at::Tensor& first_rows, const at::Tensor& lengths, const at::Tensor& row)
{
    const at::Tensor order = at::argsort(first_rows, /*stable=*/true, 0, false);
    const auto [reach, reacher] = at::cummax((first_rows + lengths).index_select(0, order), 0);
    const at::Tensor started = at::searchsorted(first_rows.index_select(0, order), row, false, /*right=*/true) - 1;
    const at::Tensor at_entry = started.clamp_min(0);
    const at::Tensor covered = (started >= 0) & (reach.index_select(0, at_entry) > row);
    const at::Tensor entry = order.index_select(0, reacher.index_select(0, at_entry));
    return {at::where(covered, entry, at::zeros_like(entry)), covered};
}

/// out[r] = token(cache, block[r], slot[r]) where valid[r], zeros where zeroed[r] (when defined);
/// other rows keep their bits. out ND [n, heads, hs] / NZ [n, T] from [nb, T // E, bs, E].
/// A dequantized side (`quant`) gathers its codes and writes them dequantized.
void GatherInto(bool nd, const at::Tensor& cache, const at::Tensor& out, const at::Tensor& block,
                const at::Tensor& slot, const at::Tensor& valid, const at::Tensor& zeroed, const QuantSide& quant)
{
    const bool dequantize = quant.Quantized();
    const at::Tensor source = dequantize ? cache : Bits(cache);
    at::Tensor target = Bits(out);
    at::Tensor tokens = nd ? at::index(source, Index({block, slot}))
                           : at::index(source, Index({block, at::Tensor(), slot})).reshape(out.sizes());
    if (dequantize) {
        const int64_t n = block.size(0);
        const at::Tensor scales =
            quant.scale_cache.defined() ? at::index(quant.scale_cache, Index({block, slot})) : at::Tensor();
        const at::Tensor codes = tokens.reshape({n, quant.heads.expect_int(), quant.head_size.expect_int()});
        tokens = Bits(Dequantize(quant, codes, scales).reshape(out.sizes()));
    }
    const at::Tensor zero = at::zeros({}, target.options());
    const at::Tensor kept = zeroed.defined() ? at::where(RowMask(zeroed, out.dim()), zero, target) : target;
    target.copy_(at::where(RowMask(valid, out.dim()), tokens, kept));
}

/// token(cache, block[i], position[i]) = tokens[i] where last[i]; the others add zero.
void Scatter(bool nd, const at::Tensor& cache, const at::Tensor& tokens, const at::Tensor& block,
             const at::Tensor& position, const at::Tensor& last)
{
    if (cache.numel() == 0) {
        return;
    }
    at::Tensor target = nd ? Bits(cache) : Bits(cache).transpose(1, 2);  // [nb, bs, ...]
    const int64_t n = block.size(0);
    std::vector<int64_t> shape = {n};
    for (int64_t d = 2; d < target.dim(); ++d) {
        shape.push_back(target.size(d));
    }
    const at::Tensor rows = Bits(tokens).narrow(0, 0, n).reshape(shape);
    AddDifference(target, Index({block, position}), rows, last);
}

/// The writes of n rows to flat slots: which rows write (the last naming each slot in [0, capacity);
/// others, padding and out of range, write nothing), and their blocks and positions (0 where none).
std::tuple<at::Tensor, at::Tensor, at::Tensor> LastWrites(const at::Tensor& slot_index, int64_t capacity,
                                                          int64_t block_size)
{
    const int64_t n = slot_index.size(0);
    const at::Tensor slots = slot_index.to(at::kLong);
    const at::Tensor written = (slots >= 0) & (slots < capacity);
    const at::Tensor ranked = at::where(written, slots, at::full_like(slots, -1));  // skipped rows sort first
    const auto [ordered, order] = at::sort(ranked, /*stable=*/true, 0, false);
    const at::Tensor source = order.index_select(0, at::searchsorted(ordered, ranked, false, /*right=*/true) - 1);
    const at::Tensor last = written & (source == at::arange(n, slots.options()));
    const at::Tensor slot = at::where(written, slots, at::zeros_like(slots));  // skipped: add zero at slot 0
    return {last, at::div(slot, block_size, "floor"), slot.remainder(block_size)};
}

/// The pairs' positions sorted by destination (stable).
std::vector<int64_t> DestinationOrder(const BlockCopyPlan& pairs)
{
    std::vector<int64_t> order(pairs.destinations.size());
    for (size_t i = 0; i < order.size(); ++i) {
        order[i] = static_cast<int64_t>(i);
    }
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return pairs.destinations[a] < pairs.destinations[b]; });
    return order;
}

/// A scatter of n rows by ids that skips the invalid ones without a read back: row entry[i] goes to
/// destination[i]; a skipped row repeats the first valid one, and with none valid (any false) row 0
/// of the target takes its own bits.
struct MaskedScatter {
    at::Tensor entry, destination, any, first;
};

MaskedScatter MaskedScatterOf(const at::Tensor& ids, const at::Tensor& valid)
{
    MaskedScatter plan;
    plan.first = at::argmax(valid.to(at::kInt)).reshape({1});
    plan.any = valid.index_select(0, plan.first);
    plan.entry = at::where(valid, at::arange(ids.size(0), ids.options()), plan.first);
    plan.destination =
        at::where(valid, ids, at::where(plan.any, ids.index_select(0, plan.first), at::zeros_like(ids)));
    return plan;
}

/// target[plan.destination[i]] = rows[i] (rows already in entry order), as `plan` says; `target`
/// as integer bits.
void ScatterRows(at::Tensor target, const MaskedScatter& plan, const at::Tensor& rows)
{
    const at::Tensor own = target.index_select(0, at::zeros_like(plan.first));
    target.index_copy_(0, plan.destination, at::where(RowMask(plan.any, rows.dim()), rows, own));
}

}  // namespace

void KvCache(const KvCacheCall& call)
{
    at::Tensor past = Bits(call.past);
    const at::Tensor new_kv = Bits(call.new_kv);
    const int64_t layers = past.size(0), batch = past.size(1), max_seq_len = past.size(2);
    const int64_t ntokens = new_kv.size(0);
    if (ntokens == 0 || past.numel() == 0) {
        return;
    }
    const auto longs = at::TensorOptions().dtype(at::kLong).device(past.device());
    at::Tensor layer = call.layer_tensor.defined() ? call.layer_tensor.reshape({1}).to(at::kLong)
                                                   : at::full({1}, call.layer_id, longs);
    const at::Tensor layer_ok = (layer >= 0) & (layer < layers);
    layer = layer.clamp(0, layers - 1);
    const at::Tensor seq_len = call.seq_len.to(at::kLong), token_offset = call.token_offset.to(at::kLong);
    const at::Tensor lengths = seq_len.clamp(0, ntokens);
    const at::Tensor ends = lengths.cumsum(0);
    const at::Tensor src = at::arange(ntokens, longs);
    at::Tensor entry = at::searchsorted(ends, src, false, /*right=*/true);
    const at::Tensor covered = entry < batch;
    entry = entry.clamp_max(batch - 1);
    const at::Tensor j = src - (ends.index_select(0, entry) - lengths.index_select(0, entry));
    const at::Tensor back = seq_len.index_select(0, entry) - j;  // >= 1 where covered: no wrap
    const at::Tensor offset = token_offset.index_select(0, entry);
    // dst = offset - back: test 0 <= dst < max_seq_len without forming a wrapping difference.
    const at::Tensor position_ok = (offset >= back) & ((offset - back) < max_seq_len);
    const at::Tensor written = covered & position_ok & layer_ok;
    const at::Tensor position = at::where(written, offset - back, at::zeros_like(offset));
    AddDifference(past, Index({layer.expand({ntokens}), entry, position}), new_kv.index_select(0, src), written);
}

void PagedLoad(const PagedLoadCall& call)
{
    const at::Tensor& key = call.key;
    const at::Tensor& value = call.value;
    const int64_t rows = std::max(key.size(0), value.size(0));
    const int64_t batch = call.block_table.size(0), columns = call.block_table.size(1);
    const bool nd = call.geometry.Nd();
    const int64_t num_blocks = call.geometry.num_blocks.expect_int(), block_size = call.geometry.block_size.expect_int();
    if (rows == 0 || batch == 0 || columns == 0 || num_blocks == 0 || block_size == 0) {
        if (call.zero_fill) {  // no token has a valid block
            ClearLoadedRows(call);
        }
        return;
    }
    const auto [lengths, first_rows] = EntryRows(call.context_lens.to(at::kLong), call.cumsum, rows);
    const at::Tensor row = at::arange(rows, first_rows.options());
    const auto [entry, covered] = Writer(first_rows, lengths, row);
    const at::Tensor j = row - first_rows.index_select(0, entry);  // the token within its entry
    const at::Tensor first_column =
        call.seq_starts.defined()
            ? at::div(call.seq_starts.to(at::kLong), block_size, "floor").index_select(0, entry)
            : at::zeros_like(j);
    const at::Tensor column = first_column + at::div(j, block_size, "floor");  // wraps only above columns
    const at::Tensor column_ok = (column >= 0) & (column < columns);
    at::Tensor block = at::index(call.block_table, Index({entry, column.clamp(0, columns - 1)})).to(at::kLong);
    const at::Tensor valid = covered & column_ok & (block >= 0) & (block < num_blocks);
    block = at::where(valid, block, at::zeros_like(block));
    const at::Tensor slot = at::where(valid, j, at::zeros_like(j)).remainder(block_size);
    const at::Tensor zeroed = call.zero_fill ? covered & ~valid : at::Tensor();
    for (const bool key_side : {true, false}) {
        const at::Tensor& out = key_side ? key : value;
        const int64_t n = out.size(0);
        GatherInto(nd, key_side ? call.key_cache : call.value_cache, out, block.narrow(0, 0, n), slot.narrow(0, 0, n),
                   valid.narrow(0, 0, n), zeroed.defined() ? zeroed.narrow(0, 0, n) : zeroed,
                   key_side ? call.quant.key : call.quant.value);
    }
}

void ClearLoadedRows(const PagedLoadCall& call)
{
    const int64_t rows = std::max(call.key.size(0), call.value.size(0));
    if (rows == 0 || call.block_table.size(0) == 0) {
        return;
    }
    const auto [lengths, first_rows] = EntryRows(call.context_lens.to(at::kLong), call.cumsum, rows);
    const at::Tensor covered = Writer(first_rows, lengths, at::arange(rows, first_rows.options())).second;
    for (const at::Tensor& out : {call.key, call.value}) {
        at::Tensor target = Bits(out);
        const at::Tensor mask = RowMask(covered.narrow(0, 0, out.size(0)), out.dim());
        target.copy_(at::where(mask, at::zeros({}, target.options()), target));
    }
}

at::Tensor OutputRows(const at::Tensor& context_lens, bool cumsum)
{
    const at::Tensor lens = context_lens.to(at::kLong);
    if (cumsum) {
        return lens[-1].clamp_min(0);
    }
    const int64_t cap = std::numeric_limits<int64_t>::max() / std::max<int64_t>(lens.size(0), 1);
    return lens.clamp(0, cap).sum();
}

void ReshapeAndCache(const ReshapeAndCacheCall& call)
{
    const bool nd = call.geometry.Nd();
    const int64_t capacity = call.geometry.Capacity().expect_int();
    const int64_t block_size = call.geometry.block_size.expect_int();
    const int64_t n = call.slot_mapping.size(0);
    if (n == 0 || capacity == 0) {
        return;
    }
    const auto [last, block, position] = LastWrites(call.slot_mapping, capacity, block_size);
    const auto write = [&](const at::Tensor& cache, const at::Tensor& tokens, const QuantSide& quant) {
        if (!quant.Quantized()) {
            Scatter(nd, cache, tokens, block, position, last);
            return;
        }
        const auto [codes, scales] = Quantize(quant, tokens.narrow(0, 0, n));
        Scatter(nd, cache, codes, block, position, last);
        if (scales.defined()) {  // the row scales, at the same slots: [nb, bs, H] as ND rows [H, 1]
            Scatter(true, quant.scale_cache.unsqueeze(3), scales.unsqueeze(2), block, position, last);
        }
    };
    write(call.key_cache, call.key, call.quant.key);
    if (!call.KeyOnly()) {
        write(call.value_cache, call.value, call.quant.value);
    }
}

void ScatterNdUpdate(const ScatterNdCall& call, const at::Tensor& slots)
{
    const int64_t n = slots.size(0), capacity = call.grid.size(0) * call.grid.size(1);
    if (n == 0 || call.grid.numel() == 0) {
        return;
    }
    const auto [last, block, position] = LastWrites(slots, capacity, call.grid.size(1));
    Scatter(true, call.grid, call.updates, block, position, last);
}

void BlockCopy(const BlockCopyCall& call)
{
    const int64_t num_blocks = call.caches[0].size(0), copies = call.dst.size(0), pairs = call.src.size(0);
    if (copies == 0 || pairs == 0 || num_blocks == 0) {
        return;
    }
    const auto longs = call.dst.options().dtype(at::kLong);
    at::Tensor destination = call.dst.to(at::kLong);
    const at::Tensor copy = at::arange(copies, longs);
    const at::Tensor pair =
        call.cum_sum.defined() ? at::searchsorted(call.cum_sum.to(at::kLong), copy, false, /*right=*/true) : copy;
    at::Tensor source = call.src.to(at::kLong).index_select(0, pair.clamp_max(pairs - 1));
    const at::Tensor written = (pair < pairs) & (source >= 0) & (source < num_blocks) & (destination >= 0) &
                               (destination < num_blocks);
    // A skipped copy repeats the first copied one; with none copied, block 0 is written with its own bits.
    const at::Tensor first = at::argmax(written.to(at::kInt)).reshape({1});
    const at::Tensor any_written = written.index_select(0, first);
    const at::Tensor zero = at::zeros_like(first);
    source = at::where(written, source, at::where(any_written, source.index_select(0, first), zero));
    destination = at::where(written, destination, at::where(any_written, destination.index_select(0, first), zero));
    for (const at::Tensor& cache : call.caches) {
        if (cache.numel()) {
            at::Tensor blocks = Bits(cache);
            blocks.index_copy_(0, destination, blocks.index_select(0, source));
        }
    }
}

void SwapBlocks(const at::Tensor& src, const at::Tensor& dst, const BlockCopyPlan& pairs)
{
    const auto host_index = [](const std::vector<int64_t>& values) {
        return at::tensor(values, at::TensorOptions().dtype(at::kLong));
    };
    at::Tensor target = Bits(dst);
    if (src.device() == dst.device()) {
        const auto index = OnDevice({host_index(pairs.sources), host_index(pairs.destinations)}, dst.device());
        target.index_copy_(0, index[1], Bits(src).index_select(0, index[0]));
        return;
    }
    const int64_t n = static_cast<int64_t>(pairs.sources.size());
    if (src.is_cpu()) {  // gathered on the host into pinned memory, one copy, scattered on the device
        std::vector<int64_t> shape = src.sizes().vec();
        shape[0] = n;
        at::Tensor gathered;
        try {
            gathered = at::empty(shape, src.options().pinned_memory(true));
        } catch (const c10::Error&) {
            gathered = at::empty(shape, src.options());
        }
        at::Tensor gathered_bits = Bits(gathered);
        at::index_select_out(gathered_bits, Bits(src), 0, host_index(pairs.sources));
        const at::Tensor moved = gathered.to(dst.device(), /*non_blocking=*/true);
        target.index_copy_(0, OnDevice({host_index(pairs.destinations)}, dst.device())[0], Bits(moved));
        return;
    }
    // From a device: gathered there in destination order; to another device in one copy and one
    // scatter, to the host run by run of consecutive destinations (a host scatter would wait).
    const std::vector<int64_t> order = DestinationOrder(pairs);
    std::vector<int64_t> sources(n), targets(n);
    for (int64_t i = 0; i < n; ++i) {
        sources[i] = pairs.sources[order[i]];
        targets[i] = pairs.destinations[order[i]];
    }
    const at::Tensor gathered = Bits(src).index_select(0, OnDevice({host_index(sources)}, src.device())[0]);
    if (!dst.is_cpu()) {
        target.index_copy_(0, OnDevice({host_index(targets)}, dst.device())[0],
                           gathered.to(dst.device(), /*non_blocking=*/true));
        return;
    }
    for (int64_t begin = 0; begin < n;) {
        int64_t end = begin + 1;
        while (end < n && targets[end] == targets[end - 1] + 1) {
            ++end;
        }
        target.narrow(0, targets[begin], end - begin).copy_(gathered.narrow(0, begin, end - begin), /*non_blocking=*/true);
        begin = end;
    }
}

namespace {

/// Blocks [n, *block] in `layout` (the buffer's: with its head split) as ND blocks [n, bs, H, D].
at::Tensor BlocksToNd(const TransferCall& call, const at::Tensor& blocks, BlockLayout layout, bool buffer_side)
{
    const int64_t n = blocks.size(0), bs = call.block_size, heads = call.heads, d = call.head_size;
    switch (layout) {
        case BlockLayout::kHnd: return blocks.transpose(1, 2);
        case BlockLayout::kNz: return blocks.permute({0, 2, 1, 3}).reshape({n, bs, heads, d});
        case BlockLayout::kNd: break;
    }
    return buffer_side && call.splits > 1 ? blocks.permute({0, 2, 1, 3, 4}).reshape({n, bs, heads, d}) : blocks;
}

/// ND blocks [n, bs, H, D] as blocks in `layout` (the inverse of BlocksToNd).
at::Tensor BlocksFromNd(const TransferCall& call, const at::Tensor& nd, BlockLayout layout, bool buffer_side)
{
    const int64_t n = nd.size(0), bs = call.block_size, heads = call.heads, d = call.head_size;
    switch (layout) {
        case BlockLayout::kHnd: return nd.transpose(1, 2);
        case BlockLayout::kNz: {
            const int64_t e = NzElements(nd.element_size());
            return nd.reshape({n, bs, heads * d / e, e}).permute({0, 2, 1, 3});
        }
        case BlockLayout::kNd: break;
    }
    const int64_t s = call.splits;
    return buffer_side && s > 1 ? nd.reshape({n, bs, s, heads / s, d}).permute({0, 2, 1, 3, 4}) : nd;
}

}  // namespace

void TransferBlocks(const TransferCall& call)
{
    const int64_t n = call.Blocks(), layers = call.Layers();
    if (n == 0 || layers == 0 || call.buffer.numel() == 0) {
        return;
    }
    const int64_t num_blocks = call.caches[0][0].size(0);
    const at::Tensor ids = call.block_ids.to(at::kLong);
    const at::Tensor valid = (ids >= 0) & (ids < num_blocks);
    const at::Tensor buffer = Bits(call.buffer);
    if (call.gather) {
        const at::Tensor safe = at::where(valid, ids, at::zeros_like(ids));
        for (size_t kv = 0; kv < call.caches.size(); ++kv) {
            for (int64_t l = 0; l < layers; ++l) {
                const at::Tensor blocks = Bits(call.caches[kv][l]).index_select(0, safe);
                const at::Tensor rows = BlocksFromNd(call, BlocksToNd(call, blocks, call.cache_layout, false),
                                                     call.buffer_layout, true);
                at::Tensor target = buffer.select(0, kv).select(0, l);
                target.copy_(at::where(RowMask(valid, rows.dim()), rows, target));
            }
        }
        return;
    }
    const MaskedScatter plan = MaskedScatterOf(ids, valid);
    for (size_t kv = 0; kv < call.caches.size(); ++kv) {
        for (int64_t l = 0; l < layers; ++l) {
            const at::Tensor rows = buffer.select(0, kv).select(0, l).index_select(0, plan.entry);
            ScatterRows(Bits(call.caches[kv][l]), plan,
                        BlocksFromNd(call, BlocksToNd(call, rows, call.buffer_layout, true), call.cache_layout, false));
        }
    }
}

void TransferStateSlots(const StateTransferCall& call)
{
    const int64_t n = call.slot_ids.size(0);
    if (n == 0 || call.states.empty() || call.states[0].size(0) == 0) {
        return;
    }
    const at::Tensor ids = call.slot_ids.to(at::kLong);
    const at::Tensor valid = (ids >= 0) & (ids < call.states[0].size(0));
    const MaskedScatter plan = call.gather ? MaskedScatter{} : MaskedScatterOf(ids, valid);
    const at::Tensor safe = at::where(valid, ids, at::zeros_like(ids));
    for (size_t c = 0; c < call.states.size(); ++c) {
        const at::Tensor state = Bits(call.states[c]);
        const int64_t bytes = state.numel() / state.size(0) * state.element_size();
        if (bytes == 0) {
            continue;
        }
        at::Tensor row_bytes = call.buffer.narrow(1, call.offsets[c], bytes);  // [n, bytes] of this state
        if (call.gather) {
            const at::Tensor slots = state.index_select(0, safe).view(at::kByte).reshape({n, bytes});
            row_bytes.copy_(at::where(RowMask(valid, 2), slots, row_bytes));
            continue;
        }
        std::vector<int64_t> shape = state.sizes().vec();
        shape[0] = n;
        const at::Tensor rows = row_bytes.index_select(0, plan.entry).view(state.scalar_type()).reshape(shape);
        ScatterRows(state, plan, rows);
    }
}

void BatchMemcpy(const at::Tensor& src_ptrs, const at::Tensor& dst_ptrs, const at::Tensor& sizes)
{
    const BatchCopies copies = PlanBatchMemcpy(src_ptrs, dst_ptrs, sizes);  // the one read back
    const auto bytes = at::TensorOptions().dtype(at::kByte).device(src_ptrs.device());
    for (size_t i = 0; i < copies.sizes.size(); ++i) {
        if (copies.sizes[i] > 0) {
            const auto from = reinterpret_cast<void*>(copies.src[i]), to = reinterpret_cast<void*>(copies.dst[i]);
            at::from_blob(to, {copies.sizes[i]}, bytes).copy_(at::from_blob(from, {copies.sizes[i]}, bytes),
                                                              /*non_blocking=*/true);
        }
    }
}

void CopyRuns(const at::Tensor& src, const at::Tensor& dst, const BlockCopyPlan& pairs)
{
    const std::vector<int64_t> order = DestinationOrder(pairs);
    const int64_t n = static_cast<int64_t>(order.size());
    for (int64_t begin = 0; begin < n;) {
        const int64_t s = pairs.sources[order[begin]], d = pairs.destinations[order[begin]];
        int64_t end = begin + 1;
        while (end < n && pairs.destinations[order[end]] == d + (end - begin) &&
               pairs.sources[order[end]] == s + (end - begin)) {
            ++end;
        }
        dst.narrow(0, d, end - begin).copy_(src.narrow(0, s, end - begin), /*non_blocking=*/true);
        begin = end;
    }
}

}  // namespace ascend_kv::on_device
