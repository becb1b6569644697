// The fake NPU's kernels: the few that manage memory and metadata are registered for PrivateUse1
// directly; every other ATen op runs its CPU kernel over the device tensors' own memory through
// one boxed fallback (see fake_npu.h).
#include "fake_npu.h"

#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/is_set_to_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cstring>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace fake_npu {
namespace {

constexpr auto kNpu = c10::DeviceType::PrivateUse1;

// Host tensors over device memory, and device tensors over host results, for one op call. Each
// device storage gets one host storage (and back), so the CPU kernel sees the arguments alias
// each other exactly as they do on the device, and views it returns map to the device storage.
class HostMirror {
 public:
  explicit HostMirror(c10::DeviceIndex index) : index_(index) {}

  // The host tensor over `tensor`'s memory (`tensor` itself unless it is on the device).
  at::Tensor host(const at::Tensor& tensor) {
    if (!tensor.defined() || !tensor.device().is_privateuseone()) return tensor;
    return over(tensor, host_storage(tensor.storage()), c10::DispatchKey::CPU);
  }

  // The device tensor over a host result: a view of a device argument's storage, or new device
  // memory that borrows the host result's (no copy).
  at::Tensor device(const at::Tensor& tensor) {
    if (!tensor.defined() || tensor.device().is_privateuseone()) return tensor;
    TORCH_CHECK(tensor.device().is_cpu() && tensor.layout() == at::kStrided,
                "fake NPU: a CPU kernel returned a tensor the fake NPU cannot hold: ", tensor.toString());
    return over(tensor, device_storage(tensor.storage()), c10::DispatchKey::PrivateUse1);
  }

  // Makes a mutated device argument match what the CPU kernel left in its host tensor: new
  // sizes and strides, and new memory if the kernel resized or replaced the storage.
  void write_back(const at::Tensor& device_tensor, const at::Tensor& host_tensor) {
    if (!device_tensor.defined() || !device_tensor.device().is_privateuseone()) return;
    c10::TensorImpl* impl = device_tensor.unsafeGetTensorImpl();
    const c10::Storage& result = host_tensor.storage();
    if (result.unsafeGetStorageImpl() != host_storage(device_tensor.storage()).unsafeGetStorageImpl()) {
      impl->set_storage_keep_dtype(device_storage(result));
    } else if (result.data() != device_tensor.storage().data()) {  // resized on the host
      c10::StorageImpl* storage = device_tensor.storage().unsafeGetStorageImpl();
      at::native::resize_bytes_cpu(storage, result.nbytes());
      if (result.nbytes() > 0) std::memcpy(storage->mutable_data(), result.data(), result.nbytes());
    }
    if (device_tensor.sizes() != host_tensor.sizes() || device_tensor.strides() != host_tensor.strides() ||
        device_tensor.storage_offset() != host_tensor.storage_offset()) {
      impl->set_sizes_and_strides(host_tensor.sizes(), host_tensor.strides(), host_tensor.storage_offset());
    }
  }

 private:
  c10::Storage host_storage(const c10::Storage& device) {
    for (const auto& pair : pairs_) {
      if (pair.first.unsafeGetStorageImpl() == device.unsafeGetStorageImpl()) return pair.second;
    }
    // The host storage keeps the device storage alive through its DataPtr's context.
    auto* keep_alive = new c10::Storage(device);
    c10::DataPtr data(device.mutable_data(), keep_alive, [](void* kept) { delete static_cast<c10::Storage*>(kept); },
                      c10::Device(c10::DeviceType::CPU));
    c10::Storage host(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), device.nbytes(),
                                                            std::move(data), c10::GetCPUAllocator(), true));
    pairs_.emplace_back(device, host);
    return host;
  }

  c10::Storage device_storage(const c10::Storage& host) {
    for (const auto& pair : pairs_) {
      if (pair.second.unsafeGetStorageImpl() == host.unsafeGetStorageImpl()) return pair.first;
    }
    c10::Storage device = device_storage_over(host, index_);
    pairs_.emplace_back(device, host);
    return device;
  }

  static at::Tensor over(const at::Tensor& like, c10::Storage storage, c10::DispatchKey key) {
    auto result = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(key), like.dtype());
    c10::TensorImpl* impl = result.unsafeGetTensorImpl();
    impl->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
    impl->_set_conj(like.is_conj());
    impl->_set_neg(like.is_neg());
    return result;
  }

  c10::DeviceIndex index_;
  std::vector<std::pair<c10::Storage, c10::Storage>> pairs_;  // (device, host)
};

