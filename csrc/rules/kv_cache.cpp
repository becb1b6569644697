#include "csrc/rules/kv_cache.h"

#include "csrc/rules/dtypes.h"
#include "csrc/rules/geometry.h"
#include "csrc/rules/index_values.h"
#include "csrc/rules/memory.h"
#include "csrc/rules/tensors.h"

namespace ascend_kv {
namespace {

void RequireLayerInRange(int64_t layer, int64_t layers)
{
    TORCH_CHECK_VALUE(0 <= layer && layer < layers, "layer_id = ", layer, " must be in [0, ", layers,
                      ") (past.shape[0])");
}

}  // namespace

std::vector<Rows> KvCacheCall::DataRows() const
{
    return {{"new_kv", new_kv, 1, "rows"}, {"past", past, 3, "rows (dim 3)"}};
}

KvCacheCall CheckKvCache(const at::Tensor& new_kv, const at::Tensor& layer_tensor, int64_t layer_id,
                         const at::Tensor& past, const at::Tensor& token_offset, const at::Tensor& seq_len, Check check)
{
    const bool shapes = check == Check::kShapes;
    const bool meta = AllowsMeta(check, past);
    RequireData("new_kv", new_kv, meta);
    RequireData("past", past, meta);
    RequireCacheDtype("past", past);
    RequireCacheDtype("new_kv", new_kv);
    RequireSameDtype("new_kv", new_kv, "past", past);
    RequireNdim("past", past, {4}, "a 4-D tensor [layers, batch, max_seq_len, hidden]");
    RequireNdim("new_kv", new_kv, {2, 4},
                "a 2-D tensor [ntokens, hidden] or a 4-D tensor [batch, seq, heads, head_size]");
    RequireWritable("past", past);
    const c10::SymInt hidden = past.sym_sizes()[3];
    RequireRowAlignment("past", hidden, past.scalar_type(), "hidden (past.shape[3])");
    const bool flat = new_kv.dim() == 2;
    const c10::SymInt new_hidden = flat ? new_kv.sym_sizes()[1] : new_kv.sym_sizes()[2] * new_kv.sym_sizes()[3];
    TORCH_CHECK_VALUE(new_hidden == hidden, flat ? "new_kv.shape[1]" : "new_kv.shape[2] * new_kv.shape[3]", " = ",
                      new_hidden, " must equal hidden = ", hidden, " (past.shape[3])");
    if (layer_tensor.defined()) {
        RequireScalarIndexTensor("layer_id", layer_tensor, meta);
    } else {
        RequireLayerInRange(layer_id, past.size(0));
    }
    RequireIndexTensor("token_offset", token_offset, 1, meta);
    RequireIndexTensor("seq_len", seq_len, 1, meta);
    const at::Device device = RequireSameDevice({{"past", past}, {"new_kv", new_kv}});
    RequireIndexDevices(device, {{"token_offset", token_offset}, {"seq_len", seq_len}, {"layer_id", layer_tensor}});
    RequireEntries("token_offset", token_offset, past.sym_sizes()[1], "batch = past.shape[1]");
    RequireEntries("seq_len", seq_len, past.sym_sizes()[1], "batch = past.shape[1]");
    if (!shapes) {
        RequireApart("past", past, {{"new_kv", new_kv}});
    }
    KvCacheCall call;
    call.new_kv = flat ? new_kv : new_kv.reshape_symint({-1, hidden});
    call.past = past;
    call.layer_tensor = layer_tensor;
    call.layer_id = layer_id;
    call.token_offset = token_offset;
    call.seq_len = seq_len;
    return call;
}

KvCachePlan PlanKvCache(const KvCacheCall& call)
{
    const IndexTensors host = OnHost(call.IndexTensors());
    KvCachePlan plan;
    plan.layer = call.layer_id;
    if (host[2].defined()) {
        plan.layer = host[2].reshape(-1).to(at::kLong).const_data_ptr<int64_t>()[0];
        RequireLayerInRange(plan.layer, call.past.size(0));
    }
    const IndexReader offsets(host[0]), lengths(host[1]);
    const int64_t batch = lengths.Rows(), ntokens = call.new_kv.size(0), max_seq_len = call.past.size(2);
    plan.seq_len.resize(batch);
    plan.read_start.resize(batch);
    plan.write_start.resize(batch);
    __int128 total = 0;
    for (int64_t b = 0; b < batch; ++b) {
        plan.seq_len[b] = lengths(b);
        TORCH_CHECK_VALUE(plan.seq_len[b] >= 0, "seq_len[", b, "] = ", plan.seq_len[b], " is negative");
        plan.read_start[b] = static_cast<int64_t>(total);  // past ntokens only when the sum rule below raises
        total += plan.seq_len[b];
    }
    TORCH_CHECK_VALUE(total == ntokens, "sum(seq_len) = ", WideText(total), " must equal ntokens = ", ntokens,
                      " (rows of new_kv)");
    for (int64_t b = 0; b < batch; ++b) {
        const int64_t offset = offsets(b);
        TORCH_CHECK_VALUE(offset >= 0, "token_offset[", b, "] = ", offset, " is negative");
        TORCH_CHECK_VALUE(offset >= plan.seq_len[b], "token_offset[", b, "] = ", offset, " is smaller than seq_len[", b,
                          "] = ", plan.seq_len[b], " (token_offset is the position after the write)");
        plan.write_start[b] = offset - plan.seq_len[b];
    }
    for (int64_t b = 0; b < batch; ++b) {
        TORCH_CHECK_VALUE(offsets(b) <= max_seq_len, "token_offset[", b, "] = ", offsets(b), " exceeds max_seq_len = ",
                          max_seq_len, " (past.shape[2])");
    }
    return plan;
}

}  // namespace ascend_kv
