/*
 * The kernel library's interface: what the operator library (csrc/) calls to run the AscendC
 * kernels, one entry per operation. Two builds provide it:
 *   libascend_kv_npu.so   (NPU build, CANN): the kernels queued on the current NPU stream;
 *   libascend_kv_host.so  (host build): the kernels run on the host model of the AscendC API,
 *                         over CPU tensors (the sim backend) or a device holding host memory.
 * Each exports ascend_kv_kernel_library(), which returns its table; Python loads the library and
 * hands the table's address to the operator library (csrc/dispatch/kernels.h).
 *
 * The tensors arrive checked by the operator library's rules (csrc/rules/) and inside the
 * kernels' domain (csrc/rules/kernel_domain.h): one device, token rows contiguous, index tensors
 * int32/int64, contiguous and on that device. Index values are never read on the host: the
 * kernels read them and skip whatever falls outside the tensors. So an entry checks nothing; it
 * computes the tiling and launches.
 */
#ifndef ASCEND_KV_HOST_KERNEL_LIBRARY_H
#define ASCEND_KV_HOST_KERNEL_LIBRARY_H

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ascend_kv {

/// Raised when the table's layout changes, so a stale library is refused rather than misread.
constexpr uint32_t kKernelLibraryVersion = 3;

/// block_copy's simultaneous mode holds a chunk of every copy's source in UB at once: the operator
/// library gives it calls of at most this many destinations (each UB slot then has >= 32 bytes).
constexpr int64_t kMaxSimultaneousCopies = 1024;

/// One side of a quantizing reshape_and_cache (int8 codes, docs/semantics.md §13): the scheme (kQuant* of
/// ascendc/tiling.h; kQuantNone copies bytes), the compute dtype of a static scheme (float, half or
/// bfloat16), the row as heads x head_size, and the tensors (undefined when absent), contiguous:
/// static scale and offset of 1, heads or heads * head_size elements; dynamic scale cache
/// [num_blocks, block_size, heads], any strides (written).
struct KernelQuantSide {
    int64_t scheme = 0;
    at::ScalarType compute = at::kFloat;
    int64_t heads = 1;
    int64_t head_size = 1;
    at::Tensor scale, offset, scale_cache;
};

struct KernelLibrary {
    uint32_t version;
    /// new_kv [ntokens, hidden], past [layers, batch, max_seq_len, hidden] (written), token_offset
    /// and seq_len [batch]; layer: a one-element tensor, or undefined to write layer `layer_id`.
    void (*kv_cache)(const at::Tensor& new_kv, const at::Tensor& past, const at::Tensor& token_offset,
                     const at::Tensor& seq_len, const at::Tensor& layer, int64_t layer_id);
    /// Caches ND [nb, bs, heads, hs] / NZ [nb, T // E, bs, E]; block_table [batch, max_blocks];
    /// context_lens [batch] ([batch + 1] with cumsum); seq_starts [batch] or undefined; outputs
    /// key, value (written) ND [rows, heads, hs] / NZ [rows, T]; layout 0 NZ, 1 ND.
    void (*paged_cache_load)(const at::Tensor& key_cache, const at::Tensor& value_cache, const at::Tensor& block_table,
                             const at::Tensor& context_lens, const at::Tensor& seq_starts, const at::Tensor& key,
                             const at::Tensor& value, int64_t layout, bool cumsum);
    /// key, value [tokens, heads, hs] (value and value_cache undefined: key-only); caches written;
    /// slot_mapping [n].
    void (*reshape_and_cache)(const at::Tensor& key, const at::Tensor& value, const at::Tensor& key_cache,
                              const at::Tensor& value_cache, const at::Tensor& slot_mapping, int64_t layout);
    /// caches: every cache written, each as its [num_blocks, rows, row] view with contiguous rows;
    /// block src[i] goes to blocks dst[cum_sum[i-1]:cum_sum[i]] (cum_sum undefined: src[j] to dst[j]);
    /// simultaneous: every source read before any destination is written (at most
    /// kMaxSimultaneousCopies entries of dst).
    void (*block_copy)(const std::vector<at::Tensor>& caches, const at::Tensor& src, const at::Tensor& dst,
                       const at::Tensor& cum_sum, bool simultaneous);
    /// gather_blocks / scatter_blocks: caches [num_blocks, ...] (key caches of every layer, then value
    /// caches; one shape and strides), buffer [KV, L, n, *block], ids [n]. A block is the frame of
    /// kTransferFrameDims dims `frame` (loops in nesting order) at element strides `cache_strides` in
    /// a cache block and `buffer_strides` in a buffer block, merging into at most 4 loops.
    void (*transfer_blocks)(const std::vector<at::Tensor>& caches, const at::Tensor& buffer, const at::Tensor& ids,
                            c10::IntArrayRef frame, c10::IntArrayRef cache_strides, c10::IntArrayRef buffer_strides,
                            bool gather);
    /// The device's storage format of `tensor` (ACL's aclFormat: 2 is ND), or -1 when this
    /// library cannot tell (the host build).
    int64_t (*storage_format)(const at::Tensor& tensor);
    /// swap_blocks_batch: copy i moves sizes[i] bytes from address src[i] to address dst[i]
    /// (checked: destinations apart from each other and from the sources). The NPU build queues
    /// them on the current stream in one runtime call (direction -1: inferred per copy; 0 host to
    /// device, 1 device to host, 2 device to device); the host build copies them with memcpy.
    void (*memcpy_batch)(const std::vector<int64_t>& src, const std::vector<int64_t>& dst,
                         const std::vector<int64_t>& sizes, int64_t direction);
    /// reshape_and_cache whose sides are quantized as `key_quant` / `value_quant` say; the caches
    /// of a quantized side are int8; the rest as reshape_and_cache.
    void (*reshape_and_cache_quant)(const at::Tensor& key, const at::Tensor& value, const at::Tensor& key_cache,
                                    const at::Tensor& value_cache, const at::Tensor& slot_mapping, int64_t layout,
                                    const KernelQuantSide& key_quant, const KernelQuantSide& value_quant);
    /// paged_cache_load whose sides are dequantized as `key_quant` / `value_quant` say (scheme
    /// kQuantDivide: (q - offset) * scale; kQuantDynamic: q * the scale cache's entry; the caches of
    /// such a side are int8, its output float16/bfloat16/float32); the rest as paged_cache_load.
    void (*paged_cache_load_dequant)(const at::Tensor& key_cache, const at::Tensor& value_cache,
                                     const at::Tensor& block_table, const at::Tensor& context_lens,
                                     const at::Tensor& seq_starts, const at::Tensor& key, const at::Tensor& value,
                                     int64_t layout, bool cumsum, const KernelQuantSide& key_quant,
                                     const KernelQuantSide& value_quant);
    /// gather_state_slots / scatter_state_slots: states as [num_slots, rows, row] views with contiguous
    /// rows, buffer [n, row bytes] uint8 (rows contiguous, any row stride), ids [n]: slot ids[j] of
    /// state c and the bytes of buffer row j from offsets[c] (the slot's bytes, dense) exchange
    /// (gather: state to buffer); ids outside [0, num_slots) are skipped.
    void (*transfer_slots)(const std::vector<at::Tensor>& states, const std::vector<int64_t>& offsets,
                           const at::Tensor& buffer, const at::Tensor& ids, bool gather);
    /// batch_memcpy: src_ptrs and dst_ptrs [n] int64, sizes [n] int32/int64, contiguous, in the
    /// device's memory: copy i moves sizes[i] bytes (none when <= 0) from address src_ptrs[i] to
    /// dst_ptrs[i], the tables read by the kernel only.
    void (*batch_memcpy)(const at::Tensor& src_ptrs, const at::Tensor& dst_ptrs, const at::Tensor& sizes);
};

}  // namespace ascend_kv

extern "C" const ascend_kv::KernelLibrary* ascend_kv_kernel_library();

#endif  // ASCEND_KV_HOST_KERNEL_LIBRARY_H
