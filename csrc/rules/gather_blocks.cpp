#include "csrc/rules/gather_blocks.h"

#include <algorithm>
#include <unordered_map>

#include "csrc/rules/dtypes.h"
#include "csrc/rules/index_values.h"
#include "csrc/rules/memory.h"
#include "csrc/rules/tensors.h"
#include "csrc/rules/text.h"

namespace ascend_kv {
namespace transfer_rules {

using c10::SymInt;

BlockLayout ParseLayout(const char* name, c10::string_view value)
{
    if (value == "nd") {
        return BlockLayout::kNd;
    }
    if (value == "hnd") {
        return BlockLayout::kHnd;
    }
    TORCH_CHECK_VALUE(value == "nz", name, " must be 'nd', 'hnd' or 'nz', got '", std::string(value), "'");
    return BlockLayout::kNz;
}

const char* kCacheShapes = "a 4-D cache in its layout: nd [num_blocks, block_size, H, D], hnd [num_blocks, H, "
                           "block_size, D] or nz [num_blocks, H * D // E, block_size, E]";

/// The caches as [KV][L] with their names; ValueError unless value_caches is empty or one per layer.
void CollectCaches(TransferCall& call, std::vector<std::string>& names, at::TensorList key_caches,
                   at::TensorList value_caches)
{
    TORCH_CHECK_VALUE(value_caches.empty() || value_caches.size() == key_caches.size(),
                      "value_caches must have one cache per layer (", key_caches.size(),
                      ", as key_caches) or none (key-only caches), got ", value_caches.size());
    const at::TensorList sides[2] = {key_caches, value_caches};
    const char* side_names[2] = {"key_caches", "value_caches"};
    for (int kv = 0; kv < (value_caches.empty() ? 1 : 2); ++kv) {
        call.caches.emplace_back(sides[kv].begin(), sides[kv].end());
        for (size_t l = 0; l < sides[kv].size(); ++l) {
            names.push_back(std::string(side_names[kv]) + "[" + std::to_string(l) + "]");
        }
    }
}

/// Every cache 4-D with one shape, dtype and device (written ones writable); NZ caches' E and block_size.
void RequireCaches(const TransferCall& call, const std::vector<std::string>& names, bool meta)
{
    std::vector<at::Tensor> flat;
    for (const auto& side : call.caches) {
        flat.insert(flat.end(), side.begin(), side.end());
    }
    std::vector<Named> named;
    for (size_t i = 0; i < flat.size(); ++i) {
        RequireData(names[i], flat[i], meta);
        RequireCacheDtype(names[i], flat[i]);
        RequireNdim(names[i], flat[i], {4}, kCacheShapes);
        if (!call.gather) {
            RequireWritable(names[i], flat[i]);
        }
        named.push_back({names[i], flat[i]});
    }
    RequireSameDevice(named);
    for (size_t i = 1; i < flat.size(); ++i) {
        RequireSameDtype(names[i], flat[i], names[0], flat[0]);
        TORCH_CHECK_VALUE(flat[i].sym_sizes() == flat[0].sym_sizes(), names[i], ".shape = ", ShapeOf(flat[i]),
                          " must equal ", names[0], ".shape = ", ShapeOf(flat[0]), ": every cache has one shape");
    }
    if (call.cache_layout == BlockLayout::kNz) {
        const SymInt e = NzElements(flat[0].element_size());
        TORCH_CHECK_VALUE(flat[0].sym_size(3) == e, names[0], " in cache_layout 'nz' must be [num_blocks, T // E, "
                          "block_size, E] with E = 32 // itemsize = ", e, ", got shape ", ShapeOf(flat[0]));
    }
}

/// ValueError unless head_splits fits the layouts: positive, S > 1 only on an "nd" buffer, dividing H.
void RequireSplits(const TransferCall& call, const at::Tensor& cache)
{
    const int64_t s = call.splits;
    TORCH_CHECK_VALUE(s > 0, "head_splits must be a positive int, got ", s);
    TORCH_CHECK_VALUE(s == 1 || call.buffer_layout == BlockLayout::kNd, "head_splits = ", s,
                      " needs the buffer in layout 'nd' (an hnd block split by heads is already contiguous per "
                      "split), got ", call.gather ? "out_layout" : "src_layout", " = '",
                      call.buffer_layout == BlockLayout::kHnd ? "hnd" : "nz", "'");
    if (call.cache_layout != BlockLayout::kNz) {
        const SymInt heads = cache.sym_size(call.cache_layout == BlockLayout::kNd ? 2 : 1);
        TORCH_CHECK_VALUE(heads % s == 0, "head_splits = ", s, " must divide the caches' H = ", heads);
    }
}

/// The buffer's expected [KV, L, n, *block] for block geometry (bs, H, D) in its layout.
std::vector<SymInt> BufferShape(const TransferCall& call, const SymInt& kv, const SymInt& n, const SymInt& bs,
                                const SymInt& heads, const SymInt& head_size, int64_t e)
{
    std::vector<SymInt> shape = {kv, SymInt(call.Layers()), n};
    switch (call.buffer_layout) {
        case BlockLayout::kNd:
            if (call.splits > 1) {
                shape.insert(shape.end(), {SymInt(call.splits), bs, heads / call.splits, head_size});
            } else {
                shape.insert(shape.end(), {bs, heads, head_size});
            }
            break;
        case BlockLayout::kHnd: shape.insert(shape.end(), {heads, bs, head_size}); break;
        case BlockLayout::kNz: shape.insert(shape.end(), {heads * head_size / e, bs, SymInt(e)}); break;
    }
    return shape;
}

/// (bs, H, D) of one block: from the caches, or for NZ caches H and D from a non-NZ buffer
/// (both NZ: H = T // E, D = E). ValueError naming the buffer when its block does not hold the caches'.
std::array<SymInt, 3> Geometry(const TransferCall& call, const at::Tensor& cache, const at::Tensor& buffer)
{
    const auto c = cache.sym_sizes();
    const char* name = call.BufferName();
    switch (call.cache_layout) {
        case BlockLayout::kNd: return {c[1], c[2], c[3]};
        case BlockLayout::kHnd: return {c[2], c[1], c[3]};
        case BlockLayout::kNz: break;
    }
    if (call.buffer_layout == BlockLayout::kNz) {
        return {c[2], c[1], c[3]};
    }
    const bool split = call.splits > 1;
    const int64_t rank = split ? 7 : 6;
    TORCH_CHECK_VALUE(buffer.dim() == rank, name, " must be [KV, L, n, *block] with a ", rank - 3, "-D block in its "
                      "layout, got shape ", ShapeOf(buffer));
    const auto b = buffer.sym_sizes();
    const SymInt heads = call.buffer_layout == BlockLayout::kHnd ? b[3] : split ? b[5] * call.splits : b[4];
    const SymInt head_size = b[rank - 1];
    TORCH_CHECK_VALUE(heads * head_size == c[1] * c[3], name, " holds blocks of H * D = ", heads * head_size,
                      " elements per token, but the NZ caches hold T = ", c[1] * c[3], ", got shape ", ShapeOf(buffer));
    return {c[2], heads, head_size};
}

/// NZ constraints on the geometry: H * D a multiple of E and block_size of 16.
void RequireNzGeometry(const TransferCall& call, const std::array<SymInt, 3>& g, int64_t e)
{
    const char* side = call.cache_layout == BlockLayout::kNz ? "cache_layout"
                       : call.gather                         ? "out_layout"
                                                             : "src_layout";
    TORCH_CHECK_VALUE((g[1] * g[2]) % e == 0, side, " = 'nz' needs H * D a multiple of E = ", e, ", got H * D = ",
                      g[1] * g[2]);
    TORCH_CHECK_VALUE(g[0] % kNzBlockSizeMultiple == 0, side, " = 'nz' needs block_size a multiple of ",
                      kNzBlockSizeMultiple, ", got ", g[0]);
}

/// The frame (call.frame) when one exists: sizes (bs, S, H // S // r, r, D // w, w), where an NZ
/// piece holds r whole heads (r = E // D) or D holds whole pieces (w = E); else framed stays false.
void SetFrame(TransferCall& call, int64_t e)
{
    const bool nz = call.cache_layout == BlockLayout::kNz || call.buffer_layout == BlockLayout::kNz;
    const int64_t group = call.heads / call.splits, d = call.head_size;
    int64_t r = 1, w = d;
    if (nz && d % e == 0) {
        w = e;
    } else if (nz && e % d == 0 && group % (e / d) == 0) {
        r = e / d;
    } else if (nz) {
        return;
    }
    call.framed = true;
    call.frame = {call.block_size, call.splits, group / r, r, d / w, w};
}

TransferCall CheckTransfer(bool gather, at::TensorList key_caches, at::TensorList value_caches, const at::Tensor& block_ids,
                   const at::Tensor& buffer, c10::string_view cache_layout, c10::string_view buffer_layout,
                   int64_t head_splits, ascend_kv::Check check)
{
    TransferCall call;
    call.gather = gather;
    call.cache_layout = ParseLayout("cache_layout", cache_layout);
    call.buffer_layout = ParseLayout(gather ? "out_layout" : "src_layout", buffer_layout);
    call.splits = head_splits;
    std::vector<std::string> names;
    CollectCaches(call, names, key_caches, value_caches);
    const char* name = call.BufferName();
    const bool meta = AllowsMeta(check, key_caches.empty() ? buffer : key_caches[0]);
    RequireData(name, buffer, meta);
    RequireIndexTensor("block_ids", block_ids, 1, meta);
    call.buffer = buffer;
    call.block_ids = block_ids;
    const SymInt kv = call.caches.size() == 2 ? 2 : 1;
    if (key_caches.empty()) {  // no layer: nothing to move, the buffer holds no block
        TORCH_CHECK_VALUE(head_splits > 0, "head_splits must be a positive int, got ", head_splits);
        TORCH_CHECK_VALUE(buffer.dim() >= 3 && buffer.sym_size(1) == 0, name,
                          " must be [KV, L = 0, n, *block] for no layers, got shape ", ShapeOf(buffer));
        return call;
    }
    RequireCaches(call, names, meta);
    const at::Tensor& cache = call.caches[0][0];
    RequireSplits(call, cache);
    RequireSameDtype(name, buffer, names[0], cache);
    TORCH_CHECK_VALUE(buffer.is_cpu() || buffer.device() == cache.device() || (meta && buffer.is_meta()), name,
                      " must be on the caches' device (", cache.device(), ") or on the host, got ", buffer.device());
    RequireIndexDevices(cache.device(), {{"block_ids", block_ids}});
    const int64_t e = NzElements(cache.element_size());
    const std::array<SymInt, 3> g = Geometry(call, cache, buffer);
    if (call.cache_layout == BlockLayout::kNz || call.buffer_layout == BlockLayout::kNz) {
        RequireNzGeometry(call, g, e);
    }
    const std::vector<SymInt> shape = BufferShape(call, kv, block_ids.sym_size(0), g[0], g[1], g[2], e);
    TORCH_CHECK_VALUE(buffer.sym_sizes() == c10::SymIntArrayRef(shape), name, " must have shape ",
                      Tuple(c10::SymIntArrayRef(shape)), " ([KV, L, n, *block] in ", gather ? "out_layout" : "src_layout",
                      "), got ", ShapeOf(buffer));
    if (check == ascend_kv::Check::kShapes) {
        return call;
    }
    call.block_size = g[0].expect_int();
    call.heads = g[1].expect_int();
    call.head_size = g[2].expect_int();
    SetFrame(call, e);
    std::vector<Named> named;
    for (size_t i = 0; i < names.size(); ++i) {
        named.push_back({names[i], call.caches[i / call.Layers()][i % call.Layers()]});
    }
    if (gather) {
        RequireWritable(name, buffer);
        RequireApart(name, buffer, named);
        return call;
    }
    for (const Named& written : named) {
        RequireApart(written.name, written.tensor, {{name, buffer}});
    }
    RequireOutputsApart(named);
    return call;
}

}  // namespace transfer_rules

FrameArray TransferCall::Strides(const at::Tensor& t, BlockLayout layout, bool buffer_side) const
{
    const int64_t k = t.dim(), group = heads / splits, r = frame[3], w = frame[5];  // r, w: SetFrame
    if (layout == BlockLayout::kNz) {
        const int64_t piece = t.stride(k - 3), token = t.stride(k - 2), element = t.stride(k - 1), e = t.size(k - 1);
        return {token, piece * (group * head_size / e), piece * (r * head_size / e), element * head_size, piece,
                element};
    }
    int64_t token, head, element, split;
    if (layout == BlockLayout::kHnd) {
        head = t.stride(k - 3), token = t.stride(k - 2), element = t.stride(k - 1), split = head * group;
    } else if (buffer_side && splits > 1) {
        split = t.stride(k - 4), token = t.stride(k - 3), head = t.stride(k - 2), element = t.stride(k - 1);
    } else {
        token = t.stride(k - 3), head = t.stride(k - 2), element = t.stride(k - 1), split = head * group;
    }
    return {token, split, head * r, head, element * w, element};
}

FrameArray TransferCall::Ordered(const FrameArray& values) const
{
    constexpr std::array<int, kFrameDims> kTokensOuter = {0, 1, 2, 3, 4, 5}, kTokensInner = {1, 2, 3, 4, 0, 5};
    const bool nz_written = (gather ? buffer_layout : cache_layout) == BlockLayout::kNz;
    const auto& order = nz_written ? kTokensInner : kTokensOuter;
    FrameArray out{};
    for (int d = 0; d < kFrameDims; ++d) {
        out[d] = values[order[d]];
    }
    return out;
}

TransferCall CheckGatherBlocks(at::TensorList key_caches, at::TensorList value_caches, const at::Tensor& block_ids,
                               const at::Tensor& out, c10::string_view cache_layout, c10::string_view out_layout,
                               int64_t head_splits, Check check)
{
    return transfer_rules::CheckTransfer(true, key_caches, value_caches, block_ids, out, cache_layout, out_layout, head_splits,
                                 check);
}

TransferCall CheckScatterBlocks(const at::Tensor& src, at::TensorList key_caches, at::TensorList value_caches,
                                const at::Tensor& block_ids, c10::string_view src_layout,
                                c10::string_view cache_layout, int64_t head_splits, Check check)
{
    return transfer_rules::CheckTransfer(false, key_caches, value_caches, block_ids, src, cache_layout, src_layout,
                                 head_splits, check);
}

std::vector<int64_t> PlanTransfer(const TransferCall& call)
{
    const IndexTensors host = OnHost({call.block_ids});
    const IndexReader reader(host[0]);
    std::vector<int64_t> ids(reader.Rows());
    if (call.caches.empty() || call.caches[0].empty()) {
        return ids;
    }
    const int64_t blocks = call.caches[0][0].size(0);
    std::unordered_map<int64_t, int64_t> first;
    for (int64_t j = 0; j < reader.Rows(); ++j) {
        ids[j] = reader(j);
        TORCH_CHECK_VALUE(ids[j] >= 0 && ids[j] < blocks, "block_ids[", j, "] = ", ids[j],
                          " is out of range: the caches hold ", blocks, " blocks");
        if (!call.gather) {
            const auto [at, inserted] = first.emplace(ids[j], j);
            TORCH_CHECK_VALUE(inserted, "block_ids[", j, "] = ", ids[j], " repeats block_ids[", at->second,
                              "]: scatter_blocks writes a block from one entry only");
        }
    }
    return ids;
}

}  // namespace ascend_kv
