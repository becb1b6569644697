# The host build of the AscendC kernels: target ascend_kv_host, the op library
# libascend_kv_host.so that registers torch.ops.ascend_kv_host.* for CPU and PrivateUse1.
# The kernel sources compile with the system C++ compiler against the host model of the AscendC
# API (sim/include/kernel_operator.h), together with the tiling, the shared op binding and the
# launcher that runs the kernels on the model (sim/launch_host.cpp).
#
# Needs torch's CMake config: CMAKE_PREFIX_PATH=$(python -c "import torch; print(torch.utils.cmake_prefix_path)").
# Set ASCEND_KV_HOST_REQUIRED to fail when torch is missing (else the target is skipped, with a message).
# ascendc/CMakeLists.txt builds only this target (what ascend_kv/backends/sim.py runs); the
# top-level CMakeLists.txt includes it next to the NPU targets.

set(ASCEND_KV_ASCENDC_DIR "${CMAKE_CURRENT_LIST_DIR}/..")

if(ASCEND_KV_HOST_REQUIRED)
  find_package(Torch REQUIRED)
else()
  find_package(Torch QUIET)
endif()
if(NOT Torch_FOUND)
  message(STATUS "ascend_kv: torch's CMake config not found (set CMAKE_PREFIX_PATH to torch.utils.cmake_prefix_path): no host target")
  return()
endif()
find_package(Threads REQUIRED)

add_library(ascend_kv_host SHARED
  "${ASCEND_KV_ASCENDC_DIR}/kernels/kv_cache.cpp"
  "${ASCEND_KV_ASCENDC_DIR}/kernels/paged_cache_load.cpp"
  "${ASCEND_KV_ASCENDC_DIR}/kernels/reshape_and_cache.cpp"
  "${ASCEND_KV_ASCENDC_DIR}/kernels/block_copy.cpp"
  "${ASCEND_KV_ASCENDC_DIR}/host/tiling.cpp"
  "${ASCEND_KV_ASCENDC_DIR}/host/torch_binding.cpp"
  "${ASCEND_KV_ASCENDC_DIR}/sim/launch_host.cpp")
# The model's kernel_operator.h must win over any other header of that name: first, and private.
target_include_directories(ascend_kv_host BEFORE PRIVATE
  "${ASCEND_KV_ASCENDC_DIR}/sim/include"
  "${ASCEND_KV_ASCENDC_DIR}")
target_compile_definitions(ascend_kv_host PRIVATE ASCEND_KV_OP_NAMESPACE=ascend_kv_host ASCEND_KV_HOST_BUILD)
target_compile_features(ascend_kv_host PRIVATE cxx_std_17)
set_target_properties(ascend_kv_host PROPERTIES CXX_EXTENSIONS OFF POSITION_INDEPENDENT_CODE ON)
target_link_libraries(ascend_kv_host PRIVATE ${TORCH_LIBRARIES} Threads::Threads)
