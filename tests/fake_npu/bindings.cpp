// The fake NPU's Python functions (the module tests/fake_npu/__init__.py wraps them).
#include "fake_npu.h"

#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/extension.h>

namespace fake_npu {
namespace {

int64_t count(const std::atomic<int64_t>& counter) { return counter.load(); }

}  // namespace
}  // namespace fake_npu

// The storage format of a tensor, for the operators of ascend_kv (which ask a runtime's own
// function, as they ask torch_npu's on an NPU): install() registers its address with them.
extern "C" int64_t ascend_kv_fake_npu_storage_format(const at::Tensor& tensor)
{
  return fake_npu::storage_format(tensor);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  using namespace fake_npu;
  module.def("transfers", [] { return count(transfers); });
  module.def("uploads", [] { return count(uploads); });
  module.def("blocking_uploads", [] { return count(blocking_uploads); });
  module.def("reset", [] {
    transfers = 0;
    uploads = 0;
    blocking_uploads = 0;
  });
  module.def("synchronize", [] { ++transfers; });
  module.def("device_count", [] { return int(device_count()); });
  module.def("set_device_count", [](int count) { set_device_count(static_cast<c10::DeviceIndex>(count)); });
  module.def("current_device", [] { return int(current_device()); });
  module.def("set_device", [](int index) { set_current_device(static_cast<c10::DeviceIndex>(index)); });
  module.def("storage_format", &storage_format);
  module.def("set_storage_format", &set_storage_format);
  module.def("memory_capacity", &memory_capacity);
  module.def("set_memory_capacity", &set_memory_capacity);
  module.def("memory_in_use", &memory_in_use);
  module.def("start_measuring", &start_measuring);
  module.def("stop_measuring", &stop_measuring);
  module.def("start_recording", &start_recording);
  module.def("stop_recording", [] {
    py::list calls;
    for (RecordedCall& call : stop_recording()) {
      py::list arguments;
      for (c10::IValue& argument : call.arguments) arguments.append(torch::jit::toPyObject(std::move(argument)));
      calls.append(py::make_tuple(call.name, arguments, call.devices));
    }
    return calls;
  });
  module.attr("FORMAT_ND") = kFormatNd;
}
