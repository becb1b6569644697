// What every operator's implementation shares on its way from the rules to a backend.
#pragma once

#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/LegacyTypeDispatch.h>

#include "csrc/dispatch/kernels.h"
#include "csrc/dispatch/policy.h"

namespace ascend_kv {

/// The operators are not differentiable: their implementations run below autograd, so the ATen
/// calls they make record nothing (the Autograd key falls through to them).
using BelowAutograd = at::AutoDispatchBelowADInplaceOrView;

/// Whether a call on a device checks its index values: every index tensor on the host, or full validation.
bool ReadsValues(c10::ArrayRef<at::Tensor> index_tensors);

/// The kernel table of `backend` (kNpu or kSim), registered by the policy before it chose it.
const KernelLibrary& Kernels(Backend backend);

/// For the sim, which runs tensors outside the kernels' domain on contiguous copies: `t` itself
/// when dims first_dim.. are contiguous, else a contiguous copy.
at::Tensor InDomain(const at::Tensor& t, int64_t first_dim);

/// Copy what a kernel wrote into `ran` back into `given`, when it ran on a copy.
void WriteBack(const at::Tensor& given, const at::Tensor& ran);

/// A transfer's buffer on the data's `device`: `given` itself when it is there, else one device
/// buffer of its size, filled from `given` (non-blocking from pinned memory) when `upload` (a
/// scatter's source, or a gather's buffer whose rows a skipped id must leave as they are).
at::Tensor BufferOnDevice(const at::Tensor& given, const at::Device& device, bool upload);

/// After a gather into BufferOnDevice's `ran`: its bytes back into `given` (non-blocking to pinned
/// memory), when they are two tensors.
void BufferBack(const at::Tensor& given, const at::Tensor& ran);

/// Where calls ran: the host paths, the sim, the NPU kernels, the device fallback.
enum class Ran { kHostPaths, kSim, kKernels, kDeviceFallback };
/// Count a call that ran on `ran` (the counts: torch.ops.ascend_kv._runs(), for tools and tests).
void Count(Ran ran);
/// The counts, in the order of Ran.
std::vector<int64_t> Runs();

/// Called by every shapes-only implementation: the first in this process tells Python that calls
/// are being traced, which registers the compile rule (ascend_kv/operators/functionalization.py).
void NoteTracing();

}  // namespace ascend_kv
