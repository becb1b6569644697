// The dtype table and the byte limits of the layouts: every rule about element types and sizes
// reads these numbers (docs/semantics.md, "Element types").
#pragma once

#include <cstdint>

#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

namespace ascend_kv {

/// Bytes in one hardware data block: a FRACTAL_NZ piece, and the unit rows are aligned to.
constexpr int64_t kBlockBytes = 32;
/// Largest NZ token row in bytes: 128 * 576 float16 elements, the limit Huawei documents.
constexpr int64_t kNzMaxRowBytes = 128 * 576 * 2;
/// reshape_and_cache in NZ: each head of K and V is below this many bytes.
constexpr int64_t kNzMaxHeadBytes = 98304;
/// block_size of an NZ cache is a multiple of this.
constexpr int64_t kNzBlockSizeMultiple = 16;
/// The kernels' arithmetic is 32-bit: output rows and token counts stay below this.
constexpr int64_t kInt32Max = 2147483647;

/// The element types of caches and of the tensors written to or read from them: every 1-, 2-
/// or 4-byte type serving code stores in a cache (the operations move bytes).
c10::ArrayRef<at::ScalarType> CacheDtypes();
/// The element types Huawei's ATB documents for these operations.
c10::ArrayRef<at::ScalarType> AtbCacheDtypes();
/// The dtypes of index tensors.
c10::ArrayRef<at::ScalarType> IndexDtypes();

bool IsCacheDtype(at::ScalarType dtype);
bool IsIndexDtype(at::ScalarType dtype);

/// Elements in one 32-byte NZ piece: E = 32 // itemsize (32, 16 or 8).
inline int64_t NzElements(int64_t itemsize) { return kBlockBytes / itemsize; }

}  // namespace ascend_kv