// ---------------------------------------------------------------------------------------------
// What a real NPU would have to read back to the host to run an op. An op whose output shape
// depends on the input values needs those values on the host before it can allocate the output;
// the rest run on the device without the host waiting.

// Output size is a count of values found: nonzero (also behind argwhere, where(cond) and
// nonzero_numpy), masked_select, the unique family; bincount's length is the largest value plus
// one; equal returns a host bool. Not here, as their sizes come from shapes: nonzero_static,
// masked_scatter, indexing with integer tensors (bounds are checked on the device).
const std::unordered_set<std::string>& ops_reading_values() {
  static const std::unordered_set<std::string> names = {
      "aten::nonzero", "aten::masked_select", "aten::_unique", "aten::_unique2", "aten::unique_dim",
      "aten::unique_consecutive", "aten::unique_dim_consecutive", "aten::bincount", "aten::equal",
  };
  return names;
}

bool is_device_mask(const c10::IValue& index) {
  if (!index.isTensor()) return false;
  const at::Tensor& tensor = index.toTensor();
  return tensor.device().is_privateuseone() && (tensor.scalar_type() == at::kBool || tensor.scalar_type() == at::kByte);
}

c10::IValue argument(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args, const char* name) {
  const auto position = schema.argumentIndexWithName(name);
  return position ? args[*position] : c10::IValue();
}

// Writing through advanced indexing expands each boolean mask with nonzero (a host mask costs
// an upload, not a read). The one exception, as in ATen's _index_put_impl_: a single mask on
// self's device with a one-element host value becomes a masked_fill_, which needs no values.
// (Reading, aten::index, runs its shape function on the device first, whose nonzero is counted as
// itself.)
int64_t mask_expansions(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args) {
  const c10::IValue indices = argument(schema, args, "indices");
  if (!indices.isList()) return 0;
  int64_t masks = 0, defined = 0;
  for (const c10::IValue& index : indices.toListRef()) {
    defined += index.isTensor() ? 1 : 0;
    masks += is_device_mask(index) ? 1 : 0;
  }
  const at::Tensor values = argument(schema, args, "values").toTensor();
  const bool masked_fill = masks == 1 && defined == 1 && !argument(schema, args, "accumulate").toBool() &&
                           values.numel() == 1 && values.is_cpu();
  return masked_fill ? 0 : masks;
}

int64_t value_reads(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args) {
  const std::string& name = schema.name();
  if (ops_reading_values().count(name)) return 1;
  if (name == "aten::repeat_interleave") {  // the output length is the sum of the repeats
    return argument(schema, args, "repeats").isTensor() && argument(schema, args, "output_size").isNone() ? 1 : 0;
  }
  if (name == "aten::histc") {  // min == max: the range is taken from the values
    return argument(schema, args, "min").toScalar().toDouble() == argument(schema, args, "max").toScalar().toDouble()
               ? 1
               : 0;
  }
  if (name == "aten::_index_put_impl_") return mask_expansions(schema, args);
  return 0;
}

// ---------------------------------------------------------------------------------------------
// The boxed fallback.

// Advanced indexing takes index tensors from the host and moves them to self's device: writes
// here (counted as uploads), reads in their shape function on the device (counted by _copy_from).
// Every other op needs all its non-scalar tensors on one device.
bool takes_host_indices(const std::string& name) { return name == "aten::index" || name == "aten::_index_put_impl_"; }

template <typename Visit>
void for_each_tensor(const c10::IValue& value, Visit&& visit) {
  if (value.isTensor()) {
    visit(value.toTensor());
  } else if (value.isList()) {
    for (const c10::IValue& element : value.toListRef()) {
      if (element.isTensor()) visit(element.toTensor());
    }
  }
}

