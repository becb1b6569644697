// The implementations of the operators torch.ops.ascend_kv.* (their schemas: registration.cpp).
// Each checks its call with the rules (csrc/rules/) and hands it to a backend:
//   host tensors   every rule, index values included -> the CPU paths (cpu/), or the kernels'
//                  host build when the sim backend is requested;
//   a device       the rules that need no index value (the value rules too when every index
//                  tensor is on the host, or under full validation) -> host index tensors to the
//                  device in one copy -> the kernels (NPU, where the policy allows) or the device
//                  fallback (device/), neither reading an index value back;
//   Meta           the structure rules on shapes (torch.compile, FakeTensorMode, torch.export).
#pragma once

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>

namespace ascend_kv {

void KvCache(const at::Tensor& new_kv, int64_t layer_id, const at::Tensor& past, const at::Tensor& token_offset,
             const at::Tensor& seq_len);
void KvCacheLayerTensor(const at::Tensor& new_kv, const at::Tensor& layer_id, const at::Tensor& past,
                        const at::Tensor& token_offset, const at::Tensor& seq_len);
void KvCacheMeta(const at::Tensor& new_kv, int64_t layer_id, const at::Tensor& past, const at::Tensor& token_offset,
                 const at::Tensor& seq_len);
void KvCacheLayerTensorMeta(const at::Tensor& new_kv, const at::Tensor& layer_id, const at::Tensor& past,
                            const at::Tensor& token_offset, const at::Tensor& seq_len);

std::tuple<at::Tensor, at::Tensor> PagedCacheLoad(const at::Tensor& key_cache, const at::Tensor& value_cache,
                                                  const at::Tensor& block_table, const at::Tensor& context_lens,
                                                  int64_t kv_cache_cfg, bool cumsum,
                                                  const c10::optional<at::Tensor>& seq_starts, bool zero_fill);
void PagedCacheLoadInto(const at::Tensor& key_cache, const at::Tensor& value_cache, const at::Tensor& block_table,
                        const at::Tensor& context_lens, const at::Tensor& key, const at::Tensor& value,
                        int64_t kv_cache_cfg, bool cumsum, const c10::optional<at::Tensor>& seq_starts, bool zero_fill);
void PagedCacheLoadIntoMeta(const at::Tensor& key_cache, const at::Tensor& value_cache, const at::Tensor& block_table,
                            const at::Tensor& context_lens, const at::Tensor& key, const at::Tensor& value,
                            int64_t kv_cache_cfg, bool cumsum, const c10::optional<at::Tensor>& seq_starts,
                            bool zero_fill);
/// The outputs of a checked allocating call: zero-filled, [rows, *row] each (rows may be symbolic:
/// the allocating form's fake gives the count it cannot know).
std::tuple<at::Tensor, at::Tensor> PagedCacheLoadOutputs(const at::Tensor& key_cache, const at::Tensor& value_cache,
                                                         const at::Tensor& block_table, const at::Tensor& context_lens,
                                                         int64_t kv_cache_cfg, bool cumsum,
                                                         const c10::optional<at::Tensor>& seq_starts, bool zero_fill,
                                                         c10::SymInt rows);

/// The dequantizing overloads (docs/semantics.md §13.2): paged_cache_load.dequant, .dequant_into, and the
/// allocating form's outputs for its fake.
std::tuple<at::Tensor, at::Tensor> PagedCacheLoadDequant(
    const at::Tensor& key_cache, const at::Tensor& value_cache, const at::Tensor& block_table,
    const at::Tensor& context_lens, int64_t kv_cache_cfg, bool cumsum, const c10::optional<at::Tensor>& seq_starts,
    bool zero_fill, const c10::optional<at::Tensor>& k_scale, const c10::optional<at::Tensor>& k_offset,
    const c10::optional<at::Tensor>& k_scale_cache, const c10::optional<at::Tensor>& v_scale,
    const c10::optional<at::Tensor>& v_offset, const c10::optional<at::Tensor>& v_scale_cache,
    std::optional<at::ScalarType> out_dtype);
void PagedCacheLoadDequantInto(const at::Tensor& key_cache, const at::Tensor& value_cache,
                               const at::Tensor& block_table, const at::Tensor& context_lens, const at::Tensor& key,
                               const at::Tensor& value, int64_t kv_cache_cfg, bool cumsum,
                               const c10::optional<at::Tensor>& seq_starts, bool zero_fill,
                               const c10::optional<at::Tensor>& k_scale, const c10::optional<at::Tensor>& k_offset,
                               const c10::optional<at::Tensor>& k_scale_cache, const c10::optional<at::Tensor>& v_scale,
                               const c10::optional<at::Tensor>& v_offset,
                               const c10::optional<at::Tensor>& v_scale_cache, std::optional<at::ScalarType> out_dtype);
void PagedCacheLoadDequantIntoMeta(const at::Tensor& key_cache, const at::Tensor& value_cache,
                                   const at::Tensor& block_table, const at::Tensor& context_lens,
                                   const at::Tensor& key, const at::Tensor& value, int64_t kv_cache_cfg, bool cumsum,
                                   const c10::optional<at::Tensor>& seq_starts, bool zero_fill,
                                   const c10::optional<at::Tensor>& k_scale, const c10::optional<at::Tensor>& k_offset,
                                   const c10::optional<at::Tensor>& k_scale_cache,
                                   const c10::optional<at::Tensor>& v_scale, const c10::optional<at::Tensor>& v_offset,
                                   const c10::optional<at::Tensor>& v_scale_cache,
                                   std::optional<at::ScalarType> out_dtype);
std::tuple<at::Tensor, at::Tensor> PagedCacheLoadDequantOutputs(
    const at::Tensor& key_cache, const at::Tensor& value_cache, const at::Tensor& block_table,
    const at::Tensor& context_lens, int64_t kv_cache_cfg, bool cumsum, const c10::optional<at::Tensor>& seq_starts,
    bool zero_fill, const c10::optional<at::Tensor>& k_scale, const c10::optional<at::Tensor>& k_offset,
    const c10::optional<at::Tensor>& k_scale_cache, const c10::optional<at::Tensor>& v_scale,
    const c10::optional<at::Tensor>& v_offset, const c10::optional<at::Tensor>& v_scale_cache,
    std::optional<at::ScalarType> out_dtype, c10::SymInt rows);

void ReshapeAndCache(const at::Tensor& key, const c10::optional<at::Tensor>& value, const at::Tensor& key_cache,
                     const c10::optional<at::Tensor>& value_cache, const at::Tensor& slot_mapping,
                     c10::string_view kv_cache_cfg);
void ReshapeAndCacheMeta(const at::Tensor& key, const c10::optional<at::Tensor>& value, const at::Tensor& key_cache,
                         const c10::optional<at::Tensor>& value_cache, const at::Tensor& slot_mapping,
                         c10::string_view kv_cache_cfg);

/// The quantizing overload (docs/semantics.md §13.1): reshape_and_cache.quant.
void ReshapeAndCacheQuant(const at::Tensor& key, const c10::optional<at::Tensor>& value, const at::Tensor& key_cache,
                          const c10::optional<at::Tensor>& value_cache, const at::Tensor& slot_mapping,
                          c10::string_view kv_cache_cfg, const c10::optional<at::Tensor>& k_scale,
                          const c10::optional<at::Tensor>& k_inv_scale, const c10::optional<at::Tensor>& k_offset,
                          const c10::optional<at::Tensor>& k_scale_cache, const c10::optional<at::Tensor>& v_scale,
                          const c10::optional<at::Tensor>& v_inv_scale, const c10::optional<at::Tensor>& v_offset,
                          const c10::optional<at::Tensor>& v_scale_cache);
void ReshapeAndCacheQuantMeta(const at::Tensor& key, const c10::optional<at::Tensor>& value,
                              const at::Tensor& key_cache, const c10::optional<at::Tensor>& value_cache,
                              const at::Tensor& slot_mapping, c10::string_view kv_cache_cfg,
                              const c10::optional<at::Tensor>& k_scale, const c10::optional<at::Tensor>& k_inv_scale,
                              const c10::optional<at::Tensor>& k_offset,
                              const c10::optional<at::Tensor>& k_scale_cache, const c10::optional<at::Tensor>& v_scale,
                              const c10::optional<at::Tensor>& v_inv_scale, const c10::optional<at::Tensor>& v_offset,
                              const c10::optional<at::Tensor>& v_scale_cache);

void BlockCopy(const at::Tensor& key_cache, const c10::optional<at::Tensor>& value_cache,
               const at::Tensor& src_block_indices, const at::Tensor& dst_block_indices, const at::Tensor& cum_sum,
               bool simultaneous);
void BlockCopyMeta(const at::Tensor& key_cache, const c10::optional<at::Tensor>& value_cache,
                   const at::Tensor& src_block_indices, const at::Tensor& dst_block_indices, const at::Tensor& cum_sum,
                   bool simultaneous);
void CopyBlocks(at::TensorList key_caches, at::TensorList value_caches, const at::Tensor& block_mapping,
                bool simultaneous);
void CopyBlocksMeta(at::TensorList key_caches, at::TensorList value_caches, const at::Tensor& block_mapping,
                    bool simultaneous);
/// copy_state_slots (docs/semantics.md §14): block_copy's route over a list of states.
void CopyStateSlots(at::TensorList states, const at::Tensor& src_indices, const at::Tensor& dst_indices,
                    bool simultaneous);
void CopyStateSlotsMeta(at::TensorList states, const at::Tensor& src_indices, const at::Tensor& dst_indices,
                        bool simultaneous);
void SwapBlocks(const at::Tensor& src, const at::Tensor& dst, const at::Tensor& block_mapping);
void SwapBlocksMeta(const at::Tensor& src, const at::Tensor& dst, const at::Tensor& block_mapping);
void SwapBlocksBatch(const at::Tensor& src_ptrs, const at::Tensor& dst_ptrs, const at::Tensor& sizes,
                     bool is_src_access_order_any, int64_t direction);
void SwapBlocksBatchMeta(const at::Tensor& src_ptrs, const at::Tensor& dst_ptrs, const at::Tensor& sizes,
                         bool is_src_access_order_any, int64_t direction);
/// batch_memcpy (docs/semantics.md §14.3): the tables on the host (checked) or on a device (read there).
void BatchMemcpy(const at::Tensor& src_ptrs, const at::Tensor& dst_ptrs, const at::Tensor& sizes);
void BatchMemcpyMeta(const at::Tensor& src_ptrs, const at::Tensor& dst_ptrs, const at::Tensor& sizes);
/// block_ranges (docs/semantics.md §17.2): a block transfer's merged address lists, from host tables.
std::tuple<at::Tensor, at::Tensor, at::Tensor> BlockRanges(
    const at::Tensor& src_bases, const at::Tensor& src_strides, const at::Tensor& src_lengths,
    const at::Tensor& src_block_ids, int64_t src_blocks, const at::Tensor& dst_bases, const at::Tensor& dst_strides,
    const at::Tensor& dst_lengths, const at::Tensor& dst_block_ids, int64_t dst_blocks);
void SwapBlockBytes(const at::Tensor& src, const at::Tensor& dst, int64_t block_size_in_bytes,
                    const at::Tensor& block_mapping);
void SwapBlockBytesMeta(const at::Tensor& src, const at::Tensor& dst, int64_t block_size_in_bytes,
                        const at::Tensor& block_mapping);

void GatherBlocks(at::TensorList key_caches, at::TensorList value_caches, const at::Tensor& block_ids,
                  const at::Tensor& out, c10::string_view cache_layout, c10::string_view out_layout,
                  int64_t head_splits);
void GatherBlocksMeta(at::TensorList key_caches, at::TensorList value_caches, const at::Tensor& block_ids,
                      const at::Tensor& out, c10::string_view cache_layout, c10::string_view out_layout,
                      int64_t head_splits);
void ScatterBlocks(const at::Tensor& src, at::TensorList key_caches, at::TensorList value_caches,
                   const at::Tensor& block_ids, c10::string_view src_layout, c10::string_view cache_layout,
                   int64_t head_splits);
/// gather_state_slots / scatter_state_slots (docs/semantics.md §14.2).
void GatherStateSlots(at::TensorList states, const at::Tensor& slot_ids, const at::Tensor& out);
void GatherStateSlotsMeta(at::TensorList states, const at::Tensor& slot_ids, const at::Tensor& out);
void ScatterStateSlots(const at::Tensor& src, at::TensorList states, const at::Tensor& slot_ids);
void ScatterStateSlotsMeta(const at::Tensor& src, at::TensorList states, const at::Tensor& slot_ids);
/// scatter_nd_update (docs/semantics.md §15.1): rows of updates into var at flat rows or (block, offset) pairs.
void ScatterNdUpdate(const at::Tensor& var, const at::Tensor& indices, const at::Tensor& updates);
void ScatterNdUpdateMeta(const at::Tensor& var, const at::Tensor& indices, const at::Tensor& updates);
void ScatterBlocksMeta(const at::Tensor& src, at::TensorList key_caches, at::TensorList value_caches,
                       const at::Tensor& block_ids, c10::string_view src_layout, c10::string_view cache_layout,
                       int64_t head_splits);

/// vLLM's cache ops under its schemas (docs/semantics.md §16, ops/vllm_cache.cpp).
void VllmReshapeAndCacheFlash(const at::Tensor& key, const at::Tensor& value, const at::Tensor& key_cache,
                              const at::Tensor& value_cache, const at::Tensor& slot_mapping,
                              c10::string_view kv_cache_dtype, const at::Tensor& k_scale, const at::Tensor& v_scale);
void VllmReshapeAndCacheFlashMeta(const at::Tensor& key, const at::Tensor& value, const at::Tensor& key_cache,
                                  const at::Tensor& value_cache, const at::Tensor& slot_mapping,
                                  c10::string_view kv_cache_dtype, const at::Tensor& k_scale,
                                  const at::Tensor& v_scale);
void VllmReshapeAndCache(const at::Tensor& key, const at::Tensor& value, const at::Tensor& key_cache,
                         const at::Tensor& value_cache, const at::Tensor& slot_mapping, c10::string_view kv_cache_dtype,
                         const at::Tensor& k_scale, const at::Tensor& v_scale);
void VllmReshapeAndCacheMeta(const at::Tensor& key, const at::Tensor& value, const at::Tensor& key_cache,
                             const at::Tensor& value_cache, const at::Tensor& slot_mapping,
                             c10::string_view kv_cache_dtype, const at::Tensor& k_scale, const at::Tensor& v_scale);
void VllmConcatAndCacheMla(const at::Tensor& kv_c, const at::Tensor& k_pe, const at::Tensor& kv_cache,
                           const at::Tensor& slot_mapping, c10::string_view kv_cache_dtype, const at::Tensor& scale,
                           bool skip_scale);
void VllmConcatAndCacheMlaMeta(const at::Tensor& kv_c, const at::Tensor& k_pe, const at::Tensor& kv_cache,
                               const at::Tensor& slot_mapping, c10::string_view kv_cache_dtype,
                               const at::Tensor& scale, bool skip_scale);
void ConcatMlaQ(const at::Tensor& ql_nope, const at::Tensor& q_pe, const at::Tensor& q_out);
void ConcatMlaQMeta(const at::Tensor& ql_nope, const at::Tensor& q_pe, const at::Tensor& q_out);
void VllmIndexerKQuantAndCache(const at::Tensor& k, const at::Tensor& kv_cache, const at::Tensor& slot_mapping,
                               int64_t quant_block_size, c10::string_view kv_cache_dtype);
void VllmIndexerKQuantAndCacheMeta(const at::Tensor& k, const at::Tensor& kv_cache, const at::Tensor& slot_mapping,
                                   int64_t quant_block_size, c10::string_view kv_cache_dtype);
void VllmCpGatherIndexerKQuantCache(const at::Tensor& kv_cache, const at::Tensor& dst_k, const at::Tensor& dst_scale,
                                    const at::Tensor& block_table, const at::Tensor& cu_seq_lens);
void VllmCpGatherIndexerKQuantCacheMeta(const at::Tensor& kv_cache, const at::Tensor& dst_k,
                                        const at::Tensor& dst_scale, const at::Tensor& block_table,
                                        const at::Tensor& cu_seq_lens);
void ConvertFp8Op(const at::Tensor& dst_cache, const at::Tensor& src_cache, double scale,
                  c10::string_view kv_cache_dtype);
void ConvertFp8Meta(const at::Tensor& dst_cache, const at::Tensor& src_cache, double scale,
                    c10::string_view kv_cache_dtype);
void GatherCache(const at::Tensor& src_cache, const at::Tensor& dst, const at::Tensor& block_table,
                 const at::Tensor& cu_seq_lens, const c10::optional<at::Tensor>& seq_starts,
                 c10::string_view kv_cache_dtype, const c10::optional<at::Tensor>& scale);
void GatherCacheMeta(const at::Tensor& src_cache, const at::Tensor& dst, const at::Tensor& block_table,
                     const at::Tensor& cu_seq_lens, const c10::optional<at::Tensor>& seq_starts,
                     c10::string_view kv_cache_dtype, const c10::optional<at::Tensor>& scale);

}  // namespace ascend_kv
