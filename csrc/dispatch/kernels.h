// The kernel libraries this process has loaded (ascendc/host/kernel_library.h): the NPU build for
// NPU tensors, the host build for the sim backend (and for a device whose tensors hold host
// memory, as the tests' fake NPU). Python loads a library and registers its table here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <ATen/core/Tensor.h>

#include "ascendc/host/kernel_library.h"

namespace ascend_kv {

enum class KernelRole { kNpu, kSim };

/// Register (or, with 0, forget) the table at `address` for `role` ("npu" or "sim").
void UseKernelLibrary(int64_t address, const std::string& role);

/// The table registered for `role`, or null.
const KernelLibrary* KernelsFor(KernelRole role);

/// Register (or, with 0, forget) a function `int64_t f(const at::Tensor&)` that tells the storage
/// format of an NPU tensor (a runtime's own, e.g. the tests' fake NPU).
void UseStorageFormat(int64_t address);

/// The ACL storage format of an NPU tensor (2 is ND, 29 FRACTAL_NZ), or none off the NPU or when
/// nothing here can tell: a registered function, else the NPU kernel library's, else torch_npu's
/// get_npu_format asked through Python.
std::optional<int64_t> StorageFormat(const at::Tensor& tensor);

}  // namespace ascend_kv
