// The geometry of a paged cache pair, ND or NZ, in one place: the layout arguments, the shape
// rules of a key/value cache pair, and what every backend reads off them.
//
//   ND  [num_blocks, block_size, num_heads, head_size]     token (blk, slot) = cache[blk, slot]
//   NZ  [num_blocks, T // E, block_size, E]                 token (blk, slot) = cache[blk, :, slot, :]
//
// with T = num_heads * head_size and E = 32 // itemsize (docs/semantics.md, "Layouts"). Sizes are
// SymInts: the same rules check eager calls and the shapes of a traced one.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>

namespace ascend_kv {

/// The cache layouts, numbered as ascend_kv.KvCacheCfg (and ATB's PagedCacheLoadParam).
enum class Layout : int64_t { kNz = 0, kNd = 1 };

/// `kv_cache_cfg` of paged_cache_load's schema: 0 (NZ) or 1 (ND).
Layout LoadLayout(int64_t kv_cache_cfg);
/// `kv_cache_cfg` of reshape_and_cache's schema: "nd" or "nz".
Layout WriteLayout(const std::string& kv_cache_cfg);

/// A checked key/value cache pair: its layout and shape.
struct CacheGeometry {
    Layout layout = Layout::kNd;
    c10::SymInt num_blocks;
    c10::SymInt block_size;
    /// One token of each cache as a gathered row: ND (num_heads, head_size), NZ (T,); the value's
    /// is empty without a value cache.
    std::vector<c10::SymInt> key_row, value_row;

    bool Nd() const { return layout == Layout::kNd; }
    /// The cache dim that numbers a block's token slots: 1 in ND, 2 in NZ.
    int64_t SlotDim() const { return Nd() ? 1 : 2; }
    /// Dims from this one on hold the pieces the kernels copy whole: ND's token rows, NZ's 32-byte pieces.
    int64_t RowDim() const { return Nd() ? 2 : 3; }
    /// What those dims are, for messages.
    const char* RowDimsText() const { return Nd() ? "token rows (dims 2, 3)" : "32-byte pieces (dim 3)"; }
    /// Token slots in each cache.
    c10::SymInt Capacity() const { return num_blocks * block_size; }
};

/// The geometry of the caches paged_cache_load reads, after their shape rules. An NZ shape error
/// on caches that are valid ND says to pass kv_cache_cfg='nd' (NZ is the default, as in ATB).
CacheGeometry ReadGeometry(Layout layout, const at::Tensor& key_cache, const at::Tensor& value_cache);

/// The geometry of the caches reshape_and_cache writes, after their shape rules: `key` with
/// `key_cache`, and `value` with `value_cache` unless both are undefined (key-only); tokens
/// [num_tokens, num_heads, head_size] (3-D), caches 4-D, both already checked.
CacheGeometry WriteGeometry(Layout layout, const at::Tensor& key, const at::Tensor& key_cache,
                            const at::Tensor& value, const at::Tensor& value_cache);

/// ValueError unless `cache` is 4-D (its shape in `layout` named in the message).
void RequireCacheNdim(std::string_view name, const at::Tensor& cache, Layout layout);

/// ValueError unless a row of `elements` of `dtype` is a positive multiple of 32 bytes.
void RequireRowAlignment(std::string_view name, const c10::SymInt& elements, at::ScalarType dtype,
                         std::string_view what);

}  // namespace ascend_kv
