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
bool is_pinned_host_pointer(const void* data);

c10::DeviceIndex device_count();
void set_device_count(c10::DeviceIndex count);
c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex index);

// A device storage over the memory of a host storage, which it keeps alive (no copy).
c10::Storage device_storage_over(const c10::Storage& host, c10::DeviceIndex index);
// The storage format recorded with a device allocation (kFormatNd unless set).
int storage_format(const at::Tensor& tensor);
void set_storage_format(const at::Tensor& tensor, int format);

}  // namespace fake_npu
