// Which tensors of a call may share memory: a written tensor shares no byte with a tensor the call
// reads while writing, nor with the call's other written tensors. The test is on address ranges
// and, where ranges meet, on interleaved windows: two views that split one buffer's rows or
// columns (K and V halves, MLA's column slices) share no byte.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include <ATen/core/Tensor.h>

#include "csrc/rules/tensors.h"

namespace ascend_kv {

/// Whether two non-empty tensors on one device may share a byte: their address ranges meet and
/// they are not interleaved apart. Rarer views that share no byte may still answer true.
bool MayShareMemory(const at::Tensor& a, const at::Tensor& b);

/// ValueError when output `out` may share memory with a tensor in `inputs`, which the call reads
/// while it writes `out` (absent and empty tensors, and tensors on other devices, are skipped).
void RequireApart(std::string_view name, const at::Tensor& out, c10::ArrayRef<Named> inputs);

/// ValueError when two written tensors may share memory: which write lands would be undefined.
void RequireSeparateOutputs(std::string_view first_name, const at::Tensor& first, std::string_view name,
                            const at::Tensor& out);

/// ValueError when two of `outputs`, which one call writes, may share memory (the first pair in
/// argument order is named). A sweep over them sorted by first address compares only those whose
/// address ranges meet (per-layer views of one buffer: neighbours), about one comparison each.
void RequireOutputsApart(c10::ArrayRef<Named> outputs);

}  // namespace ascend_kv
