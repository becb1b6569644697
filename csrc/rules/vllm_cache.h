// The rules of vLLM's cache-op forms (docs/semantics.md §16): vLLM's kv_cache_dtype strings, fp8
// caches allocated as uint8 (taken as they are: the operator views them as their codes), the
// paged-attention layout of reshape_and_cache, convert_fp8 and gather_cache (vLLM's cp_gather_cache
// and gather_and_maybe_dequant_cache: one cache, cumulative lengths, token starts).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <ATen/core/Tensor.h>

#include "csrc/rules/check.h"
#include "csrc/rules/index_values.h"

namespace ascend_kv {

/// The fp8 type a vLLM kv_cache_dtype names ("fp8", "fp8_e4m3": float8_e4m3fn, "fp8_e5m2"), nullopt
/// for "auto"; ValueError naming `name` for any other string.
std::optional<at::ScalarType> Fp8CacheType(std::string_view name, const std::string& kv_cache_dtype);

/// `cache` as `codes` elements: a uint8 cache viewed as them (vLLM's allocation), a `codes` one as it
/// is; TypeError for any other dtype.
at::Tensor CacheCodes(std::string_view name, const at::Tensor& cache, at::ScalarType codes,
                      const std::string& kv_cache_dtype);

/// vLLM's paged-attention caches as the ND views reshape_and_cache writes: key_cache
/// [nb, H, D // x, bs, x] as [nb, bs, H * (D // x), x], value_cache [nb, H, D, bs] as [nb, bs, H, D].
struct PagedViews {
    at::Tensor key, key_cache, value_cache;  ///< key as [T, H * (D // x), x]; value is as given
    at::Tensor k_scale;                       ///< a [H] key scale repeated per x-group (else as given)
};

/// The shape rules of vLLM's paged-attention layout, then the views (`k_scale` may be undefined).
PagedViews CheckPagedLayout(const at::Tensor& key, const at::Tensor& value, const at::Tensor& key_cache,
                            const at::Tensor& value_cache, const at::Tensor& k_scale, Check check);

/// A concat_and_cache_mla call: tokens' latent kv_c [T, R] and rope k_pe [T, P] into one cache row
/// each; `ds_mla` is DeepSeek's fp8_ds_mla row (below), else the row is [R + P] elements.
struct ConcatMlaCall {
    at::Tensor kv_c, k_pe, kv_cache;  ///< kv_cache as its codes (fp8 forms) or as given
    std::optional<at::ScalarType> codes;
    bool ds_mla = false;
    bool rope_tail = false;           ///< fp8_ds_mla: the row holds the 128-byte rope tail (656 bytes)
};
/// fp8_ds_mla rows: 512 fp8 e4m3 codes, 4 float32 tile scales (one per 128 elements), then the rope's
/// 64 16-bit values as they are (zeros for pe_dim 0); 528 bytes without the rope tail.
constexpr int64_t kDsMlaRank = 512, kDsMlaTile = 128, kDsMlaRope = 64, kDsMlaRow = 656, kDsMlaShortRow = 528;
ConcatMlaCall CheckConcatMla(const at::Tensor& kv_c, const at::Tensor& k_pe, const at::Tensor& kv_cache,
                             const std::string& kv_cache_dtype, Check check);

/// concat_mla_q: ql_nope [T, H, R] and q_pe [T, H, P] of one dtype into q_out [T, H, R + P].
void CheckConcatMlaQ(const at::Tensor& ql_nope, const at::Tensor& q_pe, const at::Tensor& q_out, Check check);

/// DeepSeek-V3.2's indexer K cache [nb, bs, head_dim + 4 * head_dim / 128] uint8, each block its
/// bs * head_dim fp8 e4m3 codes (token-major), then bs * head_dim / 128 float32 scales: as the two
/// byte regions, [nb, bs, head_dim] and [nb, bs, 4 * groups].
struct IndexerRegions {
    at::Tensor codes, scales;
};
/// vLLM's kernels reduce over 128 elements: the one quantization block size taken.
constexpr int64_t kIndexerBlock = 128;
IndexerRegions CheckIndexerCache(const at::Tensor& kv_cache, const c10::SymInt& head_dim, int64_t quant_block_size,
                                 Check check);

/// A convert_fp8 call: `dst` and `src` of one shape, one of them fp8 codes (uint8 or the fp8 type),
/// the other float16/bfloat16/float32.
struct ConvertFp8Call {
    at::Tensor dst, src;   ///< the codes side viewed as `codes`
    at::ScalarType codes;
    bool quantize;         ///< src is floats, dst codes
};
ConvertFp8Call CheckConvertFp8(const at::Tensor& dst, const at::Tensor& src, double scale,
                               const std::string& kv_cache_dtype, Check check);

/// A gather_cache call whose structure is checked: batch entry b fills dst rows
/// [cu_seq_lens[b], cu_seq_lens[b + 1]) with its tokens seq_starts[b] + j (0 without seq_starts),
/// token p in block block_table[b, p // block_size], slot p % block_size.
struct GatherCacheCall {
    at::Tensor src_cache;    ///< [nb, bs, *entries]; fp8 codes viewed as `codes` when dequantizing
    at::Tensor dst;          ///< [rows, *entries], written
    at::Tensor block_table;  ///< [batch, max_blocks]
    at::Tensor cu_seq_lens;  ///< [batch + 1]
    at::Tensor seq_starts;   ///< [batch] token offsets, or undefined
    at::Tensor scale;        ///< one float32 element when dequantizing, else undefined
    std::optional<at::ScalarType> codes;  ///< the fp8 type of a dequantizing gather

    ascend_kv::IndexTensors IndexTensors() const { return {block_table, cu_seq_lens, seq_starts}; }
    int64_t Batch() const { return block_table.size(0); }
};
GatherCacheCall CheckGatherCache(const at::Tensor& src_cache, const at::Tensor& dst, const at::Tensor& block_table,
                                 const at::Tensor& cu_seq_lens, const at::Tensor& seq_starts,
                                 const std::string& kv_cache_dtype, const at::Tensor& scale, Check check);

/// The value rules of a gather_cache call, read on the host (one transfer at most): cu_seq_lens
/// starts at >= 0, never decreases and ends at most at len(dst); seq_starts >= 0; every table entry
/// a token needs exists and names a block in [0, num_blocks). Returns per batch entry its first
/// row, its length and its first token.
struct GatherCachePlan {
    BatchValues first_row, length, first_token;
};
GatherCachePlan PlanGatherCache(const GatherCacheCall& call);

}  // namespace ascend_kv
