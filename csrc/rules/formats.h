// The NPU's private storage formats: which tensors the operations may address through their
// strides. An NPU tensor cast to a private format (e.g. FRACTAL_NZ by npu_format_cast) keeps its
// logical shape while its bytes sit elsewhere; the operations address the logical layout only.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include "csrc/rules/tensors.h"

namespace ascend_kv {

/// ValueError for an NPU tensor stored in a private format. The tensors named in `nz_caches` (the
/// caches of an NZ call) may be FRACTAL_NZ when that storage holds their logical bytes: shape
/// [num_blocks, T // E, block_size, E] with E the 32-byte fractal width of a 1- or 2-byte type,
/// block_size a multiple of 16, contiguous (as torch_npu's tests cast it).
void RequireBaseFormats(c10::ArrayRef<Named> tensors, c10::ArrayRef<std::string> nz_caches = {});

}  // namespace ascend_kv
