// Allocators, device guard and PrivateUse1 hooks of the fake NPU (see fake_npu.h).
#include "fake_npu.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/Resize.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <unordered_set>

namespace fake_npu {

std::atomic<int64_t> transfers{0};
std::atomic<int64_t> uploads{0};
std::atomic<int64_t> blocking_uploads{0};

namespace {

// Wider than any vector access a kernel's host build makes through data_ptr().
constexpr size_t kAlignment = 512;

std::atomic<c10::DeviceIndex> configured_device_count{2};
std::atomic<int64_t> capacity{std::numeric_limits<int64_t>::max()};
std::atomic<int64_t> in_use{0};

std::atomic<bool> measuring{false};
std::atomic<int64_t> largest_host{0};
std::atomic<int64_t> largest_device{0};

// While measuring, `largest` becomes at least `nbytes`.
void note(std::atomic<int64_t>& largest, size_t nbytes) {
  if (!measuring.load()) return;
  const auto bytes = static_cast<int64_t>(nbytes);
  int64_t seen = largest.load();
  while (seen < bytes && !largest.compare_exchange_weak(seen, bytes)) {
  }
}

std::mutex recording_mutex;
std::unordered_set<std::string> recorded_names;
std::atomic<bool> recording_any{false};
std::vector<RecordedCall> recorded;
thread_local c10::DeviceIndex current_index = 0;

void* aligned_host_memory(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  void* memory = std::aligned_alloc(kAlignment, rounded);
  TORCH_CHECK(memory != nullptr, "fake NPU: out of host memory allocating ", nbytes, " bytes");
  return memory;
}

// What a device DataPtr owns: its own memory, or a host storage whose memory it borrows; and
// the storage format reported for it (per allocation, as torch_npu keeps it per storage).
struct Allocation {
  void* owned = nullptr;
  int64_t reserved = 0;  // bytes counted against the capacity
  c10::Storage borrowed;
  int format = kFormatNd;
  ~Allocation() {
    std::free(owned);
    in_use -= reserved;
  }
};

// Counts `nbytes` against the device's capacity, or fails as a device out of memory.
int64_t reserve(size_t nbytes) {
  const auto bytes = static_cast<int64_t>(nbytes);
  const int64_t before = in_use.fetch_add(bytes);
  if (bytes < 0 || before > capacity.load() - bytes) {
    in_use -= bytes;
    TORCH_CHECK_WITH(OutOfMemoryError, false, "fake NPU: out of device memory: tried to allocate ", nbytes,
                     " bytes with ", before, " of ", capacity.load(), " bytes in use");
  }
  return bytes;
}

void delete_allocation(void* context) { delete static_cast<Allocation*>(context); }

// The allocation behind a device tensor; nullptr for an empty storage (which holds no allocation).
Allocation* allocation_of(const at::Tensor& tensor) {
  TORCH_CHECK(tensor.device().is_privateuseone(), "fake NPU: expected a tensor on the NPU, got one on ",
              tensor.device());
  const c10::DataPtr& data = tensor.storage().data_ptr();
  if (data.get_deleter() != &delete_allocation) return nullptr;
  return static_cast<Allocation*>(data.get_context());
}

class DeviceAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    note(largest_device, nbytes);
    const int64_t reserved = reserve(nbytes);
    void* memory = nullptr;
    try {
      memory = aligned_host_memory(nbytes);
    } catch (...) {
      in_use -= reserved;
      throw;
    }
    auto* allocation = new Allocation;
    allocation->owned = memory;
    allocation->reserved = reserved;
    c10::Device device(c10::DeviceType::PrivateUse1, current_index);
    return {allocation->owned, allocation, &delete_allocation, device};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
};

// Pinned host memory: ordinary aligned host memory whose ranges are remembered, so that
// is_pinned() and non-blocking uploads can tell it from pageable memory.
class PinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* memory = aligned_host_memory(nbytes);
    if (memory != nullptr) {
      std::lock_guard<std::mutex> lock(mutex_);
      ranges_[reinterpret_cast<uintptr_t>(memory)] = nbytes;
    }
    return {memory, memory, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }

  bool contains(const void* data) {
    auto address = reinterpret_cast<uintptr_t>(data);
    std::lock_guard<std::mutex> lock(mutex_);
    auto after = ranges_.upper_bound(address);
    if (after == ranges_.begin()) return false;
    --after;
    return address < after->first + after->second;
  }

 private:
  static void release(void* memory);
  std::mutex mutex_;
  std::map<uintptr_t, size_t> ranges_;
};

// Host memory while measuring: torch's CPU allocator, each allocation's size noted.
class MeasuredCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    note(largest_host, nbytes);
    return base->allocate(nbytes);
  }
  c10::DeleterFnPtr raw_deleter() const override { return base->raw_deleter(); }
  void copy_data(void* dest, const void* src, std::size_t count) const override { base->copy_data(dest, src, count); }

  c10::Allocator* base = nullptr;
};

DeviceAllocator the_device_allocator;
PinnedAllocator the_pinned_allocator;
MeasuredCpuAllocator the_measured_cpu_allocator;
// Above the priority torch registers its CPU allocator with (0).
constexpr uint8_t kMeasuredPriority = 1;

void PinnedAllocator::release(void* memory) {
  {
    std::lock_guard<std::mutex> lock(the_pinned_allocator.mutex_);
    the_pinned_allocator.ranges_.erase(reinterpret_cast<uintptr_t>(memory));
  }
  std::free(memory);
}

void check_index(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < configured_device_count.load(), "fake NPU: device index ", int(index),
              " is out of range (", int(configured_device_count.load()), " devices)");
}

