// vLLM's cache ops under its schemas (docs/semantics.md §16): reshape_and_cache_flash and the paged-attention
// reshape_and_cache (uint8 fp8 caches taken as they are: viewed as their codes here, below the dispatcher,
// then written by reshape_and_cache's own implementation), convert_fp8, and gather_cache.
#include <algorithm>
#include <string>
#include <utility>

#include <ATen/ATen.h>

#include "cpu_fallback/vllm_cache.h"
#include "csrc/ops/ops.h"
#include "csrc/ops/route.h"
#include "csrc/ops/upload.h"
#include "csrc/rules/memory.h"
#include "csrc/rules/reshape_and_cache.h"
#include "csrc/rules/tensors.h"
#include "csrc/rules/text.h"
#include "csrc/rules/vllm_cache.h"

namespace ascend_kv {
namespace {

/// A vLLM cache write as reshape_and_cache calls on (key_cache, value_cache) codes, one call per
/// side when `split` (the paged-attention layout: K and V rows of different shapes), both sides
/// checked before either is written; `meta` runs the shapes-only implementations.
void Write(const at::Tensor& key, const at::Tensor& value, const at::Tensor& key_cache, const at::Tensor& value_cache,
           const at::Tensor& slot_mapping, const std::string& kv_cache_dtype, const at::Tensor& k_scale,
           const at::Tensor& v_scale, bool split, bool meta)
{
    const std::optional<at::ScalarType> codes = Fp8CacheType("kv_cache_dtype", kv_cache_dtype);
    const at::Tensor kc = codes ? CacheCodes("key_cache", key_cache, *codes, kv_cache_dtype) : key_cache;
    const at::Tensor vc = codes ? CacheCodes("value_cache", value_cache, *codes, kv_cache_dtype) : value_cache;
    at::Tensor k = key, kcache = kc, vcache = vc, ks = k_scale;
    if (split) {
        const PagedViews views = CheckPagedLayout(key, value, kc, vc, codes ? k_scale : at::Tensor(),
                                                  meta ? Check::kShapes : Check::kCall);
        k = views.key;
        kcache = views.key_cache;
        vcache = views.value_cache;
        ks = views.k_scale;
    }
    const c10::optional<at::Tensor> none;
    const auto side = [&](const at::Tensor& tokens, const c10::optional<at::Tensor>& other,
                          const at::Tensor& cache, const c10::optional<at::Tensor>& other_cache,
                          const at::Tensor& scale, const at::Tensor& other_scale) {
        const auto s = codes ? c10::optional<at::Tensor>(scale) : none;
        const auto os = codes && other ? c10::optional<at::Tensor>(other_scale) : none;
        if (meta) {
            ReshapeAndCacheQuantMeta(tokens, other, cache, other_cache, slot_mapping, "nd", s, none, none, none, os,
                                     none, none, none);
        } else if (codes) {
            ReshapeAndCacheQuant(tokens, other, cache, other_cache, slot_mapping, "nd", s, none, none, none, os, none,
                                 none, none);
        } else {
            ReshapeAndCache(tokens, other, cache, other_cache, slot_mapping, "nd");
        }
    };
    if (!split) {
        side(k, value, kcache, vcache, ks, v_scale);
        return;
    }
    if (!meta) {  // both sides' rules, then the writes
        const auto quant = [&](const at::Tensor& scale) {
            return codes ? QuantArgs{scale, at::Tensor(), at::Tensor(), at::Tensor()} : QuantArgs();
        };
        CheckReshapeAndCache(k, at::Tensor(), kcache, at::Tensor(), slot_mapping, "nd", Check::kCall, quant(ks));
        CheckReshapeAndCache(value, at::Tensor(), vcache, at::Tensor(), slot_mapping, "nd", Check::kCall,
                             quant(v_scale));
    }
    side(k, none, kcache, none, ks, at::Tensor());
    side(value, none, vcache, none, v_scale, at::Tensor());
}

/// concat_and_cache_mla: kv_c and k_pe as reshape_and_cache's key and value, written into the two column
/// slices of each row (one call; a key-only one for pe_dim 0); fp8_ds_mla's rows built first, then
/// written whole as a key-only write of bytes.
void ConcatMla(const at::Tensor& kv_c, const at::Tensor& k_pe, const at::Tensor& kv_cache,
               const at::Tensor& slot_mapping, const std::string& kv_cache_dtype, const at::Tensor& scale,
               bool skip_scale, bool meta)
{
    BelowAutograd guard;
    const ConcatMlaCall call = CheckConcatMla(kv_c, k_pe, kv_cache, kv_cache_dtype, meta ? Check::kShapes : Check::kCall);
    TORCH_CHECK_VALUE(slot_mapping.dim() != 1 || slot_mapping.sym_size(0) <= kv_c.sym_size(0), "slot_mapping must "
                      "have at most kv_c's ", kv_c.sym_size(0), " tokens, got ", slot_mapping.sym_size(0));
    const c10::optional<at::Tensor> none;
    if (call.ds_mla) {
        const auto n = slot_mapping.sym_size(0);
        const at::Tensor rows = meta ? at::empty_symint({n, kv_cache.sym_size(2)}, kv_cache.options())
                                     : DsMlaRows(call, slot_mapping.dim() == 1 ? slot_mapping.size(0) : 0);
        (meta ? ReshapeAndCacheMeta : ReshapeAndCache)(rows.unsqueeze(1), none, kv_cache.unsqueeze(2), none,
                                                       slot_mapping, "nd");
        return;
    }
    const auto rank = kv_c.sym_size(1);
    const at::Tensor key_cache = call.kv_cache.narrow_symint(2, 0, rank).unsqueeze(2);
    const bool rope = k_pe.sym_size(1) != 0;
    const c10::optional<at::Tensor> value = rope ? c10::optional<at::Tensor>(k_pe.unsqueeze(1)) : none;
    const c10::optional<at::Tensor> value_cache =
        rope ? c10::optional<at::Tensor>(call.kv_cache.narrow_symint(2, rank, k_pe.sym_size(1)).unsqueeze(2)) : none;
    if (!call.codes) {
        (meta ? ReshapeAndCacheMeta : ReshapeAndCache)(kv_c.unsqueeze(1), value, key_cache, value_cache, slot_mapping,
                                                       "nd");
        return;
    }
    const at::Tensor s = skip_scale ? at::ones({}, scale.options()) : scale;
    const c10::optional<at::Tensor> vs = rope ? c10::optional<at::Tensor>(s) : none;
    (meta ? ReshapeAndCacheQuantMeta : ReshapeAndCacheQuant)(kv_c.unsqueeze(1), value, key_cache, value_cache,
                                                             slot_mapping, "nd", s, none, none, none, vs, none, none,
                                                             none);
}

GatherCacheCall CheckedGather(const at::Tensor& src_cache, const at::Tensor& dst, const at::Tensor& block_table,
                              const at::Tensor& cu_seq_lens, const c10::optional<at::Tensor>& seq_starts,
                              c10::string_view kv_cache_dtype, const c10::optional<at::Tensor>& scale, Check check)
{
    return CheckGatherCache(src_cache, dst, block_table, cu_seq_lens, seq_starts.value_or(at::Tensor()),
                            std::string(kv_cache_dtype), scale.value_or(at::Tensor()), check);
}

}  // namespace

void VllmReshapeAndCacheFlash(const at::Tensor& key, const at::Tensor& value, const at::Tensor& key_cache,
                              const at::Tensor& value_cache, const at::Tensor& slot_mapping,
                              c10::string_view kv_cache_dtype, const at::Tensor& k_scale, const at::Tensor& v_scale)
{
    Write(key, value, key_cache, value_cache, slot_mapping, std::string(kv_cache_dtype), k_scale, v_scale, false,
          false);
}

void VllmReshapeAndCacheFlashMeta(const at::Tensor& key, const at::Tensor& value, const at::Tensor& key_cache,
                                  const at::Tensor& value_cache, const at::Tensor& slot_mapping,
                                  c10::string_view kv_cache_dtype, const at::Tensor& k_scale, const at::Tensor& v_scale)
{
    Write(key, value, key_cache, value_cache, slot_mapping, std::string(kv_cache_dtype), k_scale, v_scale, false, true);
}

void VllmReshapeAndCache(const at::Tensor& key, const at::Tensor& value, const at::Tensor& key_cache,
                         const at::Tensor& value_cache, const at::Tensor& slot_mapping, c10::string_view kv_cache_dtype,
                         const at::Tensor& k_scale, const at::Tensor& v_scale)
{
    Write(key, value, key_cache, value_cache, slot_mapping, std::string(kv_cache_dtype), k_scale, v_scale, true,
          false);
}

void VllmReshapeAndCacheMeta(const at::Tensor& key, const at::Tensor& value, const at::Tensor& key_cache,
                             const at::Tensor& value_cache, const at::Tensor& slot_mapping,
                             c10::string_view kv_cache_dtype, const at::Tensor& k_scale, const at::Tensor& v_scale)
{
    Write(key, value, key_cache, value_cache, slot_mapping, std::string(kv_cache_dtype), k_scale, v_scale, true, true);
}

void VllmConcatAndCacheMla(const at::Tensor& kv_c, const at::Tensor& k_pe, const at::Tensor& kv_cache,
                           const at::Tensor& slot_mapping, c10::string_view kv_cache_dtype, const at::Tensor& scale,
                           bool skip_scale)
{
    ConcatMla(kv_c, k_pe, kv_cache, slot_mapping, std::string(kv_cache_dtype), scale, skip_scale, false);
}

void VllmConcatAndCacheMlaMeta(const at::Tensor& kv_c, const at::Tensor& k_pe, const at::Tensor& kv_cache,
                               const at::Tensor& slot_mapping, c10::string_view kv_cache_dtype,
                               const at::Tensor& scale, bool skip_scale)
{
    ConcatMla(kv_c, k_pe, kv_cache, slot_mapping, std::string(kv_cache_dtype), scale, skip_scale, true);
}

void ConcatMlaQ(const at::Tensor& ql_nope, const at::Tensor& q_pe, const at::Tensor& q_out)
{
    BelowAutograd guard;
    CheckConcatMlaQ(ql_nope, q_pe, q_out, Check::kCall);
    Count(q_out.is_cpu() ? Ran::kHostPaths : Ran::kDeviceFallback);
    const int64_t nope = ql_nope.size(2);
    q_out.narrow(2, 0, nope).copy_(ql_nope);
    q_out.narrow(2, nope, q_pe.size(2)).copy_(q_pe);
}

void ConcatMlaQMeta(const at::Tensor& ql_nope, const at::Tensor& q_pe, const at::Tensor& q_out)
{
    NoteTracing();
    CheckConcatMlaQ(ql_nope, q_pe, q_out, Check::kShapes);
}

void VllmIndexerKQuantAndCache(const at::Tensor& k, const at::Tensor& kv_cache, const at::Tensor& slot_mapping,
                               int64_t quant_block_size, c10::string_view kv_cache_dtype)
{
    BelowAutograd guard;
    RequireData("k", k, false);
    RequireNdim("k", k, {2}, "[num_tokens, head_dim]");
    RequireDtype("k", k, {at::kHalf, at::kBFloat16, at::kFloat});
    const IndexerRegions regions = CheckIndexerCache(kv_cache, k.sym_size(1), quant_block_size, Check::kCall);
    const bool mx = kv_cache_dtype == "mxfp8";
    TORCH_CHECK_VALUE(!mx || k.size(1) == kIndexerBlock, "k must have head_dim = 128 for the 'mxfp8' scales, got shape ",
                      ShapeOf(k));
    TORCH_CHECK_VALUE(slot_mapping.dim() != 1 || slot_mapping.size(0) <= k.size(0), "slot_mapping must have at most "
                      "k's ", k.size(0), " tokens, got ", slot_mapping.size(0));
    const int64_t n = slot_mapping.dim() == 1 ? slot_mapping.size(0) : 0;
    const auto [codes, scales] = IndexerRows(k.narrow(0, 0, n), mx || kv_cache_dtype == "ue8m0", mx);
    ReshapeAndCache(codes.unsqueeze(1), scales.unsqueeze(1), regions.codes.unsqueeze(2), regions.scales.unsqueeze(2),
                    slot_mapping, "nd");
}

void VllmIndexerKQuantAndCacheMeta(const at::Tensor& k, const at::Tensor& kv_cache, const at::Tensor& slot_mapping,
                                   int64_t quant_block_size, c10::string_view kv_cache_dtype)
{
    RequireNdim("k", k, {2}, "[num_tokens, head_dim]");
    const IndexerRegions regions = CheckIndexerCache(kv_cache, k.sym_size(1), quant_block_size, Check::kShapes);
    const auto n = slot_mapping.sym_size(0);
    ReshapeAndCacheMeta(at::empty_symint({n, 1, k.sym_size(1)}, kv_cache.options()),
                        at::empty_symint({n, 1, regions.scales.sym_size(2)}, kv_cache.options()),
                        regions.codes.unsqueeze(2), regions.scales.unsqueeze(2), slot_mapping, "nd");
}

/// cp_gather_indexer_k_quant_cache: gather_cache over the two regions, both checked before either runs.
void GatherIndexer(const at::Tensor& kv_cache, const at::Tensor& dst_k, const at::Tensor& dst_scale,
                   const at::Tensor& block_table, const at::Tensor& cu_seq_lens, bool meta)
{
    const Check check = meta ? Check::kShapes : Check::kCall;
    const IndexerRegions regions = CheckIndexerCache(kv_cache, dst_k.sym_size(-1), kIndexerBlock, check);
    RequireDtype("dst_k", dst_k, {at::kByte, at::kFloat8_e4m3fn});
    RequireDtype("dst_scale", dst_scale, {at::kByte});
    const at::Tensor k = dst_k.view(at::kByte);
    const auto rows = dst_k.sym_size(0);
    TORCH_CHECK_VALUE(dst_scale.dim() == 2 && dst_scale.sym_size(0) == rows &&
                      dst_scale.sym_size(1) == regions.scales.sym_size(2), "dst_scale must have shape (", rows, ", ",
                      regions.scales.sym_size(2), ") (4 bytes per 128 of dst_k's elements), got ", ShapeOf(dst_scale));
    for (const auto& [region, dst] : {std::pair{regions.codes, k}, std::pair{regions.scales, dst_scale}}) {
        CheckGatherCache(region, dst, block_table, cu_seq_lens, at::Tensor(), "auto", at::Tensor(), check);
    }
    if (meta) {
        return;
    }
    RequireSeparateOutputs("dst_k", dst_k, "dst_scale", dst_scale);
    const c10::optional<at::Tensor> none;
    GatherCache(regions.codes, k, block_table, cu_seq_lens, none, "auto", none);
    GatherCache(regions.scales, dst_scale, block_table, cu_seq_lens, none, "auto", none);
}

void VllmCpGatherIndexerKQuantCache(const at::Tensor& kv_cache, const at::Tensor& dst_k, const at::Tensor& dst_scale,
                                    const at::Tensor& block_table, const at::Tensor& cu_seq_lens)
{
    GatherIndexer(kv_cache, dst_k, dst_scale, block_table, cu_seq_lens, false);
}

void VllmCpGatherIndexerKQuantCacheMeta(const at::Tensor& kv_cache, const at::Tensor& dst_k,
                                        const at::Tensor& dst_scale, const at::Tensor& block_table,
                                        const at::Tensor& cu_seq_lens)
{
    NoteTracing();
    GatherIndexer(kv_cache, dst_k, dst_scale, block_table, cu_seq_lens, true);
}

void ConvertFp8Op(const at::Tensor& dst_cache, const at::Tensor& src_cache, double scale,
                  c10::string_view kv_cache_dtype)
{
    BelowAutograd guard;
    const ConvertFp8Call call = CheckConvertFp8(dst_cache, src_cache, scale, std::string(kv_cache_dtype), Check::kCall);
    Count(dst_cache.is_cpu() ? Ran::kHostPaths : Ran::kDeviceFallback);
    ConvertFp8(call, scale);
}

void ConvertFp8Meta(const at::Tensor& dst_cache, const at::Tensor& src_cache, double scale,
                    c10::string_view kv_cache_dtype)
{
    NoteTracing();
    CheckConvertFp8(dst_cache, src_cache, scale, std::string(kv_cache_dtype), Check::kShapes);
}

void GatherCache(const at::Tensor& src_cache, const at::Tensor& dst, const at::Tensor& block_table,
                 const at::Tensor& cu_seq_lens, const c10::optional<at::Tensor>& seq_starts,
                 c10::string_view kv_cache_dtype, const c10::optional<at::Tensor>& scale)
{
    BelowAutograd guard;
    GatherCacheCall call = CheckedGather(src_cache, dst, block_table, cu_seq_lens, seq_starts, kv_cache_dtype, scale,
                                         Check::kCall);
    if (src_cache.is_cpu()) {
        const GatherCachePlan plan = PlanGatherCache(call);
        Count(Ran::kHostPaths);
        host::GatherCache(call, plan);
        return;
    }
    if (ReadsValues(call.IndexTensors())) {
        PlanGatherCache(call);
    }
    const IndexTensors index = OnDevice(call.IndexTensors(), src_cache.device());
    call.block_table = index[0];
    call.cu_seq_lens = index[1];
    call.seq_starts = index[2];
    Count(Ran::kDeviceFallback);
    on_device::GatherCache(call);
}

void GatherCacheMeta(const at::Tensor& src_cache, const at::Tensor& dst, const at::Tensor& block_table,
                     const at::Tensor& cu_seq_lens, const c10::optional<at::Tensor>& seq_starts,
                     c10::string_view kv_cache_dtype, const c10::optional<at::Tensor>& scale)
{
    NoteTracing();
    CheckedGather(src_cache, dst, block_table, cu_seq_lens, seq_starts, kv_cache_dtype, scale, Check::kShapes);
}

}  // namespace ascend_kv
