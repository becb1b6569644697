// The operators torch.ops.ascend_kv.*: every schema, and which implementation each dispatch key
// runs (ops/ops.h). One registration for all of them:
//   CompositeExplicitAutograd  the implementation, on every device (it branches on host, NPU and
//                              other devices itself);
//   Meta                       the structure rules on shapes;
//   Autograd                   falls through: the operators are not differentiable (written tensors
//                              that require grad are refused by the rules);
//   Negative                   a lazily negated view (is_neg()) is refused, naming the argument,
//                              where PyTorch would otherwise materialise a written input.
// Each writing operator has a functional twin, functional_<name>, that returns written copies of
// the tensors it writes: the compile rule (ascend_kv/operators/functionalization.py) uses it.
// The underscored operators connect this library with the Python policy (dispatch/policy.h).
#include <string>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include "csrc/dispatch/kernels.h"
#include "csrc/dispatch/policy.h"
#include "csrc/ops/ops.h"
#include "csrc/ops/route.h"
#include "csrc/rules/dtypes.h"
#include "csrc/rules/text.h"

namespace ascend_kv {
namespace {

constexpr const char* kKvArgs = "Tensor(a!) past, Tensor token_offset, Tensor seq_len";
constexpr const char* kLoadInputs = "Tensor key_cache, Tensor value_cache, Tensor block_table, Tensor context_lens";
// The options are positional with defaults (the dispatcher converts keyword arguments at a cost
// per call; docs/benchmarks.md); callers may still name them.
constexpr const char* kLoadOptions = "int kv_cache_cfg=0, bool cumsum=False, Tensor? seq_starts=None, bool zero_fill=False";
// The dequantizing overloads' arguments (docs/semantics.md §13; no argument named `mode`: auto-functionalization
// of torch 2.13 fails on it).
constexpr const char* kDequantArgs = "Tensor? k_scale=None, Tensor? k_offset=None, Tensor? k_scale_cache=None, "
                                     "Tensor? v_scale=None, Tensor? v_offset=None, Tensor? v_scale_cache=None, "
                                     "ScalarType? out_dtype=None";

constexpr const char* kVllmWrite = "Tensor(a!) key_cache, Tensor(b!) value_cache, Tensor slot_mapping, "
                                   "str kv_cache_dtype, Tensor k_scale, Tensor v_scale";

/// The writing operators: (name, overload, schema without the name).
struct Schema {
    const char* name;
    std::string arguments;
    const char* returns;
};

std::vector<Schema> Writers()
{
    return {
        {"kv_cache", std::string("Tensor new_kv, int layer_id, ") + kKvArgs, "()"},
        {"kv_cache.layer_tensor", std::string("Tensor new_kv, Tensor layer_id, ") + kKvArgs, "()"},
        {"paged_cache_load.into", std::string(kLoadInputs) + ", Tensor(a!) key, Tensor(b!) value, " + kLoadOptions, "()"},
        {"paged_cache_load.dequant_into",
         std::string(kLoadInputs) + ", Tensor(a!) key, Tensor(b!) value, " + kLoadOptions + ", " + kDequantArgs, "()"},
        {"reshape_and_cache",
         "Tensor key, Tensor? value, Tensor(a!) key_cache, Tensor(b!)? value_cache, Tensor slot_mapping, "
         "str kv_cache_cfg='nd'",
         "()"},
        {"reshape_and_cache.quant",
         "Tensor key, Tensor? value, Tensor(a!) key_cache, Tensor(b!)? value_cache, Tensor slot_mapping, "
         "str kv_cache_cfg, Tensor? k_scale, Tensor? k_inv_scale, Tensor? k_offset, Tensor(c!)? k_scale_cache, "
         "Tensor? v_scale, Tensor? v_inv_scale, Tensor? v_offset, Tensor(d!)? v_scale_cache",
         "()"},
        {"block_copy",
         "Tensor(a!) key_cache, Tensor(b!)? value_cache, Tensor src_block_indices, Tensor dst_block_indices, "
         "Tensor cum_sum, bool simultaneous=False",
         "()"},
        {"copy_blocks",
         "Tensor(a!)[] key_caches, Tensor(b!)[] value_caches, Tensor block_mapping, bool simultaneous=False", "()"},
        {"swap_blocks", "Tensor src, Tensor(a!) dst, Tensor block_mapping", "()"},
        {"gather_blocks",
         "Tensor[] key_caches, Tensor[] value_caches, Tensor block_ids, Tensor(a!) out, str cache_layout='nd', "
         "str out_layout='nd', int head_splits=1",
         "()"},
        {"scatter_blocks",
         "Tensor src, Tensor(a!)[] key_caches, Tensor(b!)[] value_caches, Tensor block_ids, str src_layout='nd', "
         "str cache_layout='nd', int head_splits=1",
         "()"},
        {"swap_blocks.bytes", "Tensor src, Tensor(a!) dst, int block_size_in_bytes, Tensor block_mapping", "()"},
        // Hybrid models' state caches (docs/semantics.md §14).
        {"copy_state_slots", "Tensor(a!)[] states, Tensor src_indices, Tensor dst_indices, bool simultaneous=False",
         "()"},
        {"gather_state_slots", "Tensor[] states, Tensor slot_ids, Tensor(a!) out", "()"},
        {"scatter_state_slots", "Tensor src, Tensor(a!)[] states, Tensor slot_ids", "()"},
        // Sparse-attention caches (docs/semantics.md §15).
        {"scatter_nd_update", "Tensor(a!) var, Tensor indices, Tensor updates", "()"},
        // vLLM's cache ops under its schemas (docs/semantics.md §16).
        {"vllm_reshape_and_cache_flash", std::string("Tensor key, Tensor value, ") + kVllmWrite, "()"},
        {"vllm_reshape_and_cache", std::string("Tensor key, Tensor value, ") + kVllmWrite, "()"},
        {"vllm_concat_and_cache_mla",
         "Tensor kv_c, Tensor k_pe, Tensor(a!) kv_cache, Tensor slot_mapping, str kv_cache_dtype, Tensor scale, "
         "bool skip_scale=False",
         "()"},
        {"vllm_indexer_k_quant_and_cache",
         "Tensor k, Tensor(a!) kv_cache, Tensor slot_mapping, int quant_block_size, str kv_cache_dtype", "()"},
        {"vllm_cp_gather_indexer_k_quant_cache",
         "Tensor kv_cache, Tensor(a!) dst_k, Tensor(b!) dst_scale, Tensor block_table, Tensor cu_seq_lens", "()"},
        {"concat_mla_q", "Tensor ql_nope, Tensor q_pe, Tensor(a!) q_out", "()"},
        {"convert_fp8", "Tensor(a!) dst_cache, Tensor src_cache, float scale, str kv_cache_dtype", "()"},
        {"gather_cache",
         "Tensor src_cache, Tensor(a!) dst, Tensor block_table, Tensor cu_seq_lens, Tensor? seq_starts=None, "
         "str kv_cache_dtype='auto', Tensor? scale=None",
         "()"},
    };
}

/// "a, b=1" with every "(x!)" annotation removed: the twin's arguments.
std::string Unannotated(std::string arguments)
{
    for (const char* annotation : {"(a!)", "(b!)", "(c!)", "(d!)"}) {
        for (size_t at = arguments.find(annotation); at != std::string::npos; at = arguments.find(annotation)) {
            arguments.erase(at, 4);
        }
    }
    return arguments;
}

std::string TwinName(const std::string& name)
{
    return "functional_" + name;
}

/// A writing operator's functional twin: runs it on fresh copies of the tensors it writes and
/// returns them, in schema order (lists flattened).
void RunTwin(const c10::OperatorHandle& twin, torch::jit::Stack* stack)
{
    const std::string twin_name = twin.schema().name().substr(std::string("ascend_kv::").size());
    const std::string name = twin_name.substr(std::string("functional_").size());
    const std::string& overload = twin.schema().overload_name();
    const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(("ascend_kv::" + name).c_str(),
                                                                                  overload.c_str());
    const auto& arguments = op.schema().arguments();
    const size_t count = arguments.size();
    std::vector<c10::IValue> values(stack->end() - count, stack->end());
    torch::jit::drop(*stack, count);
    std::vector<at::Tensor> written;
    for (size_t i = 0; i < count; ++i) {
        const auto& alias = arguments[i].alias_info();
        if (!alias || !alias->isWrite()) {
            continue;
        }
        if (values[i].isTensorList()) {
            std::vector<at::Tensor> copies;
            for (const at::Tensor& t : values[i].toTensorVector()) {
                copies.push_back(t.clone());
                written.push_back(copies.back());
            }
            values[i] = copies;
        } else if (values[i].isTensor()) {
            values[i] = values[i].toTensor().clone();
            written.push_back(values[i].toTensor());
        }
    }
    torch::jit::Stack call(values.begin(), values.end());
    op.callBoxed(&call);
    torch::jit::push(*stack, c10::IValue(written));
}

/// The Negative key's kernel: a TypeError naming the lazily negated view among the arguments.
void RejectNegatedViews(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack)
{
    const auto& arguments = op.schema().arguments();
    const size_t count = arguments.size();
    for (size_t i = 0; i < count; ++i) {
        const c10::IValue& value = (*stack)[stack->size() - count + i];
        const std::string& name = arguments[i].name();
        if (value.isTensor() && value.toTensor().defined() && value.toTensor().is_neg()) {
            TORCH_CHECK_TYPE(false, name, " is a lazily negated view (is_neg()), whose memory holds other values: pass ",
                             name, ".resolve_neg()");
        }
        if (value.isTensorList()) {
            const auto tensors = value.toTensorVector();
            for (size_t k = 0; k < tensors.size(); ++k) {
                const std::string item = name + "[" + std::to_string(k) + "]";
                TORCH_CHECK_TYPE(!tensors[k].is_neg(), item, " is a lazily negated view (is_neg()), whose memory holds "
                                 "other values: pass ", item, ".resolve_neg()");
            }
        }
    }
    op.redispatchBoxed(keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::Negative), stack);
}

std::vector<std::string> CacheDtypeNames()
{
    std::vector<std::string> names;
    for (const at::ScalarType dtype : CacheDtypes()) {
        names.push_back(DtypeName(dtype));
    }
    return names;
}

std::vector<std::string> AtbCacheDtypeNames()
{
    std::vector<std::string> names;
    for (const at::ScalarType dtype : AtbCacheDtypes()) {
        names.push_back(DtypeName(dtype));
    }
    return names;
}

}  // namespace
}  // namespace ascend_kv

