#include "csrc/rules/geometry.h"

#include <utility>

#include "csrc/rules/dtypes.h"
#include "csrc/rules/tensors.h"
#include "csrc/rules/text.h"

namespace ascend_kv {
namespace {

const char* kNdShape = "a 4-D ND cache [num_blocks, block_size, num_heads, head_size]";
const char* kNzShape = "a 4-D NZ cache [num_blocks, num_heads * head_size // E, block_size, E]";

CacheGeometry GeometryOf(Layout layout, const at::Tensor& key_cache, const at::Tensor& value_cache)
{
    CacheGeometry g;
    g.layout = layout;
    g.num_blocks = key_cache.sym_sizes()[0];
    if (layout == Layout::kNd) {
        g.block_size = key_cache.sym_sizes()[1];
        g.key_row = {key_cache.sym_sizes()[2], key_cache.sym_sizes()[3]};
        if (value_cache.defined()) {
            g.value_row = {value_cache.sym_sizes()[2], value_cache.sym_sizes()[3]};
        }
    } else {
        g.block_size = key_cache.sym_sizes()[2];
        g.key_row = {key_cache.sym_sizes()[1] * key_cache.sym_sizes()[3]};
        if (value_cache.defined()) {
            g.value_row = {value_cache.sym_sizes()[1] * value_cache.sym_sizes()[3]};
        }
    }
    return g;
}

/// ValueError unless an NZ cache's last dim is one 32-byte piece, E elements.
void RequireNzPieces(std::string_view name, const at::Tensor& cache)
{
    const int64_t e = NzElements(cache.element_size());
    TORCH_CHECK_VALUE(cache.sym_sizes()[3] == e, name, ".shape[3] must be E = ", e, " for ",
                      DtypeName(cache.scalar_type()), " in NZ, got ", cache.sym_sizes()[3]);
}

void RequireSameDims(const at::Tensor& key_cache, const at::Tensor& value_cache,
                     std::initializer_list<std::pair<int64_t, const char*>> dims)
{
    for (const auto& [i, what] : dims) {
        TORCH_CHECK_VALUE(value_cache.sym_sizes()[i] == key_cache.sym_sizes()[i], "value_cache.shape[", i, "] (", what,
                          ") = ", value_cache.sym_sizes()[i], " must equal key_cache.shape[", i, "] = ",
                          key_cache.sym_sizes()[i]);
    }
}

void RequireNzBlockSize(const c10::SymInt& block_size)
{
    TORCH_CHECK_VALUE(block_size % kNzBlockSizeMultiple == 0, "key_cache.shape[2] (block_size) = ", block_size,
                      " must be a multiple of ", kNzBlockSizeMultiple, " in NZ");
}

CacheGeometry ReadGeometryAs(Layout layout, const at::Tensor& key_cache, const at::Tensor& value_cache)
{
    RequireCacheNdim("key_cache", key_cache, layout);
    RequireCacheNdim("value_cache", value_cache, layout);
    if (layout == Layout::kNd) {
        RequireSameDims(key_cache, value_cache, {{0, "num_blocks"}, {1, "block_size"}, {2, "num_heads"}});
        for (const Named& cache : {Named{"key_cache", key_cache}, Named{"value_cache", value_cache}}) {
            RequireRowAlignment(cache.name, cache.tensor.sym_sizes()[2] * cache.tensor.sym_sizes()[3],
                                cache.tensor.scalar_type(), "num_heads * head_size");
        }
        return GeometryOf(layout, key_cache, value_cache);
    }
    for (const Named& cache : {Named{"key_cache", key_cache}, Named{"value_cache", value_cache}}) {
        RequireNzPieces(cache.name, cache.tensor);
        const c10::SymInt fractals = cache.tensor.sym_sizes()[1];
        const c10::SymInt row_bytes = fractals * cache.tensor.sym_sizes()[3] * cache.tensor.element_size();
        TORCH_CHECK_VALUE(fractals != 0 && row_bytes <= kNzMaxRowBytes, cache.name,
                          ": num_heads * head_size * itemsize must be in (0, ", kNzMaxRowBytes, "] bytes in NZ, got ",
                          row_bytes, " (", cache.name, ".shape[1] = ", fractals, " fractals of ", kBlockBytes,
                          " bytes)");
    }
    RequireSameDims(key_cache, value_cache, {{0, "num_blocks"}, {2, "block_size"}});
    RequireNzBlockSize(key_cache.sym_sizes()[2]);
    return GeometryOf(layout, key_cache, value_cache);
}

/// ValueError unless an NZ head is a positive multiple of 32 bytes below the kernels' limit.
void RequireNzHeadBytes(std::string_view name, const c10::SymInt& head_size, at::ScalarType dtype)
{
    const c10::SymInt head_bytes = head_size * static_cast<int64_t>(c10::elementSize(dtype));
    TORCH_CHECK_VALUE(head_bytes != 0 && head_bytes % kBlockBytes == 0 && head_bytes < kNzMaxHeadBytes, name,
                      ": head_size * itemsize must be a positive multiple of ", kBlockBytes, " bytes below ",
                      kNzMaxHeadBytes, " in NZ, got ", head_bytes, " (", name, ".shape[2] = ", head_size, " of ",
                      DtypeName(dtype), ")");
}

/// ValueError unless `cache`'s per-token part matches `tokens` [num_tokens, num_heads, head_size].
void RequireCacheMatches(std::string_view name, const at::Tensor& cache, const std::string& tokens_name,
                         const at::Tensor& tokens, Layout layout)
{
    if (layout == Layout::kNd) {
        TORCH_CHECK_VALUE(cache.sym_sizes()[2] == tokens.sym_sizes()[1] && cache.sym_sizes()[3] == tokens.sym_sizes()[2], name,
                          ".shape[2:] (num_heads, head_size) = ", Tuple(cache.sym_sizes().slice(2)), " must equal ",
                          tokens_name, ".shape[1:] = ", Tuple(tokens.sym_sizes().slice(1)));
        return;
    }
    RequireNzPieces(name, cache);
    const c10::SymInt row = tokens.sym_sizes()[1] * tokens.sym_sizes()[2];
    const c10::SymInt pieces = cache.sym_sizes()[1] * cache.sym_sizes()[3];
    TORCH_CHECK_VALUE(pieces == row, name, ".shape[1] * E = ", pieces, " must equal num_heads * head_size = ", row,
                      " (", tokens_name, ".shape[1] * ", tokens_name, ".shape[2])");
}

}  // namespace

Layout LoadLayout(int64_t kv_cache_cfg)
{
    TORCH_CHECK_VALUE(kv_cache_cfg == 0 || kv_cache_cfg == 1,
                      "kv_cache_cfg must be 0 (K_CACHE_V_CACHE_NZ) or 1 (K_CACHE_V_CACHE_ND), got ", kv_cache_cfg);
    return static_cast<Layout>(kv_cache_cfg);
}

Layout WriteLayout(const std::string& kv_cache_cfg)
{
    if (kv_cache_cfg == "nd") {
        return Layout::kNd;
    }
    TORCH_CHECK_VALUE(kv_cache_cfg == "nz", "kv_cache_cfg must be 'nd' or 'nz', got '", kv_cache_cfg, "'");
    return Layout::kNz;
}

void RequireCacheNdim(std::string_view name, const at::Tensor& cache, Layout layout)
{
    RequireNdim(name, cache, {4}, layout == Layout::kNd ? kNdShape : kNzShape);
}

void RequireRowAlignment(std::string_view name, const c10::SymInt& elements, at::ScalarType dtype,
                         std::string_view what)
{
    const int64_t itemsize = static_cast<int64_t>(c10::elementSize(dtype));
    const c10::SymInt row_bytes = elements * itemsize;
    TORCH_CHECK_VALUE(row_bytes != 0 && row_bytes % kBlockBytes == 0, name, ": ", what, " = ", elements,
                      " must be a positive multiple of ", kBlockBytes / itemsize, " elements (", kBlockBytes,
                      " bytes of ", DtypeName(dtype), "), got ", row_bytes, " bytes");
}

namespace {

/// `geometry(layout)`; an NZ error whose caches would be valid in ND (`geometry(kNd)` passes) says so and
/// what to pass, `then` (e.g. "(paged_cache_load reads NZ by default, as ATB does)").
template <class Geometry>
CacheGeometry WithNdHint(Layout layout, const Geometry& geometry, const char* then)
{
    if (layout == Layout::kNd) {
        return geometry(layout);
    }
    try {
        return geometry(layout);
    } catch (const c10::ValueError& nz_error) {
        try {
            geometry(Layout::kNd);
        } catch (const c10::Error&) {
            throw nz_error;  // not ND either: the NZ error stands
        }
        TORCH_CHECK_VALUE(false, nz_error.msg(), ". The caches are valid ND caches [num_blocks, block_size, num_heads, "
                          "head_size]: pass kv_cache_cfg='nd' ", then);
    }
}

CacheGeometry WriteGeometryAs(Layout layout, const at::Tensor& key, const at::Tensor& key_cache,
                              const at::Tensor& value, const at::Tensor& value_cache)
{
    const bool pair = value_cache.defined();
    if (pair) {
        RequireSameDims(key_cache, value_cache,
                        {{0, "num_blocks"}, {layout == Layout::kNd ? 1 : 2, "block_size"}});
    }
    RequireCacheMatches("key_cache", key_cache, "key", key, layout);
    if (layout == Layout::kNz) {
        RequireNzHeadBytes("key", key.sym_sizes()[2], key_cache.scalar_type());
    }
    if (pair) {
        RequireCacheMatches("value_cache", value_cache, "value", value, layout);
        if (layout == Layout::kNz) {
            RequireNzHeadBytes("value", value.sym_sizes()[2], value_cache.scalar_type());
        }
    }
    if (layout == Layout::kNz) {
        RequireNzBlockSize(key_cache.sym_sizes()[2]);
    }
    return GeometryOf(layout, key_cache, value_cache);
}

}  // namespace

CacheGeometry ReadGeometry(Layout layout, const at::Tensor& key_cache, const at::Tensor& value_cache)
{
    return WithNdHint(layout, [&](Layout as) { return ReadGeometryAs(as, key_cache, value_cache); },
                      "(paged_cache_load reads NZ by default, as ATB does)");
}

CacheGeometry WriteGeometry(Layout layout, const at::Tensor& key, const at::Tensor& key_cache,
                            const at::Tensor& value, const at::Tensor& value_cache)
{
    return WithNdHint(layout, [&](Layout as) { return WriteGeometryAs(as, key, key_cache, value, value_cache); },
                      "(or make NZ caches [num_blocks, T // E, block_size, E] with ascend_kv.nd_to_nz)");
}

}  // namespace ascend_kv
