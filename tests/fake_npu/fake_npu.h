// The fake NPU: PyTorch's PrivateUse1 device backed by host memory, for tests without an NPU.
//
// device.cpp   allocators (device and pinned host), device guard, PrivateUse1 hooks, counters
// kernels.cpp  the kernels registered for PrivateUse1 and the boxed fallback for every other op
// bindings.cpp the Python functions (counters, storage formats, device state)
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fake_npu {

// ACL's aclFormat value of the base (ND) layout: the bytes are in the tensor's logical layout.
constexpr int kFormatNd = 2;

// Every point where the host waits for the device or reads device memory (device-to-host copies,
// scalar reads, data-dependent output shapes, explicit synchronisation).
extern std::atomic<int64_t> transfers;
// Every host-to-device copy; blocking_uploads counts those a real NPU would wait for (from
// pageable memory, or without non_blocking).
extern std::atomic<int64_t> uploads;
extern std::atomic<int64_t> blocking_uploads;

c10::Allocator* device_allocator();
// Device memory: an allocation that would take the bytes in use past the capacity (unlimited
// unless set) fails as a device's out-of-memory does, with c10::OutOfMemoryError.
int64_t memory_capacity();
void set_memory_capacity(int64_t bytes);
int64_t memory_in_use();
bool is_pinned_host_pointer(const void* data);

// Measuring: between start_measuring() and stop_measuring() the largest single allocation of host
// memory (through a CPU allocator that forwards to torch's, installed for the while) and of device
// memory, for tests that bound the temporaries of a call. stop_measuring returns (host, device).
void start_measuring();
std::pair<int64_t, int64_t> stop_measuring();

c10::DeviceIndex device_count();
void set_device_count(c10::DeviceIndex count);
c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex index);

// A device storage over the memory of a host storage, which it keeps alive (no copy).
c10::Storage device_storage_over(const c10::Storage& host, c10::DeviceIndex index);
// The storage format recorded with a device allocation (kFormatNd unless set).
int storage_format(const at::Tensor& tensor);
void set_storage_format(const at::Tensor& tensor, int format);

// Recording: while an op's name is recorded, each call of it keeps copies, in host memory, of
// its arguments as they were when it was called, with each argument's device ("" for a value).
// The ops run through the boxed fallback can be recorded, and aten::_copy_from.
struct RecordedCall {
  std::string name;
  std::vector<c10::IValue> arguments;
  std::vector<std::string> devices;
};
void start_recording(const std::vector<std::string>& names);
std::vector<RecordedCall> stop_recording();
bool is_recorded(const std::string& name);
void record(RecordedCall call);

}  // namespace fake_npu