TORCH_LIBRARY(ascend_kv, m)
{
    using namespace ascend_kv;
    for (const Schema& s : Writers()) {
        m.def((std::string(s.name) + "(" + s.arguments + ") -> " + s.returns).c_str());
        std::string name = s.name, overload;
        if (const size_t dot = name.find('.'); dot != std::string::npos) {
            overload = name.substr(dot);
            name = name.substr(0, dot);
        }
        m.def((TwinName(name) + overload + "(" + Unannotated(s.arguments) + ") -> Tensor[]").c_str());
    }
    // Writes through the pointers it is given: no tensor argument is written.
    m.def("swap_blocks_batch(Tensor src_ptrs, Tensor dst_ptrs, Tensor sizes, bool is_src_access_order_any=False, "
          "int direction=-1) -> ()");
    m.def("batch_memcpy(Tensor src_ptrs, Tensor dst_ptrs, Tensor sizes) -> ()");
    // Reads host tables, writes nothing: the lists' lengths depend on the values (a Python fake).
    m.def("block_ranges(Tensor src_bases, Tensor src_strides, Tensor src_lengths, Tensor src_block_ids, int src_blocks, "
          "Tensor dst_bases, Tensor dst_strides, Tensor dst_lengths, Tensor dst_block_ids, int dst_blocks) "
          "-> (Tensor, Tensor, Tensor)");
    m.def((std::string("paged_cache_load(") + kLoadInputs + ", " + kLoadOptions + ") -> (Tensor, Tensor)").c_str());
    m.def((std::string("paged_cache_load.dequant(") + kLoadInputs + ", " + kLoadOptions + ", " + kDequantArgs +
           ") -> (Tensor, Tensor)").c_str());
    m.def((std::string("_paged_cache_load_outputs(") + kLoadInputs +
           ", int kv_cache_cfg, bool cumsum, Tensor? seq_starts, bool zero_fill, SymInt rows) -> (Tensor, Tensor)")
              .c_str());
    m.def((std::string("_paged_cache_load_outputs.dequant(") + kLoadInputs +
           ", int kv_cache_cfg, bool cumsum, Tensor? seq_starts, bool zero_fill, Tensor? k_scale, Tensor? k_offset, "
           "Tensor? k_scale_cache, Tensor? v_scale, Tensor? v_offset, Tensor? v_scale_cache, ScalarType? out_dtype, "
           "SymInt rows) -> (Tensor, Tensor)").c_str());
    // Asked of Python (implemented in ascend_kv/dispatch/bridge.py).
    m.def("_environment() -> str[]");
    m.def("_decide(str op, Device device, str requested, str outside) -> str");
    m.def("_storage_format(Tensor tensor) -> int");
    m.def("_on_trace() -> ()");
    // Told by Python.
    m.def("_set_override(str setting, str? value) -> ()", &SetOverride);
    m.def("_forget() -> ()", &Forget);
    m.def("_use_kernel_library(int address, str role) -> ()", &UseKernelLibrary);
    m.def("_use_storage_format(int address) -> ()", &UseStorageFormat);
    m.def("_cache_dtypes() -> str[]", &CacheDtypeNames);
    m.def("_runs() -> int[]", &Runs);
    m.def("_atb_cache_dtypes() -> str[]", &AtbCacheDtypeNames);
}

