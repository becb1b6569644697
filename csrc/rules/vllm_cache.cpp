#include "csrc/rules/vllm_cache.h"

#include <cmath>
#include <vector>

#include "csrc/rules/dtypes.h"
#include "csrc/rules/memory.h"
#include "csrc/rules/tensors.h"
#include "csrc/rules/text.h"

namespace ascend_kv {
namespace {

constexpr at::ScalarType kFloats[] = {at::kHalf, at::kBFloat16, at::kFloat};

bool IsFloat(at::ScalarType dtype)
{
    return dtype == at::kHalf || dtype == at::kBFloat16 || dtype == at::kFloat;
}

bool IsCodes(at::ScalarType dtype, at::ScalarType codes)
{
    return dtype == at::kByte || dtype == codes;
}

}  // namespace

std::optional<at::ScalarType> Fp8CacheType(std::string_view name, const std::string& kv_cache_dtype)
{
    if (kv_cache_dtype == "auto") {
        return std::nullopt;
    }
    if (kv_cache_dtype == "fp8" || kv_cache_dtype == "fp8_e4m3") {
        return at::kFloat8_e4m3fn;
    }
    TORCH_CHECK_VALUE(kv_cache_dtype == "fp8_e5m2", name, " must be 'auto', 'fp8', 'fp8_e4m3' or 'fp8_e5m2', got '",
                      kv_cache_dtype, "'");
    return at::kFloat8_e5m2;
}

at::Tensor CacheCodes(std::string_view name, const at::Tensor& cache, at::ScalarType codes,
                      const std::string& kv_cache_dtype)
{
    TORCH_CHECK_TYPE(IsCodes(cache.scalar_type(), codes), name, " must have dtype torch.uint8 or ", TorchDtype(codes),
                     " for kv_cache_dtype = '", kv_cache_dtype, "', got ", TorchDtype(cache.scalar_type()));
    return cache.scalar_type() == codes ? cache : cache.view(codes);
}

PagedViews CheckPagedLayout(const at::Tensor& key, const at::Tensor& value, const at::Tensor& key_cache,
                            const at::Tensor& value_cache, const at::Tensor& k_scale, Check check)
{
    const bool meta = AllowsMeta(check, key_cache);
    for (const Named& t : {Named{"key", key}, Named{"value", value}, Named{"key_cache", key_cache},
                           Named{"value_cache", value_cache}}) {
        RequireData(t.name, t.tensor, meta);
    }
    RequireNdim("key", key, {3}, "[num_tokens, num_heads, head_size]");
    RequireNdim("value", value, {3}, "[num_tokens, num_heads, head_size]");
    RequireNdim("key_cache", key_cache, {5}, "[num_blocks, num_heads, head_size // x, block_size, x]");
    RequireNdim("value_cache", value_cache, {4}, "[num_blocks, num_heads, head_size, block_size]");
    const auto heads = key.sym_size(1), head_size = key.sym_size(2);
    const auto nb = key_cache.sym_size(0), bs = key_cache.sym_size(3), x = key_cache.sym_size(4);
    TORCH_CHECK_VALUE(key_cache.sym_size(1) == heads && key_cache.sym_size(2) * x == head_size, "key_cache must have "
                      "shape (num_blocks, ", heads, ", head_size // x, block_size, x) with (head_size // x) * x = ",
                      head_size, " (key's heads and head_size), got ", ShapeOf(key_cache));
    TORCH_CHECK_VALUE(value.sym_size(0) == key.sym_size(0) && value.sym_size(1) == heads &&
                      value.sym_size(2) == head_size, "value must have key's shape ", ShapeOf(key), " (one head_size "
                      "in this layout), got ", ShapeOf(value));
    const std::vector<c10::SymInt> want = {nb, heads, head_size, bs};
    TORCH_CHECK_VALUE(value_cache.sym_sizes() == c10::SymIntArrayRef(want), "value_cache must have shape ",
                      Tuple(want), " ([num_blocks, num_heads, head_size, block_size] of key_cache), got ",
                      ShapeOf(value_cache));
    if (check == Check::kCall && key_cache.size(1) > 1 && key_cache.size(2) > 1) {
        TORCH_CHECK_VALUE(key_cache.stride(1) == key_cache.size(2) * key_cache.stride(2), "key_cache must hold each "
                          "head's x-groups in one run (stride(1) = shape[2] * stride(2)), got strides ",
                          Tuple(key_cache.strides()));
    }
    PagedViews views;
    const auto groups = key_cache.sym_size(2);
    views.key_cache = key_cache.permute({0, 3, 1, 2, 4}).flatten(2, 3);
    views.key = key.reshape_symint({key.sym_size(0), heads * groups, x});
    views.value_cache = value_cache.permute({0, 3, 1, 2});
    views.k_scale = k_scale;
    if (k_scale.defined() && k_scale.dim() == 1 && k_scale.sym_size(0) == heads && heads != 1) {
        views.k_scale = k_scale.repeat_interleave_symint(groups);
    }
    return views;
}

ConcatMlaCall CheckConcatMla(const at::Tensor& kv_c, const at::Tensor& k_pe, const at::Tensor& kv_cache,
                             const std::string& kv_cache_dtype, Check check)
{
    const bool meta = AllowsMeta(check, kv_cache);
    for (const Named& t : {Named{"kv_c", kv_c}, Named{"k_pe", k_pe}, Named{"kv_cache", kv_cache}}) {
        RequireData(t.name, t.tensor, meta);
    }
    RequireNdim("kv_c", kv_c, {2}, "[num_tokens, kv_lora_rank]");
    RequireNdim("k_pe", k_pe, {2}, "[num_tokens, pe_dim]");
    RequireNdim("kv_cache", kv_cache, {3}, "[num_blocks, block_size, entry]");
    TORCH_CHECK_VALUE(k_pe.sym_size(0) == kv_c.sym_size(0), "k_pe must have kv_c's ", kv_c.sym_size(0),
                      " tokens, got shape ", ShapeOf(k_pe));
    ConcatMlaCall call{kv_c, k_pe, kv_cache, std::nullopt, kv_cache_dtype == "fp8_ds_mla", false};
    if (!call.ds_mla) {
        call.codes = Fp8CacheType("kv_cache_dtype", kv_cache_dtype);
        if (call.codes) {
            call.kv_cache = CacheCodes("kv_cache", kv_cache, *call.codes, kv_cache_dtype);
        }
        TORCH_CHECK_VALUE(kv_cache.sym_size(2) == kv_c.sym_size(1) + k_pe.sym_size(1), "kv_cache must have rows of "
                          "kv_lora_rank + pe_dim = ", kv_c.sym_size(1) + k_pe.sym_size(1), " elements, got shape ",
                          ShapeOf(kv_cache));
        return call;
    }
    TORCH_CHECK_VALUE(kv_c.sym_size(1) == kDsMlaRank, "kv_c must have kv_lora_rank = 512 for kv_cache_dtype = "
                      "'fp8_ds_mla', got shape ", ShapeOf(kv_c));
    TORCH_CHECK_VALUE(k_pe.sym_size(1) == kDsMlaRope || k_pe.sym_size(1) == 0, "k_pe must have pe_dim = 64 or 0 for "
                      "kv_cache_dtype = 'fp8_ds_mla', got shape ", ShapeOf(k_pe));
    RequireDtype("kv_c", kv_c, {at::kBFloat16, at::kHalf});
    RequireDtype("kv_cache", kv_cache, {at::kByte});
    RequireSameDtype("k_pe", k_pe, "kv_c", kv_c);
    call.rope_tail = kv_cache.sym_size(2) == kDsMlaRow;
    TORCH_CHECK_VALUE(call.rope_tail || (k_pe.sym_size(1) == 0 && kv_cache.sym_size(2) == kDsMlaShortRow),
                      "kv_cache must have 656-byte rows (or 528 with pe_dim = 0) for kv_cache_dtype = 'fp8_ds_mla', "
                      "got shape ", ShapeOf(kv_cache));
    return call;
}

void CheckConcatMlaQ(const at::Tensor& ql_nope, const at::Tensor& q_pe, const at::Tensor& q_out, Check check)
{
    const bool meta = AllowsMeta(check, q_out);
    for (const Named& t : {Named{"ql_nope", ql_nope}, Named{"q_pe", q_pe}, Named{"q_out", q_out}}) {
        RequireData(t.name, t.tensor, meta);
        RequireNdim(t.name, t.tensor, {3}, "[num_tokens, num_heads, dim]");
    }
    RequireSameDtype("q_pe", q_pe, "ql_nope", ql_nope);
    RequireSameDtype("q_out", q_out, "ql_nope", ql_nope);
    const std::vector<c10::SymInt> want = {ql_nope.sym_size(0), ql_nope.sym_size(1),
                                           ql_nope.sym_size(2) + q_pe.sym_size(2)};
    TORCH_CHECK_VALUE(q_pe.sym_size(0) == want[0] && q_pe.sym_size(1) == want[1], "q_pe must have ql_nope's tokens "
                      "and heads ", Tuple(ql_nope.sym_sizes().slice(0, 2)), ", got shape ", ShapeOf(q_pe));
    TORCH_CHECK_VALUE(q_out.sym_sizes() == c10::SymIntArrayRef(want), "q_out must have shape ", Tuple(want),
                      ", got ", ShapeOf(q_out));
    RequireSameDevice({{"q_out", q_out}, {"ql_nope", ql_nope}, {"q_pe", q_pe}});
    if (check == Check::kCall) {
        RequireWritable("q_out", q_out);
        RequireApart("q_out", q_out, {{"ql_nope", ql_nope}, {"q_pe", q_pe}});
    }
}

IndexerRegions CheckIndexerCache(const at::Tensor& kv_cache, const c10::SymInt& head_dim, int64_t quant_block_size,
                                 Check check)
{
    const bool meta = AllowsMeta(check, kv_cache);
    RequireData("kv_cache", kv_cache, meta);
    TORCH_CHECK_VALUE(quant_block_size == kIndexerBlock, "quant_block_size must be 128 (vLLM's kernels reduce over "
                      "128 elements), got ", quant_block_size);
    TORCH_CHECK_VALUE(head_dim % kIndexerBlock == 0 && head_dim > 0, "head_dim must be a positive multiple of 128, got ",
                      head_dim);
    RequireDtype("kv_cache", kv_cache, {at::kByte});
    const c10::SymInt scale_bytes = head_dim / kIndexerBlock * 4;
    TORCH_CHECK_VALUE(kv_cache.dim() == 3 && kv_cache.sym_size(2) == head_dim + scale_bytes, "kv_cache must have shape "
                      "(num_blocks, block_size, ", head_dim + scale_bytes, ") (head_dim codes and its scales' bytes per "
                      "token), got ", ShapeOf(kv_cache));
    if (check == Check::kCall && kv_cache.numel() > 0) {
        TORCH_CHECK_VALUE(kv_cache.stride(2) == 1 && kv_cache.stride(1) == kv_cache.size(2), "kv_cache must hold each "
                          "block's bytes contiguously (its regions of codes and scales), got strides ",
                          Tuple(kv_cache.strides()));
    }
    const auto nb = kv_cache.sym_size(0), bs = kv_cache.sym_size(1);
    const at::Tensor blocks = kv_cache.flatten(1, 2);
    return {blocks.narrow_symint(1, 0, bs * head_dim).view_symint({nb, bs, head_dim}),
            blocks.narrow_symint(1, bs * head_dim, bs * scale_bytes).view_symint({nb, bs, scale_bytes})};
}

ConvertFp8Call CheckConvertFp8(const at::Tensor& dst, const at::Tensor& src, double scale,
                               const std::string& kv_cache_dtype, Check check)
{
    const bool meta = AllowsMeta(check, dst);
    RequireData("dst_cache", dst, meta);
    RequireData("src_cache", src, meta);
    const std::optional<at::ScalarType> codes = Fp8CacheType("kv_cache_dtype", kv_cache_dtype);
    TORCH_CHECK_VALUE(codes.has_value(), "kv_cache_dtype must be 'fp8', 'fp8_e4m3' or 'fp8_e5m2' for convert_fp8, "
                      "got 'auto'");
    TORCH_CHECK_VALUE(std::isfinite(scale) && scale > 0, "scale must be a positive finite number, got ", scale);
    ConvertFp8Call call{dst, src, *codes, IsFloat(src.scalar_type())};
    if (call.quantize) {
        call.dst = CacheCodes("dst_cache", dst, *codes, kv_cache_dtype);
    } else {
        call.src = CacheCodes("src_cache", src, *codes, kv_cache_dtype);
        RequireDtype("dst_cache", dst, kFloats);
    }
    TORCH_CHECK_VALUE(dst.sym_sizes() == src.sym_sizes(), "dst_cache must have src_cache's shape ", ShapeOf(src),
                      ", got ", ShapeOf(dst));
    RequireSameDevice({{"dst_cache", dst}, {"src_cache", src}});
    if (check == Check::kCall) {
        RequireWritable("dst_cache", dst);
        RequireApart("dst_cache", dst, {{"src_cache", src}});
    }
    return call;
}

GatherCacheCall CheckGatherCache(const at::Tensor& src_cache, const at::Tensor& dst, const at::Tensor& block_table,
                                 const at::Tensor& cu_seq_lens, const at::Tensor& seq_starts,
                                 const std::string& kv_cache_dtype, const at::Tensor& scale, Check check)
{
    const bool meta = AllowsMeta(check, src_cache);
    RequireData("src_cache", src_cache, meta);
    RequireData("dst", dst, meta);
    TORCH_CHECK_VALUE(src_cache.dim() >= 3, "src_cache must be [num_blocks, block_size, *entries] (3-D or more), "
                      "got shape ", ShapeOf(src_cache));
    const auto entries = src_cache.sym_sizes().slice(2);
    TORCH_CHECK_VALUE(dst.dim() == src_cache.dim() - 1 && dst.sym_sizes().slice(1) == entries, "dst must be [rows, "
                      "*entries] with src_cache's entries ", Tuple(entries), ", got shape ", ShapeOf(dst));
    GatherCacheCall call;
    call.codes = Fp8CacheType("kv_cache_dtype", kv_cache_dtype);
    if (call.codes) {
        call.src_cache = CacheCodes("src_cache", src_cache, *call.codes, kv_cache_dtype);
        RequireDtype("dst", dst, kFloats);
        TORCH_CHECK_VALUE(scale.defined(), "scale must be given (a float32 tensor of one element) for kv_cache_dtype "
                          "= '", kv_cache_dtype, "'");
        RequireData("scale", scale, meta);
        RequireDtype("scale", scale, {at::kFloat});
        TORCH_CHECK_VALUE(scale.sym_numel() == 1, "scale must have one element, got shape ", ShapeOf(scale));
        call.scale = scale;
    } else {
        RequireCacheDtype("src_cache", src_cache);
        RequireSameDtype("dst", dst, "src_cache", src_cache);
        call.src_cache = src_cache;
    }
    RequireIndexTensor("block_table", block_table, 2, meta);
    RequireIndexTensor("cu_seq_lens", cu_seq_lens, 1, meta);
    RequireEntries("cu_seq_lens", cu_seq_lens, block_table.sym_size(0) + 1, "len(block_table) + 1");
    if (seq_starts.defined()) {
        RequireIndexTensor("seq_starts", seq_starts, 1, meta);
        RequireEntries("seq_starts", seq_starts, block_table.sym_size(0), "len(block_table)");
    }
    const at::Device device = RequireSameDevice({{"src_cache", src_cache}, {"dst", dst}, {"scale", scale}});
    RequireIndexDevices(device, {{"block_table", block_table}, {"cu_seq_lens", cu_seq_lens},
                                 {"seq_starts", seq_starts}});
    if (check == Check::kCall) {
        RequireWritable("dst", dst);
        RequireApart("dst", dst, {{"src_cache", src_cache}, {"scale", scale}});
    }
    call.dst = dst;
    call.block_table = block_table;
    call.cu_seq_lens = cu_seq_lens;
    call.seq_starts = seq_starts;
    return call;
}

GatherCachePlan PlanGatherCache(const GatherCacheCall& call)
{
    const IndexTensors host = OnHost(call.IndexTensors());
    const IndexReader table(host[0]), cu(host[1]);
    const int64_t batch = table.Rows(), rows = call.dst.size(0);
    const int64_t num_blocks = call.src_cache.size(0), block_size = call.src_cache.size(1);
    GatherCachePlan plan;
    TORCH_CHECK_VALUE(cu(0) >= 0, "cu_seq_lens[0] = ", cu(0), " is negative");
    for (int64_t b = 0; b < batch; ++b) {
        const int64_t start = cu(b), end = cu(b + 1);
        TORCH_CHECK_VALUE(end >= start, "cu_seq_lens[", b + 1, "] = ", end, " is smaller than cu_seq_lens[", b, "] = ",
                          start, ": cumulative lengths must be non-decreasing");
        const int64_t first = host[2].defined() ? IndexReader(host[2])(b) : 0;
        TORCH_CHECK_VALUE(first >= 0, "seq_starts[", b, "] = ", first, " is negative");
        plan.first_row.push_back(start);
        plan.length.push_back(end - start);
        plan.first_token.push_back(first);
    }
    TORCH_CHECK_VALUE(cu(batch) <= rows, "cu_seq_lens[", batch, "] = ", cu(batch), " is past dst's ", rows,
                      " rows (dst.shape[0])");
    for (int64_t b = 0; b < batch; ++b) {
        if (plan.length[b] == 0) {
            continue;
        }
        const __int128 last_token = static_cast<__int128>(plan.first_token[b]) + plan.length[b] - 1;
        const int64_t first_column = plan.first_token[b] / block_size;
        const __int128 last_column = last_token / block_size;
        TORCH_CHECK_VALUE(last_column < table.Columns(), "block_table has ", table.Columns(), " columns, but batch "
                          "entry ", b, " needs columns ", first_column, "..", WideText(last_column), " (tokens ",
                          plan.first_token[b], "..", WideText(last_token), ", block_size ", block_size, ")");
        for (int64_t c = first_column; c <= static_cast<int64_t>(last_column); ++c) {
            const int64_t block = table.At(b, c);
            TORCH_CHECK_VALUE(block >= 0 && block < num_blocks, "block_table[", b, ", ", c, "] = ", block,
                              " is outside [0, ", num_blocks, ") (num_blocks = src_cache.shape[0])");
        }
    }
    return plan;
}

}  // namespace ascend_kv