// A host wait: counted, since a real device would block the host here.
void wait_for_device() { ++transfers; }

struct GuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }
  c10::Device exchangeDevice(c10::Device device) const override {
    c10::Device previous = getDevice();
    setDevice(device);
    return previous;
  }
  c10::Device getDevice() const override { return {c10::DeviceType::PrivateUse1, current_index}; }
  void setDevice(c10::Device device) const override {
    if (device.has_index()) {
      check_index(device.index());
      current_index = device.index();
    }
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    if (device.has_index()) current_index = device.index();
  }
  c10::Stream getStream(c10::Device device) const override { return c10::Stream(c10::Stream::DEFAULT, device); }
  c10::Stream exchangeStream(c10::Stream stream) const override {
    return c10::Stream(c10::Stream::DEFAULT, stream.device());
  }
  c10::DeviceIndex deviceCount() const noexcept override { return configured_device_count.load(); }
  // One in-order stream per device whose work is done at launch: events and queries are trivial.
  void record(void**, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override { wait_for_device(); }
  void synchronizeEvent(void*) const override { wait_for_device(); }
  void synchronizeDevice(const c10::DeviceIndex) const override { wait_for_device(); }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);

struct Hooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return configured_device_count.load(); }
  void setCurrentDevice(c10::DeviceIndex index) const override { set_current_device(index); }
  c10::DeviceIndex getCurrentDevice() const override { return current_index; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    c10::DeviceIndex previous = current_index;
    set_current_device(index);
    return previous;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override { return exchangeDevice(index); }
  // Ops run their CPU kernels, so random ops draw from the CPU generator.
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    return at::detail::getDefaultCPUGenerator();
  }
  at::Generator getNewGenerator(c10::DeviceIndex) const override { return at::detail::createCPUGenerator(); }
  c10::Device getDeviceFromPtr(void*) const override { return {c10::DeviceType::PrivateUse1, current_index}; }
  bool isPinnedPtr(const void* data) const override { return is_pinned_host_pointer(data); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &the_pinned_allocator; }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    at::native::resize_bytes_cpu(storage.unsafeGetStorageImpl(), nbytes);
  }
};

[[maybe_unused]] const bool hooks_registered = [] {
  at::RegisterPrivateUse1HooksInterface(new Hooks);
  c10::SetAllocator(c10::DeviceType::PrivateUse1, &the_device_allocator);
  return true;
}();

}  // namespace

c10::Allocator* device_allocator() { return &the_device_allocator; }
bool is_pinned_host_pointer(const void* data) { return data != nullptr && the_pinned_allocator.contains(data); }

c10::DeviceIndex device_count() { return configured_device_count.load(); }
void set_device_count(c10::DeviceIndex count) {
  TORCH_CHECK(count >= 1, "fake NPU: device count must be at least 1, got ", int(count));
  configured_device_count = count;
}
c10::DeviceIndex current_device() { return current_index; }
void set_current_device(c10::DeviceIndex index) {
  check_index(index);
  current_index = index;
}

c10::Storage device_storage_over(const c10::Storage& host, c10::DeviceIndex index) {
  auto* allocation = new Allocation;
  allocation->borrowed = host;
  c10::Device device(c10::DeviceType::PrivateUse1, index);
  c10::DataPtr data(host.mutable_data(), allocation, &delete_allocation, device);
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), host.nbytes(),
                                                            std::move(data), &the_device_allocator, true));
}

int storage_format(const at::Tensor& tensor) {
  Allocation* allocation = allocation_of(tensor);
  return allocation == nullptr ? kFormatNd : allocation->format;
}

void set_storage_format(const at::Tensor& tensor, int format) {
  Allocation* allocation = allocation_of(tensor);
  TORCH_CHECK(allocation != nullptr, "fake NPU: cannot set the storage format of a tensor without memory");
  allocation->format = format;
}

void start_measuring() {
  largest_host = 0;
  largest_device = 0;
  if (the_measured_cpu_allocator.base == nullptr) {
    the_measured_cpu_allocator.base = c10::GetCPUAllocator();
  }
  c10::SetCPUAllocator(&the_measured_cpu_allocator, kMeasuredPriority);
  measuring = true;
}

std::pair<int64_t, int64_t> stop_measuring() {
  measuring = false;
  c10::SetCPUAllocator(the_measured_cpu_allocator.base, kMeasuredPriority);
  return {largest_host.load(), largest_device.load()};
}

int64_t memory_capacity() { return capacity.load(); }
void set_memory_capacity(int64_t bytes) {
  TORCH_CHECK(bytes >= 0, "fake NPU: the memory capacity must be >= 0, got ", bytes);
  capacity = bytes;
}
int64_t memory_in_use() { return in_use.load(); }

void start_recording(const std::vector<std::string>& names) {
  std::lock_guard<std::mutex> lock(recording_mutex);
  recorded_names = std::unordered_set<std::string>(names.begin(), names.end());
  recorded.clear();
  recording_any = !recorded_names.empty();
}

std::vector<RecordedCall> stop_recording() {
  std::lock_guard<std::mutex> lock(recording_mutex);
  recording_any = false;
  recorded_names.clear();
  return std::move(recorded);
}

bool is_recorded(const std::string& name) {
  if (!recording_any.load()) return false;
  std::lock_guard<std::mutex> lock(recording_mutex);
  return recorded_names.count(name) > 0;
}

void record(RecordedCall call) {
  std::lock_guard<std::mutex> lock(recording_mutex);
  if (recorded_names.count(call.name)) recorded.push_back(std::move(call));
}

}  // namespace fake_npu
