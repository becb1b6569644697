# Host (sim) build of the AscendC kernels: the kernel sources compiled with the system C++
# compiler against the host model of the AscendC API (ascendc/sim/include/kernel_operator.h),
# plus the host tiling and the C entry points Python calls through ctypes.
#
# Include it from a CMake project that enables CXX; it needs nothing set beforehand:
#   include(ascendc/cmake/sim.cmake)   ->  target ascend_kv_sim (SHARED)
# The same library is what ascend_kv/backends/sim.py builds on first use (same sources and
# flags); point ASCEND_KV_CACHE_DIR elsewhere to keep the two apart.

set(ASCEND_KV_ASCENDC_DIR "${CMAKE_CURRENT_LIST_DIR}/..")
find_package(Threads REQUIRED)

add_library(ascend_kv_sim SHARED
    "${ASCEND_KV_ASCENDC_DIR}/kernels/kv_cache.cpp"
    "${ASCEND_KV_ASCENDC_DIR}/kernels/paged_cache_load.cpp"
    "${ASCEND_KV_ASCENDC_DIR}/host/tiling.cpp"
    "${ASCEND_KV_ASCENDC_DIR}/sim/launch_sim.cpp"
)
# The model's kernel_operator.h must win over any other header of that name: first, and private.
target_include_directories(ascend_kv_sim BEFORE PRIVATE
    "${ASCEND_KV_ASCENDC_DIR}/sim/include"
    "${ASCEND_KV_ASCENDC_DIR}"
)
target_compile_features(ascend_kv_sim PRIVATE cxx_std_17)
set_target_properties(ascend_kv_sim PROPERTIES CXX_EXTENSIONS OFF POSITION_INDEPENDENT_CODE ON)
target_link_libraries(ascend_kv_sim PRIVATE Threads::Threads)