template <typename Convert>
c10::IValue map_tensors(const c10::IValue& value, Convert&& convert) {
  if (value.isTensor()) return convert(value.toTensor());
  if (!value.isList()) return value;
  c10::impl::GenericList list = value.toList().copy();  // keeps the element type the schema expects
  for (size_t k = 0; k < list.size(); ++k) {
    c10::IValue element = list.get(k);
    if (element.isTensor()) list.set(k, convert(element.toTensor()));
  }
  return list;
}

// A copy of `value`'s tensors (already host tensors) as they are now, for a recorded call.
c10::IValue snapshot(const c10::IValue& value) {
  return map_tensors(value, [](const at::Tensor& tensor) { return tensor.defined() ? tensor.clone() : tensor; });
}

// The device of `value`'s first defined tensor, "" for a value holding none.
std::string device_name(const c10::IValue& value) {
  std::string name;
  for_each_tensor(value, [&](const at::Tensor& tensor) {
    if (name.empty() && tensor.defined()) name = tensor.device().str();
  });
  return name;
}

c10::DeviceIndex device_of_call(const std::vector<c10::IValue>& args) {
  std::optional<c10::DeviceIndex> index;
  for (const c10::IValue& value : args) {
    for_each_tensor(value, [&](const at::Tensor& tensor) {
      if (!index && tensor.defined() && tensor.device().is_privateuseone()) index = tensor.device().index();
    });
    if (!index && value.isDevice() && value.toDevice().is_privateuseone() && value.toDevice().has_index()) {
      index = value.toDevice().index();
    }
  }
  return index.value_or(current_device());
}

void check_devices(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args, c10::DeviceIndex index) {
  const bool indexing = takes_host_indices(schema.name());
  const bool uploads_here = schema.name() == "aten::_index_put_impl_";
  for (size_t i = 0; i < args.size(); ++i) {
    for_each_tensor(args[i], [&](const at::Tensor& tensor) {
      if (!tensor.defined() || tensor.device().is_privateuseone()) return;
      const bool host_scalar = tensor.device().is_cpu() && tensor.dim() == 0;
      if (host_scalar) return;  // passed by value, as TensorIterator does on devices
      if (indexing && tensor.device().is_cpu() && schema.arguments()[i].name() == "indices") {
        if (uploads_here) {  // moved to the device with a blocking copy
          ++uploads;
          ++blocking_uploads;
        }
        return;
      }
      TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, npu:",
                  int(index), " and ", tensor.device(), "! (", schema.name(), ", argument '",
                  schema.arguments()[i].name(), "')");
    });
  }
}

void run_on_host(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const auto& arguments = schema.arguments();
  const size_t first = stack->size() - arguments.size();
  const std::vector<c10::IValue> device_args(stack->begin() + static_cast<std::ptrdiff_t>(first), stack->end());
  const c10::DeviceIndex index = device_of_call(device_args);
  check_devices(schema, device_args, index);
  transfers += value_reads(schema, device_args);

  HostMirror mirror(index);
  std::vector<c10::IValue> host_args;
  host_args.reserve(device_args.size());
  for (const c10::IValue& value : device_args) {
    if (value.isDevice() && value.toDevice().is_privateuseone()) {
      host_args.emplace_back(c10::Device(c10::DeviceType::CPU));
    } else {
      host_args.push_back(map_tensors(value, [&](const at::Tensor& tensor) { return mirror.host(tensor); }));
    }
  }
  if (is_recorded(schema.name())) {
    RecordedCall call{schema.name(), {}, {}};
    for (size_t i = 0; i < host_args.size(); ++i) {
      call.arguments.push_back(snapshot(host_args[i]));
      call.devices.push_back(device_name(device_args[i]));
    }
    record(std::move(call));
  }
  std::copy(host_args.begin(), host_args.end(), stack->begin() + static_cast<std::ptrdiff_t>(first));
  {
    c10::DeviceGuard guard(c10::Device(kNpu, index));
    op.callBoxed(stack);
  }

  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::AliasInfo* alias = arguments[i].alias_info();
    if (alias == nullptr || !alias->isWrite()) continue;
    std::vector<at::Tensor> device_tensors, host_tensors;
    for_each_tensor(device_args[i], [&](const at::Tensor& tensor) { device_tensors.push_back(tensor); });
    for_each_tensor(host_args[i], [&](const at::Tensor& tensor) { host_tensors.push_back(tensor); });
    for (size_t k = 0; k < device_tensors.size(); ++k) mirror.write_back(device_tensors[k], host_tensors[k]);
  }

  const auto& returns = schema.returns();
  const size_t first_return = stack->size() - returns.size();
  for (size_t j = 0; j < returns.size(); ++j) {
    c10::IValue& result = (*stack)[first_return + j];
    const c10::AliasInfo* alias = returns[j].alias_info();
    std::optional<size_t> mutated;
    if (alias != nullptr && alias->isWrite()) {
      for (size_t i = 0; i < arguments.size() && !mutated; ++i) {
        const c10::AliasInfo* argument_alias = arguments[i].alias_info();
        if (argument_alias != nullptr && argument_alias->beforeSets() == alias->beforeSets()) mutated = i;
      }
    }
    result = mutated ? device_args[*mutated]
                     : map_tensors(result, [&](const at::Tensor& tensor) { return mirror.device(tensor); });
  }
}