TORCH_LIBRARY_IMPL(ascend_kv, CompositeExplicitAutograd, m)
{
    using namespace ascend_kv;
    m.impl("kv_cache", &KvCache);
    m.impl("kv_cache.layer_tensor", &KvCacheLayerTensor);
    m.impl("paged_cache_load", &PagedCacheLoad);
    m.impl("paged_cache_load.into", &PagedCacheLoadInto);
    m.impl("_paged_cache_load_outputs", &PagedCacheLoadOutputs);
    m.impl("paged_cache_load.dequant", &PagedCacheLoadDequant);
    m.impl("paged_cache_load.dequant_into", &PagedCacheLoadDequantInto);
    m.impl("_paged_cache_load_outputs.dequant", &PagedCacheLoadDequantOutputs);
    m.impl("reshape_and_cache", &ReshapeAndCache);
    m.impl("reshape_and_cache.quant", &ReshapeAndCacheQuant);
    m.impl("block_copy", &BlockCopy);
    m.impl("copy_blocks", &CopyBlocks);
    m.impl("swap_blocks", &SwapBlocks);
    m.impl("gather_blocks", &GatherBlocks);
    m.impl("scatter_blocks", &ScatterBlocks);
    m.impl("swap_blocks.bytes", &SwapBlockBytes);
    m.impl("swap_blocks_batch", &SwapBlocksBatch);
    m.impl("copy_state_slots", &CopyStateSlots);
    m.impl("gather_state_slots", &GatherStateSlots);
    m.impl("scatter_state_slots", &ScatterStateSlots);
    m.impl("scatter_nd_update", &ScatterNdUpdate);
    m.impl("batch_memcpy", &BatchMemcpy);
    m.impl("vllm_reshape_and_cache_flash", &VllmReshapeAndCacheFlash);
    m.impl("vllm_reshape_and_cache", &VllmReshapeAndCache);
    m.impl("vllm_concat_and_cache_mla", &VllmConcatAndCacheMla);
    m.impl("concat_mla_q", &ConcatMlaQ);
    m.impl("vllm_indexer_k_quant_and_cache", &VllmIndexerKQuantAndCache);
    m.impl("vllm_cp_gather_indexer_k_quant_cache", &VllmCpGatherIndexerKQuantCache);
    m.impl("convert_fp8", &ConvertFp8Op);
    m.impl("gather_cache", &GatherCache);
    m.impl("block_ranges", &BlockRanges);
    for (const Schema& s : Writers()) {
        std::string name = s.name, overload;
        if (const size_t dot = name.find('.'); dot != std::string::npos) {
            overload = name.substr(dot);
            name = name.substr(0, dot);
        }
        m.impl((TwinName(name) + overload).c_str(), torch::CppFunction::makeFromBoxedFunction<&RunTwin>());
    }
}

