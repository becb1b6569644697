// vLLM's cache ops under its schemas (docs/semantics.md §16): reshape_and_cache_flash and the paged-attention
// reshape_and_cache (uint8 fp8 caches taken as they are: viewed as their codes here, below the dispatcher,
// then written by reshape_and_cache's own implementation), convert_fp8, and gather_cache.
#include <string>

#include "cpu_fallback/vllm_cache.h"
#include "csrc/ops/ops.h"
#include "csrc/ops/route.h"
#include "csrc/ops/upload.h"
#include "csrc/rules/reshape_and_cache.h"
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
