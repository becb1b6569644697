#include "csrc/rules/formats.h"

#include <algorithm>

#include "csrc/dispatch/kernels.h"
#include "csrc/rules/dtypes.h"
#include "csrc/rules/text.h"

namespace ascend_kv {
namespace {

constexpr int64_t kFractalNz = 29;

bool IsBaseFormat(int64_t format) { return format == 0 || format == 1 || format == 2 || format == 30; }

std::string FormatName(int64_t format)
{
    switch (format) {
        case 3: return "NC1HWC0";
        case 4: return "FRACTAL_Z";
        case 29: return "FRACTAL_NZ";
        case 32: return "NDC1HWC0";
        case 33: return "FRACTAL_Z_3D";
        default: return "format " + std::to_string(format);
    }
}

/// Why a FRACTAL_NZ cache's bytes are not where its shape and strides say, or empty when they are.
std::string NzStorageProblem(const at::Tensor& cache)
{
    const int64_t e = NzElements(cache.element_size());
    if (cache.element_size() != 1 && cache.element_size() != 2) {
        return "its dtype " + DtypeName(cache.scalar_type()) + " has 4-byte elements, whose FRACTAL_NZ fractal width "
               "ascend_kv does not know to be E = " + std::to_string(e);
    }
    if (cache.dim() != 4 || cache.size(3) != e) {
        return "its logical shape " + ShapeOf(cache) + " is not [num_blocks, T // E, block_size, E = " +
               std::to_string(e) + "] (a FRACTAL_NZ cache of logical shape [num_blocks, block_size, T] holds the bytes "
               "of [num_blocks, T // E, block_size, E], but addressed through its own strides: cast the cache in the "
               "NZ shape instead)";
    }
    if (cache.size(2) % kNzBlockSizeMultiple) {
        return "block_size (shape[2]) = " + std::to_string(cache.size(2)) +
               " is not a multiple of 16, so its fractals are padded";
    }
    if (!cache.is_contiguous()) {
        return "it is a strided view, whose storage fractals are not its rows";
    }
    return "";
}

}  // namespace

void RequireBaseFormats(c10::ArrayRef<Named> tensors, c10::ArrayRef<std::string> nz_caches)
{
    for (const Named& named : tensors) {
        const auto format = StorageFormat(named.tensor);
        if (!format || IsBaseFormat(*format)) {
            continue;
        }
        if (*format == kFractalNz && std::find(nz_caches.begin(), nz_caches.end(), named.name) != nz_caches.end()) {
            const std::string why = NzStorageProblem(named.tensor);
            TORCH_CHECK_VALUE(why.empty(), named.name, " is stored in the NPU's private format FRACTAL_NZ, and its "
                              "bytes are not where its shape and strides say: ", why, "; pass torch_npu.npu_format_cast(",
                              named.name, ", 2) (ND) or a cache made without a cast");
            continue;
        }
        TORCH_CHECK_VALUE(false, named.name, " is stored in the NPU's private format ", FormatName(*format),
                          ", whose bytes are not in the tensor's logical layout: pass torch_npu.npu_format_cast(",
                          named.name, ", 2) (ND) or a tensor made without a format cast");
    }
}

}  // namespace ascend_kv
