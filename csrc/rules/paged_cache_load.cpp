#include "csrc/rules/paged_cache_load.h"

#include <optional>
#include <tuple>
#include <sstream>

#include "csrc/rules/dtypes.h"
#include "csrc/rules/index_values.h"
#include "csrc/rules/memory.h"
#include "csrc/rules/tensors.h"
#include "csrc/rules/text.h"

namespace ascend_kv {
namespace {

/// "[rows >= 7, 2, 16]": the shape an output must have.
std::string OutputShape(const std::vector<c10::SymInt>& row, std::optional<__int128> rows)
{
    std::ostringstream text;
    text << "[rows";
    if (rows) {
        text << " >= " << WideText(*rows);
    }
    for (const c10::SymInt& n : row) {
        text << ", " << n;
    }
    text << "]";
    return text.str();
}

/// The rows the outputs need when context_lens is on the host and valid, for a message.
std::optional<__int128> RowsOnHost(const at::Tensor& context_lens, bool cumsum)
{
    if (!context_lens.is_cpu()) {
        return std::nullopt;
    }
    const IndexReader lens(context_lens);
    __int128 sum = 0;
    for (int64_t i = 0; i < lens.Rows(); ++i) {
        if (lens(i) < 0) {
            return std::nullopt;
        }
        sum += lens(i);
    }
    if (cumsum) {
        return lens.Rows() ? std::optional<__int128>(lens(lens.Rows() - 1)) : std::nullopt;
    }
    return sum;
}

void RequireOutput(std::string_view name, const at::Tensor& out, const at::Tensor& cache,
                   const std::vector<c10::SymInt>& row, const at::Tensor& context_lens, bool cumsum, Check check,
                   bool dequantized, std::optional<at::ScalarType> out_dtype)
{
    RequireData(name, out, AllowsMeta(check, cache));
    if (dequantized) {
        RequireQuantFloat(name, out, "a dequantized output");
        TORCH_CHECK_TYPE(!out_dtype || *out_dtype == out.scalar_type(), "out_dtype = ", TorchDtype(*out_dtype),
                         " must equal ", name, ".dtype = ", TorchDtype(out.scalar_type()), " (or be None)");
    } else {
        RequireSameDtype(name, out, std::string(name) + "_cache", cache);
    }
    bool same = out.dim() == static_cast<int64_t>(row.size()) + 1;
    for (size_t d = 0; same && d < row.size(); ++d) {
        same = out.sym_sizes()[d + 1] == row[d];
    }
    if (!same) {
        const auto rows = check == Check::kShapes ? std::nullopt : RowsOnHost(context_lens, cumsum);
        TORCH_CHECK_VALUE(false, name, " must have shape ", OutputShape(row, rows), ", got ", ShapeOf(out));
    }
    RequireWritable(name, out);
}

}  // namespace

at::ScalarType PagedLoadCall::OutputDtype(bool key_side) const
{
    const QuantSide& side = key_side ? quant.key : quant.value;
    return side.Quantized() ? side.target : (key_side ? key_cache : value_cache).scalar_type();
}

std::vector<Rows> PagedLoadCall::DataRows() const
{
    const std::string what = geometry.RowDimsText();
    std::vector<Rows> rows = {{"key_cache", key_cache, geometry.RowDim(), what},
                              {"value_cache", value_cache, geometry.RowDim(), what}};
    if (key.defined()) {
        rows.push_back({"key", key, 1, "rows"});
        rows.push_back({"value", value, 1, "rows"});
    }
    return rows;
}

PagedLoadCall CheckPagedLoad(const at::Tensor& key_cache, const at::Tensor& value_cache, const at::Tensor& block_table,
                             const at::Tensor& context_lens, int64_t kv_cache_cfg, bool cumsum,
                             const at::Tensor& seq_starts, bool zero_fill, const at::Tensor& key,
                             const at::Tensor& value, Check check, const QuantArgs& k_quant,
                             const QuantArgs& v_quant, std::optional<at::ScalarType> out_dtype)
{
    const bool shapes = check == Check::kShapes;
    const bool meta = AllowsMeta(check, key_cache);
    const Layout layout = LoadLayout(kv_cache_cfg);
    RequireQuantCombination("k_", k_quant, true);
    RequireQuantCombination("v_", v_quant, true);
    const bool dequantizes = k_quant.Any() || v_quant.Any();
    TORCH_CHECK_VALUE(!out_dtype || dequantizes, "out_dtype = ", TorchDtype(*out_dtype), " is for a dequantizing "
                      "load: pass k_scale, k_scale_cache, v_scale or v_scale_cache too, or no out_dtype");
    if (out_dtype) {
        TORCH_CHECK_TYPE(IsQuantFloat(*out_dtype), "out_dtype must be torch.float16, torch.bfloat16 or "
                         "torch.float32, got ", TorchDtype(*out_dtype));
    }
    TORCH_CHECK_VALUE(!dequantizes || out_dtype || key.defined(), "out_dtype is None, but a dequantizing load that "
                      "allocates its outputs needs it: pass out_dtype=torch.float16, torch.bfloat16 or torch.float32");
    RequireData("key_cache", key_cache, meta);
    RequireData("value_cache", value_cache, meta);
    RequireCacheDtype("key_cache", key_cache);
    RequireCacheDtype("value_cache", value_cache);
    if (out_dtype && !key.defined()) {  // the dtype of both new outputs: a side read as it is must already have it
        for (const auto& [prefix, cache_name, cache, args] :
             {std::tuple{"k_", "key_cache", &key_cache, &k_quant}, std::tuple{"v_", "value_cache", &value_cache, &v_quant}}) {
            TORCH_CHECK_VALUE(args->Any() || cache->scalar_type() == *out_dtype, "out_dtype = ", TorchDtype(*out_dtype),
                              " is the dtype of both outputs, but ", cache_name, " has dtype ",
                              DtypeName(cache->scalar_type()), " and is read as it is (no ", prefix, "scale or ",
                              prefix, "scale_cache): give its scale, or pass key= and value= instead of out_dtype");
        }
    }
    TORCH_CHECK_VALUE(layout == Layout::kNd || !cumsum,
                      "cumsum=True is not supported with kv_cache_cfg = NZ (ATB rejects it): use ND");
    TORCH_CHECK_VALUE(layout == Layout::kNd || !seq_starts.defined(),
                      "seq_starts is not supported with kv_cache_cfg = NZ (ATB rejects it): use ND");
    PagedLoadCall call;
    call.geometry = ReadGeometry(layout, key_cache, value_cache);
    RequireIndexTensor("block_table", block_table, 2, meta);
    RequireIndexTensor("context_lens", context_lens, 1, meta);
    const c10::SymInt batch = block_table.sym_sizes()[0];
    if (cumsum) {
        RequireEntries("context_lens", context_lens, batch + 1, "batch + 1 in cumsum mode, batch = block_table.shape[0]");
    } else {
        RequireEntries("context_lens", context_lens, batch, "batch = block_table.shape[0]");
    }
    if (seq_starts.defined()) {
        RequireIndexTensor("seq_starts", seq_starts, 1, meta);
        RequireEntries("seq_starts", seq_starts, batch, "batch = block_table.shape[0]");
    }
    const at::Device device = RequireSameDevice(
        {{"key_cache", key_cache}, {"value_cache", value_cache}, {"key", key}, {"value", value}});
    RequireIndexDevices(device, {{"block_table", block_table}, {"context_lens", context_lens},
                                 {"seq_starts", seq_starts}});
    const auto quant_side = [&](const char* prefix, const char* name, const char* cache_name, const at::Tensor& cache,
                                const std::vector<c10::SymInt>& row, const at::Tensor& out, const QuantArgs& args) {
        const bool nd = layout == Layout::kNd;
        const at::ScalarType target = out.defined() ? out.scalar_type() : out_dtype.value_or(at::kFloat);
        const QuantSideContext context{prefix, name, cache_name, cache, nd, nd ? row[0] : c10::SymInt(0),
                                       nd ? row[1] : row[0], call.geometry.num_blocks, call.geometry.block_size,
                                       target, true};
        return CheckQuantSide(context, args, check);
    };
    if (key.defined()) {
        RequireOutput("key", key, key_cache, call.geometry.key_row, context_lens, cumsum, check, k_quant.Any(),
                      out_dtype);
    }
    if (value.defined()) {
        RequireOutput("value", value, value_cache, call.geometry.value_row, context_lens, cumsum, check, v_quant.Any(),
                      out_dtype);
    }
    call.quant.key = quant_side("k_", "key", "key_cache", key_cache, call.geometry.key_row, key, k_quant);
    call.quant.value = quant_side("v_", "value", "value_cache", value_cache, call.geometry.value_row, value, v_quant);
    if (!shapes) {
        for (const Named& out : {Named{"key", key}, Named{"value", value}}) {
            if (out.tensor.defined()) {
                RequireApart(out.name, out.tensor,
                             {{"key_cache", key_cache}, {"value_cache", value_cache}, {"k_scale", k_quant.scale},
                              {"k_offset", k_quant.offset}, {"k_scale_cache", k_quant.scale_cache},
                              {"v_scale", v_quant.scale}, {"v_offset", v_quant.offset},
                              {"v_scale_cache", v_quant.scale_cache}});
            }
        }
        RequireSeparateOutputs("key", key, "value", value);
    }
    call.key_cache = key_cache;
    call.value_cache = value_cache;
    call.block_table = block_table;
    call.context_lens = context_lens;
    call.seq_starts = seq_starts;
    call.cumsum = cumsum;
    call.zero_fill = zero_fill;
    call.key = key;
    call.value = value;
    return call;
}

PagedLoadPlan PlanPagedLoad(const PagedLoadCall& call)
{
    // With zero_fill the block table is not checked, so a device one is not read back.
    const IndexTensors host =
        OnHost({call.context_lens, call.seq_starts, call.zero_fill ? at::Tensor() : call.block_table});
    const IndexReader given(host[0]);
    const int64_t block_size = call.geometry.block_size.expect_int();
    const int64_t num_blocks = call.geometry.num_blocks.expect_int();
    const int64_t batch = call.cumsum ? given.Rows() - 1 : given.Rows();
    PagedLoadPlan plan;
    plan.lens.resize(batch);
    plan.out_start.resize(batch);
    plan.first_column.resize(batch);
    for (int64_t i = 0; i < given.Rows(); ++i) {
        TORCH_CHECK_VALUE(given(i) >= 0, "context_lens[", i, "] = ", given(i), " is negative");
    }
    __int128 end_row = 0;
    int64_t past_limit = -1;  // the entry of context_lens that takes the rows past the int32 limit
    if (call.cumsum) {
        for (int64_t b = 0; b < batch; ++b) {
            const int64_t start = given(b), end = given(b + 1);
            TORCH_CHECK_VALUE(end >= start, "context_lens[", b + 1, "] = ", end, " is smaller than context_lens[", b,
                              "] = ", start, ": cumulative lengths must be non-decreasing");
            plan.lens[b] = end - start;
            plan.out_start[b] = start;
        }
        end_row = given(given.Rows() - 1);  // context_lens[-1] rows, even with batch 0
        past_limit = given.Rows() - 1;
    } else {
        for (int64_t b = 0; b < batch; ++b) {
            plan.lens[b] = given(b);
            plan.out_start[b] = end_row <= INT64_MAX ? static_cast<int64_t>(end_row) : INT64_MAX;  // the row limit raises then
            end_row += plan.lens[b];
            if (past_limit < 0 && end_row > kInt32Max) {
                past_limit = b;
            }
        }
    }
    for (int64_t b = 0; b < batch; ++b) {
        const int64_t start = host[1].defined() ? IndexReader(host[1])(b) : 0;
        TORCH_CHECK_VALUE(start >= 0, "seq_starts[", b, "] = ", start, " is negative");
        plan.first_column[b] = start / block_size;
    }
    TORCH_CHECK_VALUE(end_row <= kInt32Max, "context_lens[", past_limit, "] = ", given(past_limit),
                      " takes the output past the kernels' int32 limit of ", kInt32Max, " rows: it would have ",
                      WideText(end_row), call.cumsum ? " (the last cumulative length)" : " (the sum of context_lens)");
    plan.end_row = static_cast<int64_t>(end_row);
    if (!call.zero_fill) {  // with zero_fill, entries a token needs may be missing or out of range
        const IndexReader table(host[2]);
        for (int64_t b = 0; b < batch; ++b) {
            const __int128 last = static_cast<__int128>(plan.first_column[b]) + (plan.lens[b] + block_size - 1) / block_size;
            TORCH_CHECK_VALUE(last <= table.Columns(), "block_table has ", table.Columns(), " columns, but batch entry ", b,
                              " needs columns ", plan.first_column[b], "..", WideText(last - 1), " (", plan.lens[b],
                              " tokens from column ", plan.first_column[b], ", block_size ", block_size, ")");
        }
        for (int64_t b = 0; b < batch; ++b) {
            const int64_t end = plan.first_column[b] + (plan.lens[b] + block_size - 1) / block_size;
            for (int64_t c = plan.first_column[b]; c < end; ++c) {
                const int64_t block = table.At(b, c);
                TORCH_CHECK_VALUE(block >= 0 && block < num_blocks, "block_table[", b, ", ", c, "] = ", block,
                                  " is outside [0, ", num_blocks, ") (num_blocks = key_cache.shape[0])");
            }
        }
    }
    for (const Named& out : {Named{"key", call.key}, Named{"value", call.value}}) {
        if (out.tensor.defined() && out.tensor.size(0) < plan.end_row) {
            const auto& row = out.name == "key" ? call.geometry.key_row : call.geometry.value_row;
            TORCH_CHECK_VALUE(false, out.name, " must have shape ", OutputShape(row, plan.end_row), ", got ",
                              ShapeOf(out.tensor));
        }
    }
    return plan;
}

std::string QuantLoadOutsideReason(const PagedLoadCall& call)
{
    for (const bool key : {true, false}) {
        const QuantSide& side = key ? call.quant.key : call.quant.value;
        const at::Tensor& cache = key ? call.key_cache : call.value_cache;
        std::string reason = QuantKernelSideReason(side, cache.scalar_type());
        if (reason.empty() && side.Quantized() && (side.heads * side.head_size).expect_int() % 32 != 0) {
            reason = std::string(key ? "key" : "value") + " rows of codes that are not whole 32-byte blocks";
        }
        if (!reason.empty()) {
            return reason;
        }
    }
    return "";
}

}  // namespace ascend_kv