// ---------------------------------------------------------------------------------------------
// Kernels registered directly.

void check_dense_unpinned(std::optional<at::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(layout.value_or(at::kStrided) == at::kStrided, "fake NPU: only strided tensors are supported, got ",
              *layout);
  TORCH_CHECK(!pin_memory.value_or(false), "Only dense CPU tensors can be pinned");
}

c10::DeviceIndex index_of(std::optional<at::Device> device) {
  return device && device->has_index() ? device->index() : current_device();
}

at::Tensor empty_memory_format(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format) {
  check_dense_unpinned(layout, pin_memory);
  c10::DeviceGuard guard(c10::Device(kNpu, index_of(device)));
  return at::detail::empty_generic(size, device_allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(at::IntArrayRef size, at::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout> layout, std::optional<at::Device> device,
                         std::optional<bool> pin_memory) {
  check_dense_unpinned(layout, pin_memory);
  c10::DeviceGuard guard(c10::Device(kNpu, index_of(device)));
  return at::detail::empty_strided_generic(size, stride, device_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

// Copies between the host and the device, or within the device: all are memory copies here;
// the direction decides what is counted.
at::Tensor copy_from(const at::Tensor& source, const at::Tensor& destination, bool non_blocking) {
  const bool from_device = source.device().is_privateuseone();
  const bool to_device = destination.device().is_privateuseone();
  TORCH_CHECK((from_device || source.device().is_cpu()) && (to_device || destination.device().is_cpu()),
              "fake NPU: copies run between the NPU and the CPU only, got ", source.device(), " to ",
              destination.device());
  if (from_device && !to_device) ++transfers;
  if (to_device && !from_device) {
    ++uploads;
    if (!(non_blocking && is_pinned_host_pointer(source.storage().data()))) ++blocking_uploads;
  }
  HostMirror mirror(to_device ? destination.device().index() : source.device().index());
  if (is_recorded("aten::_copy_from")) {
    record({"aten::_copy_from", {mirror.host(source).clone(), mirror.host(destination).clone(), non_blocking},
            {source.device().str(), destination.device().str(), ""}});
  }
  mirror.host(destination).copy_(mirror.host(source));
  return destination;
}

at::Tensor copy_from_and_resize(const at::Tensor& source, const at::Tensor& destination) {
  destination.resize_(source.sizes());
  return copy_from(source, destination, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  ++transfers;
  return at::_local_scalar_dense(HostMirror(self.device().index()).host(self));
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage empty(c10::Storage::use_byte_size_t(), 0, device_allocator(), true);
  return self.set_(empty, 0, {0}, {});
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("resize_", TORCH_FN(at::native::resize_));
  m.impl("set_.source_Storage", TORCH_FN(at::native::set_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(at::native::set_storage_cpu_));
  m.impl("set_", TORCH_FN(set_empty));
  m.impl("is_set_to", TORCH_FN(at::native::is_set_to));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
}

// _copy_from reads conjugate and negative views itself (the host copy resolves the bits), as
// copy_ does; without this, the two bits' fallbacks would materialise through copy_ again.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) { m.impl("_copy_from", torch::CppFunction::makeFallthrough()); }
TORCH_LIBRARY_IMPL(aten, Negative, m) { m.impl("_copy_from", torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&run_on_host>()); }

}  // namespace
}  // namespace fake_npu
