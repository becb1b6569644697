// The C++ side of the dispatch policy (docs/hardware.md, "Dispatch policy"): which backend runs a
// call, read from decisions Python took once and this side keeps, so a call pays a look-up.
//
// Python owns the policy (ascend_kv/dispatch/policy.py: the support matrix, the SoC, the kernel
// library, the warnings, the errors). It pushes the requested backend and validation mode of a
// `with` block here, and is asked, through the operators ascend_kv::_environment and
// ascend_kv::_decide (implemented in Python), what this side does not know yet; ascend_kv::_forget
// drops everything kept, when what it depended on changes.
#pragma once

#include <string>

#include <ATen/core/Tensor.h>

namespace ascend_kv {

/// The operations, by the ATB names the policy and the support matrix use.
enum class Operation { kKvCache, kPagedLoad, kReshapeAndCache, kBlockCopy };
const char* AtbName(Operation op);

enum class Backend { kFallback, kSim, kNpu };

/// The backend of a call on host tensors: the fallback, or the sim when requested (an error when
/// the requested backend cannot run on the host).
Backend HostBackend(Operation op);

/// The backend of a call on `device` (not the host); `outside` says why the kernels cannot take
/// the call's tensors in place, empty when they can. A fallback on an NPU warns once per reason.
Backend DeviceBackend(Operation op, const at::Device& device, const std::string& outside);

/// Whether a call with index tensors on the device checks their values too (full validation).
bool ValidateFull();

/// Set (value) or clear (none) this thread's requested backend ("auto", "npu", "sim",
/// "fallback") or validation mode ("device", "full"): setting "backend" or "validate".
void SetOverride(const std::string& setting, const c10::optional<std::string>& value);

/// Forget the environment's settings and every decision kept.
void Forget();

}  // namespace ascend_kv
