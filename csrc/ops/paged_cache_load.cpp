#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>

#include <ATen/ops/zeros.h>
#include <c10/util/safe_numerics.h>

#include "cpu_fallback/host.h"
#include "cpu_fallback/on_device.h"
#include "csrc/ops/upload.h"
#include "csrc/ops/kernel_quant.h"
#include "csrc/ops/ops.h"
#include "csrc/ops/route.h"
#include "csrc/rules/formats.h"
#include "csrc/rules/kernel_domain.h"
#include "csrc/rules/paged_cache_load.h"
#include "csrc/rules/quant.h"
#include "csrc/rules/text.h"

namespace ascend_kv {
namespace {

PagedLoadCall Checked(const at::Tensor& key_cache, const at::Tensor& value_cache, const at::Tensor& block_table,
                    const at::Tensor& context_lens, int64_t kv_cache_cfg, bool cumsum,
                    const c10::optional<at::Tensor>& seq_starts, bool zero_fill, const at::Tensor& key,
                    const at::Tensor& value, Check check, const QuantArgs& k_quant = QuantArgs(),
                    const QuantArgs& v_quant = QuantArgs(), std::optional<at::ScalarType> out_dtype = std::nullopt)
{
    return CheckPagedLoad(key_cache, value_cache, block_table, context_lens, kv_cache_cfg, cumsum,
                          seq_starts.value_or(at::Tensor()), zero_fill, key, value, check, k_quant, v_quant, out_dtype);
}

QuantArgs LoadQuantArgs(const c10::optional<at::Tensor>& scale, const c10::optional<at::Tensor>& offset,
                        const c10::optional<at::Tensor>& scale_cache)
{
    return {scale.value_or(at::Tensor()), at::Tensor(), offset.value_or(at::Tensor()),
            scale_cache.value_or(at::Tensor())};
}

/// Give an allocating call its outputs, zero-filled, [rows, *row] on the caches' device (after
/// every rule has passed); an allocator's refusal is the ValueError of the row count asked for.
void Allocate(PagedLoadCall& call, const c10::SymInt& rows)
{
    for (const bool key : {true, false}) {
        const at::Tensor& cache = key ? call.key_cache : call.value_cache;
        std::vector<c10::SymInt> shape = {rows};
        const auto& row = key ? call.geometry.key_row : call.geometry.value_row;
        shape.insert(shape.end(), row.begin(), row.end());
        try {
            (key ? call.key : call.value) = at::zeros_symint(shape, cache.options().dtype(call.OutputDtype(key)));
        } catch (const c10::Error& error) {
            std::ostringstream bytes;
            if (rows.is_heap_allocated()) {
                bytes << "?";
            } else {
                int64_t total = c10::elementSize(call.OutputDtype(key));
                bool overflows = false;
                for (const c10::SymInt& n : shape) {
                    overflows |= c10::mul_overflows(total, n.expect_int(), &total);
                }
                if (overflows) {
                    bytes << "more than " << std::numeric_limits<int64_t>::max();
                } else {
                    bytes << total;
                }
            }
            TORCH_CHECK_VALUE(false, key ? "key" : "value", ": the output ", List(shape),
                              " that context_lens asks for (", bytes.str(), " bytes) cannot be allocated: ",
                              error.what_without_backtrace());
        }
    }
}

void Launch(const KernelLibrary& kernels, const PagedLoadCall& call, c10::ArrayRef<at::Tensor> index)
{
    if (call.quant.Any()) {
        kernels.paged_cache_load_dequant(call.key_cache, call.value_cache, index[0], index[1], index[2], call.key,
                                         call.value, static_cast<int64_t>(call.geometry.layout), call.cumsum,
                                         KernelSide(call.quant.key), KernelSide(call.quant.value));
        return;
    }
    kernels.paged_cache_load(call.key_cache, call.value_cache, index[0], index[1], index[2], call.key, call.value,
                             static_cast<int64_t>(call.geometry.layout), call.cumsum);
}

/// The kernels' host build on host tensors (outside their domain: on contiguous copies, the
/// outputs copied back); a zero_fill load zeroes the rows it covers first.
void RunSim(const PagedLoadCall& call)
{
    Count(Ran::kSim);
    if (call.zero_fill) {
        on_device::ClearLoadedRows(call);
    }
    PagedLoadCall copies = call;
    const int64_t row_dim = call.geometry.RowDim();
    copies.key_cache = InDomain(call.key_cache, row_dim);
    copies.value_cache = InDomain(call.value_cache, row_dim);
    copies.key = InDomain(call.key, 1);
    copies.value = InDomain(call.value, 1);
    Launch(Kernels(Backend::kSim), copies, OnDevice(call.IndexTensors(), call.key_cache.device()));
    WriteBack(call.key, copies.key);
    WriteBack(call.value, copies.value);
}

/// The call, its outputs given (key, value) or allocated (both undefined).
std::tuple<at::Tensor, at::Tensor> Run(const at::Tensor& key_cache, const at::Tensor& value_cache,
                                       const at::Tensor& block_table, const at::Tensor& context_lens,
                                       int64_t kv_cache_cfg, bool cumsum, const c10::optional<at::Tensor>& seq_starts,
                                       bool zero_fill, const at::Tensor& key, const at::Tensor& value,
                                       const QuantArgs& k_quant = QuantArgs(), const QuantArgs& v_quant = QuantArgs(),
                                       std::optional<at::ScalarType> out_dtype = std::nullopt)
{
    BelowAutograd guard;
    if (key_cache.is_cpu()) {
        PagedLoadCall call = Checked(key_cache, value_cache, block_table, context_lens, kv_cache_cfg, cumsum, seq_starts,
                                   zero_fill, key, value, Check::kCall, k_quant, v_quant, out_dtype);
        const PagedLoadPlan plan = PlanPagedLoad(call);
        if (!key.defined()) {
            Allocate(call, plan.end_row);
        }
        const bool sim = HostBackend(Operation::kPagedLoad) == Backend::kSim;
        if (sim && (!call.quant.Any() || QuantLoadOutsideReason(call).empty())) {
            RunSim(call);
        } else {
            Count(Ran::kHostPaths);
            host::PagedLoad(call, plan);
        }
        return {call.key, call.value};
    }
    const std::vector<std::string> nz = {"key_cache", "value_cache"};
    RequireBaseFormats({{"key_cache", key_cache}, {"value_cache", value_cache}, {"key", key}, {"value", value},
                        {"k_scale_cache", k_quant.scale_cache}, {"v_scale_cache", v_quant.scale_cache}},
                       kv_cache_cfg == 0 ? c10::ArrayRef<std::string>(nz) : c10::ArrayRef<std::string>());
    PagedLoadCall call = Checked(key_cache, value_cache, block_table, context_lens, kv_cache_cfg, cumsum, seq_starts,
                               zero_fill, key, value, Check::kCall, k_quant, v_quant, out_dtype);
    if (ReadsValues(call.IndexTensors())) {
        const PagedLoadPlan plan = PlanPagedLoad(call);
        if (!key.defined()) {
            Allocate(call, plan.end_row);
        }
    } else if (!key.defined()) {  // the one synchronisation of the allocating form: its row count
        Allocate(call, on_device::OutputRows(call.context_lens, cumsum).item<int64_t>());
    }
    const IndexTensors index = OnDevice(call.IndexTensors(), key_cache.device());
    std::string outside = QuantLoadOutsideReason(call);
    if (outside.empty()) {
        outside = OutsideReason(call.DataRows());
    }
    const Backend backend = DeviceBackend(Operation::kPagedLoad, key_cache.device(), outside);
    call.block_table = index[0];
    call.context_lens = index[1];
    call.seq_starts = index[2];
    if (backend == Backend::kNpu) {
        Count(Ran::kKernels);
        if (call.zero_fill) {
            on_device::ClearLoadedRows(call);
        }
        Launch(Kernels(backend), call, index);
    } else {
        Count(Ran::kDeviceFallback);
        on_device::PagedLoad(call);
    }
    return {call.key, call.value};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> PagedCacheLoad(const at::Tensor& key_cache, const at::Tensor& value_cache,
                                                  const at::Tensor& block_table, const at::Tensor& context_lens,
                                                  int64_t kv_cache_cfg, bool cumsum,
                                                  const c10::optional<at::Tensor>& seq_starts, bool zero_fill)
{
    return Run(key_cache, value_cache, block_table, context_lens, kv_cache_cfg, cumsum, seq_starts, zero_fill,
               at::Tensor(), at::Tensor());
}

void PagedCacheLoadInto(const at::Tensor& key_cache, const at::Tensor& value_cache, const at::Tensor& block_table,
                        const at::Tensor& context_lens, const at::Tensor& key, const at::Tensor& value,
                        int64_t kv_cache_cfg, bool cumsum, const c10::optional<at::Tensor>& seq_starts, bool zero_fill)
{
    Run(key_cache, value_cache, block_table, context_lens, kv_cache_cfg, cumsum, seq_starts, zero_fill, key, value);
}

void PagedCacheLoadIntoMeta(const at::Tensor& key_cache, const at::Tensor& value_cache, const at::Tensor& block_table,
                            const at::Tensor& context_lens, const at::Tensor& key, const at::Tensor& value,
                            int64_t kv_cache_cfg, bool cumsum, const c10::optional<at::Tensor>& seq_starts,
                            bool zero_fill)
{
    NoteTracing();
    Checked(key_cache, value_cache, block_table, context_lens, kv_cache_cfg, cumsum, seq_starts, zero_fill, key, value,
          Check::kShapes);
}

std::tuple<at::Tensor, at::Tensor> PagedCacheLoadDequant(
    const at::Tensor& key_cache, const at::Tensor& value_cache, const at::Tensor& block_table,
    const at::Tensor& context_lens, int64_t kv_cache_cfg, bool cumsum, const c10::optional<at::Tensor>& seq_starts,
    bool zero_fill, const c10::optional<at::Tensor>& k_scale, const c10::optional<at::Tensor>& k_offset,
    const c10::optional<at::Tensor>& k_scale_cache, const c10::optional<at::Tensor>& v_scale,
    const c10::optional<at::Tensor>& v_offset, const c10::optional<at::Tensor>& v_scale_cache,
    std::optional<at::ScalarType> out_dtype)
{
    return Run(key_cache, value_cache, block_table, context_lens, kv_cache_cfg, cumsum, seq_starts, zero_fill,
               at::Tensor(), at::Tensor(), LoadQuantArgs(k_scale, k_offset, k_scale_cache),
               LoadQuantArgs(v_scale, v_offset, v_scale_cache), out_dtype);
}

void PagedCacheLoadDequantInto(const at::Tensor& key_cache, const at::Tensor& value_cache,
                               const at::Tensor& block_table, const at::Tensor& context_lens, const at::Tensor& key,
                               const at::Tensor& value, int64_t kv_cache_cfg, bool cumsum,
                               const c10::optional<at::Tensor>& seq_starts, bool zero_fill,
                               const c10::optional<at::Tensor>& k_scale, const c10::optional<at::Tensor>& k_offset,
                               const c10::optional<at::Tensor>& k_scale_cache, const c10::optional<at::Tensor>& v_scale,
                               const c10::optional<at::Tensor>& v_offset,
                               const c10::optional<at::Tensor>& v_scale_cache, std::optional<at::ScalarType> out_dtype)
{
    Run(key_cache, value_cache, block_table, context_lens, kv_cache_cfg, cumsum, seq_starts, zero_fill, key, value,
        LoadQuantArgs(k_scale, k_offset, k_scale_cache), LoadQuantArgs(v_scale, v_offset, v_scale_cache), out_dtype);
}

void PagedCacheLoadDequantIntoMeta(const at::Tensor& key_cache, const at::Tensor& value_cache,
                                   const at::Tensor& block_table, const at::Tensor& context_lens,
                                   const at::Tensor& key, const at::Tensor& value, int64_t kv_cache_cfg, bool cumsum,
                                   const c10::optional<at::Tensor>& seq_starts, bool zero_fill,
                                   const c10::optional<at::Tensor>& k_scale, const c10::optional<at::Tensor>& k_offset,
                                   const c10::optional<at::Tensor>& k_scale_cache,
                                   const c10::optional<at::Tensor>& v_scale, const c10::optional<at::Tensor>& v_offset,
                                   const c10::optional<at::Tensor>& v_scale_cache,
                                   std::optional<at::ScalarType> out_dtype)
{
    NoteTracing();
    Checked(key_cache, value_cache, block_table, context_lens, kv_cache_cfg, cumsum, seq_starts, zero_fill, key, value,
            Check::kShapes, LoadQuantArgs(k_scale, k_offset, k_scale_cache),
            LoadQuantArgs(v_scale, v_offset, v_scale_cache), out_dtype);
}

std::tuple<at::Tensor, at::Tensor> PagedCacheLoadDequantOutputs(
    const at::Tensor& key_cache, const at::Tensor& value_cache, const at::Tensor& block_table,
    const at::Tensor& context_lens, int64_t kv_cache_cfg, bool cumsum, const c10::optional<at::Tensor>& seq_starts,
    bool zero_fill, const c10::optional<at::Tensor>& k_scale, const c10::optional<at::Tensor>& k_offset,
    const c10::optional<at::Tensor>& k_scale_cache, const c10::optional<at::Tensor>& v_scale,
    const c10::optional<at::Tensor>& v_offset, const c10::optional<at::Tensor>& v_scale_cache,
    std::optional<at::ScalarType> out_dtype, c10::SymInt rows)
{
    PagedLoadCall call = Checked(key_cache, value_cache, block_table, context_lens, kv_cache_cfg, cumsum, seq_starts,
                                 zero_fill, at::Tensor(), at::Tensor(), Check::kShapes,
                                 LoadQuantArgs(k_scale, k_offset, k_scale_cache),
                                 LoadQuantArgs(v_scale, v_offset, v_scale_cache), out_dtype);
    Allocate(call, rows);
    return {call.key, call.value};
}

std::tuple<at::Tensor, at::Tensor> PagedCacheLoadOutputs(const at::Tensor& key_cache, const at::Tensor& value_cache,
                                                         const at::Tensor& block_table, const at::Tensor& context_lens,
                                                         int64_t kv_cache_cfg, bool cumsum,
                                                         const c10::optional<at::Tensor>& seq_starts, bool zero_fill,
                                                         c10::SymInt rows)
{
    PagedLoadCall call = Checked(key_cache, value_cache, block_table, context_lens, kv_cache_cfg, cumsum, seq_starts,
                               zero_fill, at::Tensor(), at::Tensor(), Check::kShapes);
    Allocate(call, rows);
    return {call.key, call.value};
}

}  // namespace ascend_kv
