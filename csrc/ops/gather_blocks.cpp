#include <ATen/ops/empty.h>

#include "cpu_fallback/host.h"
#include "cpu_fallback/on_device.h"
#include "csrc/ops/ops.h"
#include "csrc/ops/route.h"
#include "csrc/ops/upload.h"
#include "csrc/rules/gather_blocks.h"

namespace ascend_kv {
namespace {

/// One backend call for every layer, K and V, of a checked gather_blocks or scatter_blocks.
void RunTransfer(TransferCall& call)
{
    if (call.Layers() == 0) {
        return;
    }
    const at::Device device = call.caches[0][0].device();
    if (device.is_cpu()) {
        const std::vector<int64_t> ids = PlanTransfer(call);
        Count(Ran::kHostPaths);
        if (!call.framed || !host::TransferBlocks(call, ids)) {
            on_device::TransferBlocks(call);  // a permutation the piece copies do not take: through ATen
        }
        return;
    }
    const bool checked = ReadsValues({call.block_ids});
    if (checked) {
        PlanTransfer(call);
    }
    call.block_ids = OnDevice({call.block_ids}, device)[0];
    // A host buffer goes through one device staging buffer of its size and one async copy (a
    // gather with unchecked ids first uploads it, so skipped rows keep their bytes).
    const at::Tensor given = call.buffer;
    const bool staged = given.device() != device;
    const bool pinned = staged && given.is_pinned();
    if (staged) {
        call.buffer = call.gather && checked ? at::empty(given.sizes(), given.options().device(device))
                                             : given.to(device, /*non_blocking=*/pinned);
    }
    Count(Ran::kDeviceFallback);
    on_device::TransferBlocks(call);
    if (staged && call.gather) {
        given.copy_(call.buffer, /*non_blocking=*/pinned);
    }
}

}  // namespace

void GatherBlocks(at::TensorList key_caches, at::TensorList value_caches, const at::Tensor& block_ids,
                  const at::Tensor& out, c10::string_view cache_layout, c10::string_view out_layout,
                  int64_t head_splits)
{
    BelowAutograd guard;
    TransferCall call = CheckGatherBlocks(key_caches, value_caches, block_ids, out, cache_layout, out_layout,
                                          head_splits, Check::kCall);
    RunTransfer(call);
}

void GatherBlocksMeta(at::TensorList key_caches, at::TensorList value_caches, const at::Tensor& block_ids,
                      const at::Tensor& out, c10::string_view cache_layout, c10::string_view out_layout,
                      int64_t head_splits)
{
    NoteTracing();
    CheckGatherBlocks(key_caches, value_caches, block_ids, out, cache_layout, out_layout, head_splits, Check::kShapes);
}

void ScatterBlocks(const at::Tensor& src, at::TensorList key_caches, at::TensorList value_caches,
                   const at::Tensor& block_ids, c10::string_view src_layout, c10::string_view cache_layout,
                   int64_t head_splits)
{
    BelowAutograd guard;
    TransferCall call = CheckScatterBlocks(src, key_caches, value_caches, block_ids, src_layout, cache_layout,
                                           head_splits, Check::kCall);
    RunTransfer(call);
}

void ScatterBlocksMeta(const at::Tensor& src, at::TensorList key_caches, at::TensorList value_caches,
                       const at::Tensor& block_ids, c10::string_view src_layout, c10::string_view cache_layout,
                       int64_t head_splits)
{
    NoteTracing();
    CheckScatterBlocks(src, key_caches, value_caches, block_ids, src_layout, cache_layout, head_splits,
                       Check::kShapes);
}

}  // namespace ascend_kv
