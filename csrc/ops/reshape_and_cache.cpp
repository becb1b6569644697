#include <string>

#include "cpu_fallback/host.h"
#include "cpu_fallback/on_device.h"
#include "csrc/ops/upload.h"
#include "csrc/ops/kernel_quant.h"
#include "csrc/ops/ops.h"
#include "csrc/ops/route.h"
#include "csrc/rules/formats.h"
#include "csrc/rules/kernel_domain.h"
#include "csrc/rules/quant.h"
#include "csrc/rules/reshape_and_cache.h"

namespace ascend_kv {
namespace {

ReshapeAndCacheCall Checked(const at::Tensor& key, const c10::optional<at::Tensor>& value, const at::Tensor& key_cache,
                            const c10::optional<at::Tensor>& value_cache, const at::Tensor& slot_mapping,
                            c10::string_view kv_cache_cfg, Check check, const QuantArgs& k_quant = QuantArgs(),
                            const QuantArgs& v_quant = QuantArgs())
{
    return CheckReshapeAndCache(key, value.value_or(at::Tensor()), key_cache, value_cache.value_or(at::Tensor()),
                                slot_mapping, std::string(kv_cache_cfg), check, k_quant, v_quant);
}

QuantArgs WriteQuantArgs(const c10::optional<at::Tensor>& scale, const c10::optional<at::Tensor>& inv_scale,
               const c10::optional<at::Tensor>& offset, const c10::optional<at::Tensor>& scale_cache)
{
    return {scale.value_or(at::Tensor()), inv_scale.value_or(at::Tensor()), offset.value_or(at::Tensor()),
            scale_cache.value_or(at::Tensor())};
}

void Launch(const KernelLibrary& kernels, const ReshapeAndCacheCall& call, const at::Tensor& slot_mapping)
{
    const int64_t layout = static_cast<int64_t>(call.geometry.layout);
    if (call.quant.Any()) {
        kernels.reshape_and_cache_quant(call.key, call.value, call.key_cache, call.value_cache, slot_mapping, layout,
                                        KernelSide(call.quant.key), KernelSide(call.quant.value));
        return;
    }
    kernels.reshape_and_cache(call.key, call.value, call.key_cache, call.value_cache, slot_mapping, layout);
}


/// A call, quantizing or not (QuantArgs without tensors: a copy of bytes).
void Run(const at::Tensor& key, const c10::optional<at::Tensor>& value, const at::Tensor& key_cache,
         const c10::optional<at::Tensor>& value_cache, const at::Tensor& slot_mapping, c10::string_view kv_cache_cfg,
         const QuantArgs& k_quant, const QuantArgs& v_quant)
{
    BelowAutograd guard;
    if (key_cache.is_cpu()) {
        const ReshapeAndCacheCall call = Checked(key, value, key_cache, value_cache, slot_mapping, kv_cache_cfg,
                                                 Check::kCall, k_quant, v_quant);
        const at::Tensor slots = CheckSlots(call);
        const Backend backend = HostBackend(Operation::kReshapeAndCache);
        if (call.quant.Any() && (backend != Backend::kSim || !QuantWriteOutsideReason(call.quant).empty())) {
            Count(Ran::kHostPaths);
            host::ReshapeAndCacheQuant(call, slots);
        } else if (backend == Backend::kSim) {
            Count(Ran::kSim);
            ReshapeAndCacheCall copies = call;
            const int64_t row_dim = call.geometry.RowDim();
            copies.key = InDomain(call.key, 1);
            copies.value = InDomain(call.value, 1);
            copies.key_cache = InDomain(call.key_cache, row_dim);
            copies.value_cache = InDomain(call.value_cache, row_dim);
            Launch(Kernels(Backend::kSim), copies, OnDevice({slots}, key_cache.device())[0]);
            WriteBack(call.key_cache, copies.key_cache);
            WriteBack(call.value_cache, copies.value_cache);
        } else {
            Count(Ran::kHostPaths);
            host::ReshapeAndCache(call, slots);
        }
        return;
    }
    const at::Tensor absent;
    const std::vector<std::string> nz = {"key_cache", "value_cache"};
    RequireBaseFormats({{"key", key}, {"value", value ? *value : absent}, {"key_cache", key_cache},
                        {"value_cache", value_cache ? *value_cache : absent}, {"k_scale_cache", k_quant.scale_cache},
                        {"v_scale_cache", v_quant.scale_cache}},
                       kv_cache_cfg == "nz" ? c10::ArrayRef<std::string>(nz) : c10::ArrayRef<std::string>());
    ReshapeAndCacheCall call = Checked(key, value, key_cache, value_cache, slot_mapping, kv_cache_cfg, Check::kCall,
                                       k_quant, v_quant);
    if (ReadsValues(call.IndexTensors())) {
        CheckSlots(call);
    }
    call.slot_mapping = OnDevice(call.IndexTensors(), key_cache.device())[0];
    if (HoldsSlotPairs(call.slot_mapping)) {  // flat slots for every backend, masked on the device
        call.slot_mapping = DeviceSlots(call.slot_mapping, call.Grid());
    }
    std::string outside = QuantWriteOutsideReason(call.quant);
    if (outside.empty()) {
        outside = OutsideReason(call.DataRows());
    }
    const Backend backend = DeviceBackend(Operation::kReshapeAndCache, key_cache.device(), outside);
    if (backend == Backend::kNpu) {
        Count(Ran::kKernels);
        Launch(Kernels(backend), call, call.slot_mapping);
    } else {
        Count(Ran::kDeviceFallback);
        on_device::ReshapeAndCache(call);
    }
}

}  // namespace

void ReshapeAndCache(const at::Tensor& key, const c10::optional<at::Tensor>& value, const at::Tensor& key_cache,
                     const c10::optional<at::Tensor>& value_cache, const at::Tensor& slot_mapping,
                     c10::string_view kv_cache_cfg)
{
    Run(key, value, key_cache, value_cache, slot_mapping, kv_cache_cfg, QuantArgs(), QuantArgs());
}

void ReshapeAndCacheMeta(const at::Tensor& key, const c10::optional<at::Tensor>& value, const at::Tensor& key_cache,
                         const c10::optional<at::Tensor>& value_cache, const at::Tensor& slot_mapping,
                         c10::string_view kv_cache_cfg)
{
    NoteTracing();
    Checked(key, value, key_cache, value_cache, slot_mapping, kv_cache_cfg, Check::kShapes);
}

void ReshapeAndCacheQuant(const at::Tensor& key, const c10::optional<at::Tensor>& value, const at::Tensor& key_cache,
                          const c10::optional<at::Tensor>& value_cache, const at::Tensor& slot_mapping,
                          c10::string_view kv_cache_cfg, const c10::optional<at::Tensor>& k_scale,
                          const c10::optional<at::Tensor>& k_inv_scale, const c10::optional<at::Tensor>& k_offset,
                          const c10::optional<at::Tensor>& k_scale_cache, const c10::optional<at::Tensor>& v_scale,
                          const c10::optional<at::Tensor>& v_inv_scale, const c10::optional<at::Tensor>& v_offset,
                          const c10::optional<at::Tensor>& v_scale_cache)
{
    Run(key, value, key_cache, value_cache, slot_mapping, kv_cache_cfg, WriteQuantArgs(k_scale, k_inv_scale, k_offset, k_scale_cache),
        WriteQuantArgs(v_scale, v_inv_scale, v_offset, v_scale_cache));
}

void ReshapeAndCacheQuantMeta(const at::Tensor& key, const c10::optional<at::Tensor>& value,
                              const at::Tensor& key_cache, const c10::optional<at::Tensor>& value_cache,
                              const at::Tensor& slot_mapping, c10::string_view kv_cache_cfg,
                              const c10::optional<at::Tensor>& k_scale, const c10::optional<at::Tensor>& k_inv_scale,
                              const c10::optional<at::Tensor>& k_offset,
                              const c10::optional<at::Tensor>& k_scale_cache, const c10::optional<at::Tensor>& v_scale,
                              const c10::optional<at::Tensor>& v_inv_scale, const c10::optional<at::Tensor>& v_offset,
                              const c10::optional<at::Tensor>& v_scale_cache)
{
    NoteTracing();
    Checked(key, value, key_cache, value_cache, slot_mapping, kv_cache_cfg, Check::kShapes,
            WriteQuantArgs(k_scale, k_inv_scale, k_offset, k_scale_cache), WriteQuantArgs(v_scale, v_inv_scale, v_offset, v_scale_cache));
}

}  // namespace ascend_kv
