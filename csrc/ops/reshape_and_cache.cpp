#include <string>

#include "cpu_fallback/host.h"
#include "cpu_fallback/on_device.h"
#include "csrc/ops/upload.h"
#include "csrc/ops/ops.h"
#include "csrc/ops/route.h"
#include "csrc/rules/formats.h"
#include "csrc/rules/kernel_domain.h"
#include "csrc/rules/reshape_and_cache.h"

namespace ascend_kv {
namespace {

ReshapeAndCacheCall Checked(const at::Tensor& key, const c10::optional<at::Tensor>& value, const at::Tensor& key_cache,
                            const c10::optional<at::Tensor>& value_cache, const at::Tensor& slot_mapping,
                            c10::string_view kv_cache_cfg, Check check)
{
    return CheckReshapeAndCache(key, value.value_or(at::Tensor()), key_cache, value_cache.value_or(at::Tensor()),
                                slot_mapping, std::string(kv_cache_cfg), check);
}

void Launch(const KernelLibrary& kernels, const ReshapeAndCacheCall& call, const at::Tensor& slot_mapping)
{
    kernels.reshape_and_cache(call.key, call.value, call.key_cache, call.value_cache, slot_mapping,
                              static_cast<int64_t>(call.geometry.layout));
}

}  // namespace

void ReshapeAndCache(const at::Tensor& key, const c10::optional<at::Tensor>& value, const at::Tensor& key_cache,
                     const c10::optional<at::Tensor>& value_cache, const at::Tensor& slot_mapping,
                     c10::string_view kv_cache_cfg)
{
    BelowAutograd guard;
    if (key_cache.is_cpu()) {
        const ReshapeAndCacheCall call = Checked(key, value, key_cache, value_cache, slot_mapping, kv_cache_cfg,
                                                 Check::kCall);
        const at::Tensor slots = CheckSlots(call);
        if (HostBackend(Operation::kReshapeAndCache) == Backend::kSim) {
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
                        {"value_cache", value_cache ? *value_cache : absent}},
                       kv_cache_cfg == "nz" ? c10::ArrayRef<std::string>(nz) : c10::ArrayRef<std::string>());
    ReshapeAndCacheCall call = Checked(key, value, key_cache, value_cache, slot_mapping, kv_cache_cfg, Check::kCall);
    if (ReadsValues(call.IndexTensors())) {
        CheckSlots(call);
    }
    call.slot_mapping = OnDevice(call.IndexTensors(), key_cache.device())[0];
    const Backend backend =
        DeviceBackend(Operation::kReshapeAndCache, key_cache.device(), OutsideReason(call.DataRows()));
    if (backend == Backend::kNpu) {
        Count(Ran::kKernels);
        Launch(Kernels(backend), call, call.slot_mapping);
    } else {
        Count(Ran::kDeviceFallback);
        on_device::ReshapeAndCache(call);
    }
}

void ReshapeAndCacheMeta(const at::Tensor& key, const c10::optional<at::Tensor>& value, const at::Tensor& key_cache,
                         const c10::optional<at::Tensor>& value_cache, const at::Tensor& slot_mapping,
                         c10::string_view kv_cache_cfg)
{
    NoteTracing();
    Checked(key, value, key_cache, value_cache, slot_mapping, kv_cache_cfg, Check::kShapes);
}

}  // namespace ascend_kv
