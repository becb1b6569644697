/*
 * Host-side launchers of the two kernels in ascendc/kernels/.
 *
 * CANN's ascendc_library() (legacy CMake) and find_package(ASC) builds generate, for every
 * `extern "C" __global__ __aicore__` kernel, a launcher named aclrtlaunch_<kernel> taking the
 * core count, the stream and the kernel's arguments in order (GM pointers as void*). These are
 * our own declarations of the two we call, so the binding compiles without the generated
 * headers; the signatures must follow the kernels' parameter lists exactly.
 * Each returns 0 when the launch was queued.
 */
#ifndef ASCEND_KV_HOST_KERNEL_LAUNCH_H
#define ASCEND_KV_HOST_KERNEL_LAUNCH_H

#include <cstdint>

#include "acl/acl_base.h"  // aclrtStream

extern "C" {

/// ascendc/kernels/kv_cache.cpp: kv_cache_kernel(newKv, past, seqLen, readStart, writeStart, tiling).
///   newKv      [ntokens, rowBytes] bytes          past       [layers, batch, maxSeqLen, rowBytes] bytes
///   seqLen     [batch] int64                      readStart  [batch] int64
///   writeStart [batch] int64                      tiling     one ascend_kv::KvCacheTiling
uint32_t aclrtlaunch_kv_cache_kernel(uint32_t blockDim, aclrtStream stream, void* newKv, void* past, void* seqLen,
                                     void* readStart, void* writeStart, void* tiling);

/// ascendc/kernels/paged_cache_load.cpp: paged_cache_load_kernel(keyCache, valueCache, blockTable,
/// lens, outStart, firstColumn, key, value, tiling).
///   keyCache, valueCache  ND [numBlocks, blockSize, rowBytes] / NZ [numBlocks, rowBytes/32, blockSize, 32] bytes
///   blockTable [batch, maxBlocks] int64            lens, outStart, firstColumn  [batch] int64
///   key [keyRows, keyRowBytes] bytes               value [valueRows, valueRowBytes] bytes
///   tiling     one ascend_kv::PagedLoadTiling
uint32_t aclrtlaunch_paged_cache_load_kernel(uint32_t blockDim, aclrtStream stream, void* keyCache, void* valueCache,
                                             void* blockTable, void* lens, void* outStart, void* firstColumn,
                                             void* key, void* value, void* tiling);
}

#endif  // ASCEND_KV_HOST_KERNEL_LAUNCH_H
