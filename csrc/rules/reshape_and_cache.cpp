#include "csrc/rules/reshape_and_cache.h"

#include "csrc/rules/index_values.h"
#include "csrc/rules/memory.h"
#include "csrc/rules/tensors.h"

namespace ascend_kv {

std::vector<Rows> ReshapeAndCacheCall::DataRows() const
{
    const std::string what = geometry.RowDimsText();
    std::vector<Rows> rows = {{"key", key, 1, "token rows (dims 1, 2)"}, {"key_cache", key_cache, geometry.RowDim(), what}};
    if (!KeyOnly()) {
        rows.push_back({"value", value, 1, "token rows (dims 1, 2)"});
        rows.push_back({"value_cache", value_cache, geometry.RowDim(), what});
    }
    return rows;
}

ReshapeAndCacheCall CheckReshapeAndCache(const at::Tensor& key, const at::Tensor& value, const at::Tensor& key_cache,
                                         const at::Tensor& value_cache, const at::Tensor& slot_mapping,
                                         const std::string& kv_cache_cfg, Check check, const QuantArgs& k_quant,
                                         const QuantArgs& v_quant)
{
    const bool shapes = check == Check::kShapes;
    const bool meta = AllowsMeta(check, key_cache);
    const Layout layout = WriteLayout(kv_cache_cfg);
    RequireData("key", key, meta);
    RequireData("key_cache", key_cache, meta);
    if (value.defined() != value_cache.defined()) {
        const char* given = value_cache.defined() ? "value_cache" : "value";
        const char* missing = value_cache.defined() ? "value" : "value_cache";
        TORCH_CHECK_VALUE(false, missing, " is None but ", given,
                          " is given: pass both, or neither for the key-only mode");
    }
    const bool pair = value.defined();
    RequireQuantCombination("k_", k_quant, true);
    RequireQuantCombination("v_", v_quant, pair);
    TORCH_CHECK_VALUE(pair || layout == Layout::kNd,
                      "the key-only mode (value and value_cache None) is ND only, got kv_cache_cfg = NZ");
    if (pair) {
        RequireData("value", value, meta);
        RequireData("value_cache", value_cache, meta);
    }
    struct Side {
        const char *name, *cache_name, *shape;
        const at::Tensor &tokens, &cache;
        const QuantArgs& quant;
    };
    const Side sides[] = {{"key", "key_cache", "a 3-D tensor [num_tokens, num_heads, head_size_k]", key, key_cache,
                           k_quant},
                          {"value", "value_cache", "a 3-D tensor [num_tokens, num_heads, head_size_v]", value,
                           value_cache, v_quant}};
    for (const Side& side : c10::ArrayRef<Side>(sides, pair ? 2 : 1)) {
        RequireCacheDtype(side.cache_name, side.cache);
        if (side.quant.Any()) {  // codes from float tokens
            RequireCodeCache(side.cache_name, side.cache, "quantize");
            RequireQuantFloat(side.name, side.tokens, "a quantizing write's input");
        } else {
            RequireSameDtype(side.name, side.tokens, side.cache_name, side.cache);
        }
        RequireNdim(side.name, side.tokens, {3}, side.shape);
        RequireCacheNdim(side.cache_name, side.cache, layout);
    }
    if (pair) {
        const char* what[] = {"num_tokens", "num_heads"};
        for (int64_t i = 0; i < 2; ++i) {
            TORCH_CHECK_VALUE(value.sym_sizes()[i] == key.sym_sizes()[i], "value.shape[", i, "] (", what[i], ") = ",
                              value.sym_sizes()[i], " must equal key.shape[", i, "] = ", key.sym_sizes()[i]);
        }
    }
    ReshapeAndCacheCall call;
    call.geometry = WriteGeometry(layout, key, key_cache, value, value_cache);
    RequireSlotIndex("slot_mapping", slot_mapping, meta);
    TORCH_CHECK_VALUE(slot_mapping.sym_sizes()[0] <= key.sym_sizes()[0], "slot_mapping has ", slot_mapping.sym_sizes()[0],
                      " entries, more than num_tokens = ", key.sym_sizes()[0],
                      " (key.shape[0]): at most one slot per token");
    const at::Device device = RequireSameDevice(
        {{"key", key}, {"key_cache", key_cache}, {"value", value}, {"value_cache", value_cache}});
    RequireIndexDevices(device, {{"slot_mapping", slot_mapping}});
    RequireWritable("key_cache", key_cache);
    if (pair) {
        RequireWritable("value_cache", value_cache);
    }
    const auto quant_side = [&](const char* prefix, const char* name, const char* cache_name, const at::Tensor& tokens,
                                const at::Tensor& cache, const QuantArgs& args) {
        const QuantSideContext context{prefix, name, cache_name, cache, true, tokens.sym_sizes()[1],
                                       tokens.sym_sizes()[2], call.geometry.num_blocks, call.geometry.block_size,
                                       tokens.scalar_type(), false};
        return CheckQuantSide(context, args, check);
    };
    call.quant.key = quant_side("k_", "key", "key_cache", key, key_cache, k_quant);
    if (pair) {
        call.quant.value = quant_side("v_", "value", "value_cache", value, value_cache, v_quant);
    }
    if (!shapes) {
        const Named read[] = {{"key", key}, {"value", value}, {"k_scale", k_quant.scale},
                              {"k_inv_scale", k_quant.inv_scale}, {"k_offset", k_quant.offset},
                              {"v_scale", v_quant.scale}, {"v_inv_scale", v_quant.inv_scale},
                              {"v_offset", v_quant.offset}};
        RequireApart("key_cache", key_cache, read);
        if (pair) {
            RequireApart("value_cache", value_cache, read);
            RequireSeparateOutputs("key_cache", key_cache, "value_cache", value_cache);
        }
        const Named others[] = {{"key", key}, {"value", value}, {"key_cache", key_cache}, {"value_cache", value_cache},
                                {"slot_mapping", slot_mapping}, {"k_scale", k_quant.scale},
                                {"k_inv_scale", k_quant.inv_scale}, {"k_offset", k_quant.offset},
                                {"v_scale", v_quant.scale}, {"v_inv_scale", v_quant.inv_scale},
                                {"v_offset", v_quant.offset}};
        RequireQuantApart(call.quant, others);
    }
    call.key = key;
    call.value = value;
    call.key_cache = key_cache;
    call.value_cache = value_cache;
    call.slot_mapping = slot_mapping;
    return call;
}

SlotGrid ReshapeAndCacheCall::Grid() const
{
    return {geometry.num_blocks.expect_int(), geometry.block_size.expect_int(), "(num_blocks, block_size)", ""};
}

at::Tensor CheckSlots(const ReshapeAndCacheCall& call)
{
    const at::Tensor host = OnHost({call.slot_mapping})[0];
    if (HoldsSlotPairs(host)) {
        return HostSlots("slot_mapping", host, call.Grid());
    }
    const IndexReader slots(host);
    const int64_t num_blocks = call.geometry.num_blocks.expect_int(), block_size = call.geometry.block_size.expect_int();
    const int64_t capacity = num_blocks * block_size;
    for (int64_t i = 0; i < slots.Rows(); ++i) {
        TORCH_CHECK_VALUE(slots(i) < capacity, "slot_mapping[", i, "] = ", slots(i),
                          " is out of range: the caches hold ", capacity, " slots (num_blocks ", num_blocks,
                          " x block_size ", block_size, ")");
    }
    return host;
}

}  // namespace ascend_kv