TORCH_LIBRARY_IMPL(ascend_kv, Meta, m)
{
    using namespace ascend_kv;
    m.impl("kv_cache", &KvCacheMeta);
    m.impl("kv_cache.layer_tensor", &KvCacheLayerTensorMeta);
    m.impl("paged_cache_load.into", &PagedCacheLoadIntoMeta);
    m.impl("_paged_cache_load_outputs", &PagedCacheLoadOutputs);
    m.impl("paged_cache_load.dequant_into", &PagedCacheLoadDequantIntoMeta);
    m.impl("_paged_cache_load_outputs.dequant", &PagedCacheLoadDequantOutputs);
    m.impl("reshape_and_cache", &ReshapeAndCacheMeta);
    m.impl("reshape_and_cache.quant", &ReshapeAndCacheQuantMeta);
    m.impl("block_copy", &BlockCopyMeta);
    m.impl("copy_blocks", &CopyBlocksMeta);
    m.impl("swap_blocks", &SwapBlocksMeta);
    m.impl("gather_blocks", &GatherBlocksMeta);
    m.impl("scatter_blocks", &ScatterBlocksMeta);
    m.impl("swap_blocks.bytes", &SwapBlockBytesMeta);
    m.impl("swap_blocks_batch", &SwapBlocksBatchMeta);
    m.impl("copy_state_slots", &CopyStateSlotsMeta);
    m.impl("gather_state_slots", &GatherStateSlotsMeta);
    m.impl("scatter_state_slots", &ScatterStateSlotsMeta);
    m.impl("scatter_nd_update", &ScatterNdUpdateMeta);
    m.impl("batch_memcpy", &BatchMemcpyMeta);
    m.impl("vllm_reshape_and_cache_flash", &VllmReshapeAndCacheFlashMeta);
    m.impl("vllm_reshape_and_cache", &VllmReshapeAndCacheMeta);
    m.impl("vllm_concat_and_cache_mla", &VllmConcatAndCacheMlaMeta);
    m.impl("concat_mla_q", &ConcatMlaQMeta);
    m.impl("vllm_indexer_k_quant_and_cache", &VllmIndexerKQuantAndCacheMeta);
    m.impl("vllm_cp_gather_indexer_k_quant_cache", &VllmCpGatherIndexerKQuantCacheMeta);
    m.impl("convert_fp8", &ConvertFp8Meta);
    m.impl("gather_cache", &GatherCacheMeta);
}

TORCH_LIBRARY_IMPL(ascend_kv, Autograd, m)
{
    using namespace ascend_kv;
    m.impl("paged_cache_load", torch::CppFunction::makeFallthrough());
    m.impl("swap_blocks_batch", torch::CppFunction::makeFallthrough());
    m.impl("batch_memcpy", torch::CppFunction::makeFallthrough());
    m.impl("block_ranges", torch::CppFunction::makeFallthrough());
    m.impl("paged_cache_load.dequant", torch::CppFunction::makeFallthrough());
    for (const Schema& s : Writers()) {
        m.impl(s.name, torch::CppFunction::makeFallthrough());
    }
}

TORCH_LIBRARY_IMPL(ascend_kv, Negative, m)
{
    using namespace ascend_kv;
    m.impl("paged_cache_load", torch::CppFunction::makeFromBoxedFunction<&RejectNegatedViews>());
    m.impl("paged_cache_load.dequant", torch::CppFunction::makeFromBoxedFunction<&RejectNegatedViews>());
    for (const Schema& s : Writers()) {
        m.impl(s.name, torch::CppFunction::makeFromBoxedFunction<&RejectNegatedViews>());
    }
}
