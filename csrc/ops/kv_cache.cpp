#include "cpu_fallback/host.h"
#include "cpu_fallback/on_device.h"
#include "csrc/ops/upload.h"
#include "csrc/ops/ops.h"
#include "csrc/ops/route.h"
#include "csrc/rules/formats.h"
#include "csrc/rules/kernel_domain.h"
#include "csrc/rules/kv_cache.h"

namespace ascend_kv {
namespace {

void Launch(const KernelLibrary& kernels, const KvCacheCall& call, c10::ArrayRef<at::Tensor> index)
{
    kernels.kv_cache(call.new_kv, call.past, index[0], index[1], index[2], call.layer_id);
}

void Run(const at::Tensor& new_kv, const at::Tensor& layer_tensor, int64_t layer_id, const at::Tensor& past,
         const at::Tensor& token_offset, const at::Tensor& seq_len)
{
    BelowAutograd guard;
    if (past.is_cpu()) {
        const KvCacheCall call = CheckKvCache(new_kv, layer_tensor, layer_id, past, token_offset, seq_len, Check::kCall);
        const KvCachePlan plan = PlanKvCache(call);
        if (HostBackend(Operation::kKvCache) == Backend::kSim) {
            KvCacheCall copies = call;
            copies.new_kv = InDomain(call.new_kv, 1);
            copies.past = InDomain(call.past, 3);
            Count(Ran::kSim);
            Launch(Kernels(Backend::kSim), copies, OnDevice(call.IndexTensors(), past.device()));
            WriteBack(call.past, copies.past);
        } else {
            Count(Ran::kHostPaths);
            host::KvCache(call, plan);
        }
        return;
    }
    RequireBaseFormats({{"new_kv", new_kv}, {"past", past}});
    KvCacheCall call = CheckKvCache(new_kv, layer_tensor, layer_id, past, token_offset, seq_len, Check::kCall);
    if (ReadsValues(call.IndexTensors())) {
        PlanKvCache(call);
    }
    const IndexTensors index = OnDevice(call.IndexTensors(), past.device());
    const Backend backend = DeviceBackend(Operation::kKvCache, past.device(), OutsideReason(call.DataRows()));
    if (backend == Backend::kNpu) {
        Count(Ran::kKernels);
        Launch(Kernels(backend), call, index);
        return;
    }
    call.token_offset = index[0];
    call.seq_len = index[1];
    call.layer_tensor = index[2];
    Count(Ran::kDeviceFallback);
    on_device::KvCache(call);
}

}  // namespace

void KvCache(const at::Tensor& new_kv, int64_t layer_id, const at::Tensor& past, const at::Tensor& token_offset,
             const at::Tensor& seq_len)
{
    Run(new_kv, at::Tensor(), layer_id, past, token_offset, seq_len);
}

void KvCacheLayerTensor(const at::Tensor& new_kv, const at::Tensor& layer_id, const at::Tensor& past,
                        const at::Tensor& token_offset, const at::Tensor& seq_len)
{
    Run(new_kv, layer_id, 0, past, token_offset, seq_len);
}

void KvCacheMeta(const at::Tensor& new_kv, int64_t layer_id, const at::Tensor& past, const at::Tensor& token_offset,
                 const at::Tensor& seq_len)
{
    NoteTracing();
    CheckKvCache(new_kv, at::Tensor(), layer_id, past, token_offset, seq_len, Check::kShapes);
}

void KvCacheLayerTensorMeta(const at::Tensor& new_kv, const at::Tensor& layer_id, const at::Tensor& past,
                            const at::Tensor& token_offset, const at::Tensor& seq_len)
{
    NoteTracing();
    CheckKvCache(new_kv, layer_id, 0, past, token_offset, seq_len, Check::kShapes);
}

}  // namespace ascend_kv
