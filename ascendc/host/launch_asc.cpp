/*
 * Launchers of the two kernels for CANN's ASC-language builds (find_package(ASC)), where no
 * aclrtlaunch_* functions are generated: one translation unit with the kernels and the
 * <<<>>> launches, defining the functions host/kernel_launch.h declares (the legacy
 * ascendc_library() build generates the same functions itself and does not compile this file).
 */
#include "../kernels/kv_cache.cpp"
#include "../kernels/paged_cache_load.cpp"
#include "kernel_launch.h"

extern "C" uint32_t aclrtlaunch_kv_cache_kernel(uint32_t blockDim, aclrtStream stream, void* newKv, void* past,
                                                void* seqLen, void* readStart, void* writeStart, void* tiling)
{
    kv_cache_kernel<<<blockDim, nullptr, stream>>>(static_cast<GM_ADDR>(newKv), static_cast<GM_ADDR>(past),
                                                   static_cast<GM_ADDR>(seqLen), static_cast<GM_ADDR>(readStart),
                                                   static_cast<GM_ADDR>(writeStart), static_cast<GM_ADDR>(tiling));
    return 0;
}

extern "C" uint32_t aclrtlaunch_paged_cache_load_kernel(uint32_t blockDim, aclrtStream stream, void* keyCache,
                                                        void* valueCache, void* blockTable, void* lens,
                                                        void* outStart, void* firstColumn, void* key, void* value,
                                                        void* tiling)
{
    paged_cache_load_kernel<<<blockDim, nullptr, stream>>>(
        static_cast<GM_ADDR>(keyCache), static_cast<GM_ADDR>(valueCache), static_cast<GM_ADDR>(blockTable),
        static_cast<GM_ADDR>(lens), static_cast<GM_ADDR>(outStart), static_cast<GM_ADDR>(firstColumn),
        static_cast<GM_ADDR>(key), static_cast<GM_ADDR>(value), static_cast<GM_ADDR>(tiling));
    return 0;
}
