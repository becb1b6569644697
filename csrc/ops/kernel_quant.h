// A checked side's quantization (csrc/rules/quant.h) as the kernel table takes it.
#pragma once

#include "csrc/dispatch/kernels.h"
#include "csrc/rules/quant.h"

namespace ascend_kv {

/// `side` for the quantizing kernels: QuantScheme's values are the kernels' kQuant* codes; static
/// scale and offset contiguous (per() views usually are already), the scale cache as it is.
inline KernelQuantSide KernelSide(const QuantSide& side)
{
    KernelQuantSide k;
    k.scheme = static_cast<int64_t>(side.scheme);
    if (!side.Quantized()) {
        return k;
    }
    k.compute = side.compute;
    k.heads = side.heads.expect_int();
    k.head_size = side.head_size.expect_int();
    k.scale = side.scale.defined() ? side.scale.contiguous() : at::Tensor();
    k.offset = side.offset.defined() ? side.offset.contiguous() : at::Tensor();
    k.scale_cache = side.scale_cache;
    return k;
}

}  // namespace ascend_kv
