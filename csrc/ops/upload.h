// Index tensors on the host, sent to the data's device in one copy: gathered as int64 into one
// pinned buffer and copied without blocking (from pageable memory where the device has no pinned
// memory); each result is a view of the one device buffer. Nothing waits for the device.
#pragma once

#include <vector>

#include <ATen/core/Tensor.h>

#include "csrc/rules/index_values.h"

namespace ascend_kv {

/// `tensors` with every defined one on `device`, int32/int64 and contiguous as the kernels take
/// them: those already there as they are (contiguous), the host ones moved in one copy as int64.
IndexTensors OnDevice(c10::ArrayRef<at::Tensor> tensors, const at::Device& device);

}  // namespace ascend_kv
