#include "csrc/rules/block_copy.h"

#include <algorithm>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "csrc/rules/index_values.h"
#include "csrc/rules/memory.h"
#include "csrc/rules/states.h"
#include "csrc/rules/tensors.h"
#include "csrc/rules/text.h"

namespace ascend_kv {
namespace {

const char* kCacheShape = "a tensor [num_blocks, ...] of at least 2 dimensions (ND [num_blocks, block_size, "
                          "num_heads, head_size] or NZ [num_blocks, T // E, block_size, E])";

/// How an entry of an index list is named in an error: Namer(i) for entry i.
using Namer = std::function<std::string(int64_t)>;

void RequireCache(std::string_view name, const at::Tensor& cache, bool allow_meta)
{
    RequireData(name, cache, allow_meta);
    RequireCacheDtype(name, cache);
    TORCH_CHECK_VALUE(cache.dim() >= 2, name, " must be ", kCacheShape, ", got shape ", ShapeOf(cache));
    RequireWritable(name, cache);
}

/// The caches checked one by one, then together: one device, one num_blocks, no two sharing a byte.
void RequireCaches(const BlockCopyCall& call, bool allow_meta)
{
    for (size_t i = 0; i < call.caches.size(); ++i) {
        RequireCache(call.names[i], call.caches[i], allow_meta);
    }
    if (call.caches.empty()) {
        return;
    }
    const at::Tensor& first = call.caches[0];
    std::vector<Named> named;
    for (size_t i = 0; i < call.caches.size(); ++i) {
        named.push_back({call.names[i], call.caches[i]});
    }
    RequireSameDevice(named);
    for (size_t i = 1; i < call.caches.size(); ++i) {
        TORCH_CHECK_VALUE(call.caches[i].sym_sizes()[0] == first.sym_sizes()[0], call.names[i], ".shape[0] (num_blocks) = ",
                          call.caches[i].sym_sizes()[0], " must equal ", call.names[0], ".shape[0] = ", first.sym_sizes()[0]);
    }
}

/// Whether `a` and `b` are the same view: one device, data_ptr, dtype, shape and strides.
bool IdenticalViews(const at::Tensor& a, const at::Tensor& b)
{
    return a.device() == b.device() && a.data_ptr() == b.data_ptr() && a.scalar_type() == b.scalar_type() &&
           a.sizes() == b.sizes() && a.strides() == b.strides();
}

/// Each cache once: a view identical to an earlier one (vLLM's cross-layer KV sharing lists one
/// layer's view for several layers) is dropped, or a cycle copied twice would swap back. Caches
/// sorted by address compare only with those at the same address.
void DropDuplicateViews(BlockCopyCall& call)
{
    std::vector<std::pair<const void*, size_t>> order;
    for (size_t i = 0; i < call.caches.size(); ++i) {
        order.emplace_back(call.caches[i].data_ptr(), i);
    }
    std::sort(order.begin(), order.end());
    std::vector<bool> dropped(call.caches.size(), false);
    for (size_t k = 0; k < order.size(); ++k) {
        for (size_t m = k + 1; m < order.size() && order[m].first == order[k].first; ++m) {
            if (!dropped[order[k].second] && IdenticalViews(call.caches[order[k].second], call.caches[order[m].second])) {
                dropped[order[m].second] = true;  // m's index is the later one: sorted by (address, index)
            }
        }
    }
    if (std::find(dropped.begin(), dropped.end(), true) == dropped.end()) {
        return;
    }
    BlockCopyCall distinct;
    for (size_t i = 0; i < call.caches.size(); ++i) {
        if (!dropped[i]) {
            distinct.caches.push_back(call.caches[i]);
            distinct.names.push_back(call.names[i]);
        }
    }
    call.caches = std::move(distinct.caches);
    call.names = std::move(distinct.names);
}

/// ValueError when two of the written caches may share a byte.
void RequireCachesApart(const BlockCopyCall& call)
{
    std::vector<Named> caches;
    for (size_t i = 0; i < call.caches.size(); ++i) {
        caches.push_back({call.names[i], call.caches[i]});
    }
    RequireOutputsApart(caches);
}

/// What the indices of a call name, in messages: "block" or "slot", held by "the caches" or "the states".
struct Terms {
    const char* unit = "block";
    const char* holder = "the caches";
};

/// Every value in [0, count), or a ValueError: "<entry> = <value> is out of range: <holder> hold(s) <n> <unit>s<suffix>".
void RequireInRange(const Namer& name, const std::vector<int64_t>& values, int64_t count, const std::string& holder,
                    const char* unit, const std::string& suffix = "")
{
    for (size_t i = 0; i < values.size(); ++i) {
        TORCH_CHECK_VALUE(values[i] >= 0 && values[i] < count, name(i), " = ", values[i], " is out of range: ",
                          holder, " ", count, " ", unit, "s", suffix);
    }
}

void RequireDistinct(const Namer& name, const std::vector<int64_t>& values, const char* unit = "block")
{
    std::unordered_map<int64_t, int64_t> first;
    first.reserve(values.size());
    for (size_t j = 0; j < values.size(); ++j) {
        const auto [at, inserted] = first.emplace(values[j], j);
        TORCH_CHECK_VALUE(inserted, name(j), " = ", values[j], " repeats ", name(at->second), ": a ", unit,
                          " can be the destination of one copy only");
    }
}

/// Indices in range, destinations distinct and, unless `simultaneous`, none both a source and a destination.
void PairRules(const Namer& src_name, const Namer& dst_name, const std::vector<int64_t>& listed_sources,
               const std::vector<int64_t>& destinations, int64_t count, bool simultaneous, const Terms& terms)
{
    const std::string holds = std::string(terms.holder) + " hold";
    RequireInRange(src_name, listed_sources, count, holds, terms.unit);
    RequireInRange(dst_name, destinations, count, holds, terms.unit);
    RequireDistinct(dst_name, destinations, terms.unit);
    if (simultaneous) {
        return;  // every source is read before any destination is written
    }
    const std::unordered_set<int64_t> source_set(listed_sources.begin(), listed_sources.end());
    for (size_t j = 0; j < destinations.size(); ++j) {
        if (source_set.count(destinations[j])) {
            const auto i = std::find(listed_sources.begin(), listed_sources.end(), destinations[j]) - listed_sources.begin();
            TORCH_CHECK_VALUE(false, dst_name(j), " = ", destinations[j], " is also a source (", src_name(i), "): a ",
                              terms.unit, " cannot be both a source and a destination, or the result would depend on "
                              "the order of the copies (simultaneous=True reads every source first)");
        }
    }
}

/// [copies]: the source of each destination, after cum_sum's rules (running ends, the last = copies).
std::vector<int64_t> ExpandedSources(const std::vector<int64_t>& sources, const std::vector<int64_t>& cum_sum,
                                     int64_t copies)
{
    int64_t before = 0;
    for (size_t i = 0; i < cum_sum.size(); ++i) {
        if (cum_sum[i] < before) {
            const std::string previous = i ? "cum_sum[" + std::to_string(i - 1) + "] = " + std::to_string(before) : "0";
            TORCH_CHECK_VALUE(false, "cum_sum[", i, "] = ", cum_sum[i], " is less than ", previous,
                              ": cum_sum holds the running end of each source's destinations, so it never decreases");
        }
        before = cum_sum[i];
    }
    const int64_t total = cum_sum.empty() ? 0 : cum_sum.back();
    if (total != copies) {
        const std::string given = cum_sum.empty() ? "cum_sum is empty, which means 0 destinations"
                                                  : "cum_sum[-1] = " + std::to_string(total);
        TORCH_CHECK_VALUE(false, given, ", but dst_block_indices has ", copies,
                          " entries: cum_sum[-1] must equal len(dst_block_indices)");
    }
    std::vector<int64_t> expanded;
    expanded.reserve(copies);
    int64_t start = 0;
    for (size_t i = 0; i < cum_sum.size(); ++i) {
        expanded.insert(expanded.end(), cum_sum[i] - start, sources[i]);
        start = cum_sum[i];
    }
    return expanded;
}

void RequireBlockMapping(const at::Tensor& mapping, bool allow_meta)
{
    RequireData("block_mapping", mapping, allow_meta);
    RequireDtype("block_mapping", mapping, {at::kInt, at::kLong});
    TORCH_CHECK_VALUE(mapping.dim() == 2 && mapping.sym_sizes()[1] == 2,
                      "block_mapping must be a 2-D tensor [n, 2] of (src, dst) pairs, got shape ", ShapeOf(mapping));
}

Namer Entry(std::string_view name)
{
    return [name = std::string(name)](int64_t i) { return name + "[" + std::to_string(i) + "]"; };
}
Namer Pair(int column)
{
    return [column](int64_t i) { return "block_mapping[" + std::to_string(i) + ", " + std::to_string(column) + "]"; };
}

/// swap_blocks' pairs from block_mapping (on the host), src and dst apart: sources in
/// [0, src_blocks), destinations in [0, dst_blocks) and distinct; `unit` follows "blocks" in messages.
BlockCopyPlan SwapPairs(const at::Tensor& src, const at::Tensor& dst, const at::Tensor& block_mapping,
                        int64_t src_blocks, int64_t dst_blocks, const std::string& unit)
{
    TORCH_CHECK_VALUE(block_mapping.is_cpu(), "block_mapping must be on the host (cpu), as vLLM keeps it, got ",
                      block_mapping.device());
    RequireApart("dst", dst, {{"src", src}});
    BlockCopyPlan plan;
    const IndexReader mapping(block_mapping);
    for (int64_t i = 0; i < mapping.Rows(); ++i) {
        plan.sources.push_back(mapping.At(i, 0));
        plan.destinations.push_back(mapping.At(i, 1));
    }
    RequireInRange(Pair(0), plan.sources, src_blocks, "src holds", "block", unit);
    RequireInRange(Pair(1), plan.destinations, dst_blocks, "dst holds", "block", unit);
    RequireDistinct(Pair(1), plan.destinations);
    return plan;
}

}  // namespace

BlockCopyCall CheckBlockCopy(const at::Tensor& key_cache, const at::Tensor& value_cache, const at::Tensor& src,
                             const at::Tensor& dst, const at::Tensor& cum_sum, bool simultaneous, Check check)
{
    BlockCopyCall call;
    call.simultaneous = simultaneous;
    call.caches.push_back(key_cache);
    call.names.emplace_back("key_cache");
    if (value_cache.defined()) {
        call.caches.push_back(value_cache);
        call.names.emplace_back("value_cache");
    }
    const bool meta = AllowsMeta(check, key_cache);
    RequireCaches(call, meta);
    RequireIndexTensor("src_block_indices", src, 1, meta);
    RequireIndexTensor("dst_block_indices", dst, 1, meta);
    RequireIndexTensor("cum_sum", cum_sum, 1, meta);
    RequireEntries("cum_sum", cum_sum, src.sym_sizes()[0], "one running end per source, len(src_block_indices)");
    RequireIndexDevices(key_cache.device(), {{"src_block_indices", src}, {"dst_block_indices", dst},
                                             {"cum_sum", cum_sum}});
    if (check == Check::kCall) {
        DropDuplicateViews(call);
        RequireCachesApart(call);
    }
    call.src = src;
    call.dst = dst;
    call.cum_sum = cum_sum;
    return call;
}

BlockCopyCall CheckCopyBlocks(at::TensorList key_caches, at::TensorList value_caches, const at::Tensor& block_mapping,
                              bool simultaneous, Check check)
{
    TORCH_CHECK_VALUE(value_caches.empty() || value_caches.size() == key_caches.size(),
                      "value_caches must have one cache per layer (", key_caches.size(),
                      ", as key_caches) or none (key-only caches), got ", value_caches.size());
    BlockCopyCall call;
    call.mapping = true;
    call.simultaneous = simultaneous;
    for (size_t i = 0; i < key_caches.size(); ++i) {
        call.caches.push_back(key_caches[i]);
        call.names.push_back("key_caches[" + std::to_string(i) + "]");
    }
    for (size_t i = 0; i < value_caches.size(); ++i) {
        call.caches.push_back(value_caches[i]);
        call.names.push_back("value_caches[" + std::to_string(i) + "]");
    }
    const bool meta = !call.caches.empty() && AllowsMeta(check, call.caches[0]);
    RequireCaches(call, meta);
    RequireBlockMapping(block_mapping, meta);
    if (!call.caches.empty()) {
        RequireIndexDevices(call.caches[0].device(), {{"block_mapping", block_mapping}});
    }
    if (check == Check::kCall) {
        DropDuplicateViews(call);
        RequireCachesApart(call);
    }
    call.src = block_mapping.select(1, 0);
    call.dst = block_mapping.select(1, 1);
    return call;
}

BlockCopyCall CheckCopyStateSlots(at::TensorList states, const at::Tensor& src_indices, const at::Tensor& dst_indices,
                                  bool simultaneous, Check check)
{
    BlockCopyCall call;
    call.padding = true;
    call.simultaneous = simultaneous;
    call.src_name = "src_indices";
    call.dst_name = "dst_indices";
    call.unit = "slot";
    call.holder = "the states";
    call.noun = "state";
    call.caches = states.vec();
    call.names = StateNames("states", states.size());
    const bool meta = !call.caches.empty() && AllowsMeta(check, call.caches[0]);
    RequireStates(call.caches, call.names, /*written=*/true, meta);
    RequireIndexTensor("src_indices", src_indices, 1, meta);
    RequireIndexTensor("dst_indices", dst_indices, 1, meta);
    RequireEntries("dst_indices", dst_indices, src_indices.sym_size(0), "one destination per source, len(src_indices)");
    if (!call.caches.empty()) {
        RequireIndexDevices(call.caches[0].device(), {{"src_indices", src_indices}, {"dst_indices", dst_indices}});
    }
    if (check == Check::kCall) {
        DropDuplicateViews(call);
        RequireCachesApart(call);
    }
    call.src = src_indices;
    call.dst = dst_indices;
    return call;
}

BlockCopyPlan PlanBlockCopy(const BlockCopyCall& call)
{
    const IndexTensors host = OnHost(call.IndexTensors());
    BlockCopyPlan plan;
    const std::vector<int64_t> listed = HostValues(host[0]);
    plan.destinations = HostValues(host[1]);
    const Terms terms{call.unit, call.holder};
    if (call.padding) {  // the pairs without a negative entry, named by their place in the call
        std::vector<int64_t> kept;
        BlockCopyPlan pairs;
        for (size_t i = 0; i < listed.size(); ++i) {
            if (listed[i] >= 0 && plan.destinations[i] >= 0) {
                kept.push_back(static_cast<int64_t>(i));
                pairs.sources.push_back(listed[i]);
                pairs.destinations.push_back(plan.destinations[i]);
            }
        }
        const auto named = [&kept](const std::string& name) {
            return [&kept, name](int64_t k) { return name + "[" + std::to_string(kept[k]) + "]"; };
        };
        if (!call.caches.empty()) {
            PairRules(named(call.src_name), named(call.dst_name), pairs.sources, pairs.destinations,
                      call.caches[0].size(0), call.simultaneous, terms);
        }
        return pairs;
    }
    if (call.mapping) {
        plan.sources = listed;
        if (!call.caches.empty()) {
            PairRules(Pair(0), Pair(1), listed, plan.destinations, call.caches[0].size(0), call.simultaneous, terms);
        }
        return plan;
    }
    plan.sources = ExpandedSources(listed, HostValues(host[2]), static_cast<int64_t>(plan.destinations.size()));
    PairRules(Entry(call.src_name), Entry(call.dst_name), listed, plan.destinations, call.caches[0].size(0),
              call.simultaneous, terms);
    return plan;
}

BlockCopyPlan CheckSwapBlocks(const at::Tensor& src, const at::Tensor& dst, const at::Tensor& block_mapping,
                              Check check)
{
    const bool meta = AllowsMeta(check, src);
    RequireData("src", src, meta);
    RequireCacheDtype("src", src);
    RequireCache("dst", dst, meta);
    TORCH_CHECK_VALUE(src.dim() >= 2, "src must be ", kCacheShape, ", got shape ", ShapeOf(src));
    TORCH_CHECK_TYPE(src.scalar_type() == dst.scalar_type(), "dst.dtype must equal src.dtype = ",
                     TorchDtype(src.scalar_type()), ", got ", TorchDtype(dst.scalar_type()));
    TORCH_CHECK_VALUE(src.sym_sizes().slice(1) == dst.sym_sizes().slice(1), "dst.shape[1:] (one block) = ",
                      Tuple(dst.sym_sizes().slice(1)), " must equal src.shape[1:] = ", Tuple(src.sym_sizes().slice(1)));
    RequireBlockMapping(block_mapping, meta);
    if (check == Check::kShapes) {
        return {};
    }
    return SwapPairs(src, dst, block_mapping, src.size(0), dst.size(0), "");
}

BlockCopyPlan CheckSwapBlockBytes(const at::Tensor& src, const at::Tensor& dst, int64_t block_size_in_bytes,
                                  const at::Tensor& block_mapping, Check check)
{
    const bool meta = AllowsMeta(check, src);
    RequireData("src", src, meta);
    RequireData("dst", dst, meta);
    RequireWritable("dst", dst);
    TORCH_CHECK_VALUE(block_size_in_bytes > 0, "block_size_in_bytes must be a positive number of bytes, got ",
                      block_size_in_bytes);
    for (const auto& [name, t] : {std::pair{"src", &src}, std::pair{"dst", &dst}}) {
        TORCH_CHECK_VALUE(t->is_contiguous(), name, " must be contiguous (its blocks are byte ranges from its "
                          "data_ptr()), got sizes ", ShapeOf(*t), " and strides ", Tuple(t->strides()));
    }
    RequireBlockMapping(block_mapping, meta);
    if (check == Check::kShapes) {
        return {};
    }
    for (const auto& [name, t] : {std::pair{"src", &src}, std::pair{"dst", &dst}}) {  // when a block is named
        TORCH_CHECK_VALUE(block_mapping.size(0) == 0 || block_size_in_bytes <= static_cast<int64_t>(t->nbytes()),
                          "block_size_in_bytes = ",
                          block_size_in_bytes, " is larger than ", name, " (", t->nbytes(), " bytes): ", name,
                          " holds no whole block");
    }
    const auto blocks = [&](const at::Tensor& t) { return static_cast<int64_t>(t.nbytes()) / block_size_in_bytes; };
    return SwapPairs(src, dst, block_mapping, blocks(src), blocks(dst),
                     " of " + std::to_string(block_size_in_bytes) + " bytes");
}

}  // namespace ascend_kv
