#include "csrc/ops/upload.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>

namespace ascend_kv {
namespace {

/// An index tensor already on the device: int32 or int64 (a layer id may be any integer type), contiguous.
at::Tensor AsKernelsTakeIt(const at::Tensor& t)
{
    if (!t.defined()) {
        return t;
    }
    return (t.scalar_type() == at::kInt || t.scalar_type() == at::kLong ? t : t.to(at::kLong)).contiguous();
}

}  // namespace

IndexTensors OnDevice(c10::ArrayRef<at::Tensor> tensors, const at::Device& device)
{
    std::vector<at::Tensor> host;
    int64_t total = 0;
    for (const at::Tensor& t : tensors) {
        if (t.defined() && t.device() != device) {
            host.push_back(t.reshape(-1));
            total += t.numel();
        }
    }
    IndexTensors result;
    if (host.empty()) {
        for (const at::Tensor& t : tensors) {
            result.push_back(AsKernelsTakeIt(t));
        }
        return result;
    }
    at::Tensor moved;
    if (total == 0) {
        moved = at::empty({0}, at::TensorOptions().dtype(at::kLong).device(device));
    } else {
        at::Tensor flat;
        try {
            flat = at::empty({total}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
        } catch (const c10::Error&) {  // no pinned memory for this device: the copy is then from pageable memory
            flat = at::empty({total}, at::TensorOptions().dtype(at::kLong));
        }
        at::cat_out(flat, host);
        moved = flat.to(device, /*non_blocking=*/true);
    }
    int64_t start = 0;
    for (const at::Tensor& t : tensors) {
        if (!t.defined() || t.device() == device) {
            result.push_back(AsKernelsTakeIt(t));
            continue;
        }
        result.push_back(moved.narrow(0, start, t.numel()).view(t.sizes()));
        start += t.numel();
    }
    return result;
}

}  // namespace ascend_kv
