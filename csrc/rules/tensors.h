// The rules every operation applies to its tensors: dtypes, ranks, devices, written tensors and
// index tensors. Each raises TypeError (TORCH_CHECK_TYPE: a wrong type or dtype) or ValueError
// (TORCH_CHECK_VALUE: a wrong shape or value) naming the argument, with what was expected and
// what was given; none writes anything.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

namespace ascend_kv {

/// A tensor argument and the name the messages give it. An undefined tensor is an absent one.
struct Named {
    std::string_view name;
    const at::Tensor& tensor;
};

/// TypeError unless `t` holds its elements in memory as a dense tensor (strided, not quantized);
/// meta tensors only with `allow_meta` (a call that computes shapes).
void RequireData(std::string_view name, const at::Tensor& t, bool allow_meta);

/// TypeError unless t.dtype is one of `allowed`.
void RequireDtype(std::string_view name, const at::Tensor& t, c10::ArrayRef<at::ScalarType> allowed);

/// TypeError unless `t` has a cache element type (rules/dtypes.h).
void RequireCacheDtype(std::string_view name, const at::Tensor& t);

/// TypeError unless `tokens` has the dtype of the cache it is written to or read from.
void RequireSameDtype(std::string_view name, const at::Tensor& t, std::string_view cache_name,
                      const at::Tensor& cache);

/// ValueError unless `t` has one of the ranks `ndims`; `shape` says what it must be.
void RequireNdim(std::string_view name, const at::Tensor& t, std::initializer_list<int64_t> ndims,
                 std::string_view shape);

/// ValueError when a tensor written in place would be an autograd or inference-mode error, or has
/// elements sharing memory (an expand() view: which write lands would be undefined).
void RequireWritable(std::string_view name, const at::Tensor& t);

/// Whether no two elements of `t` share memory (its strides, sorted, each pass the span of the smaller ones).
bool HasDistinctElements(const at::Tensor& t);

/// The one device every defined tensor is on, or ValueError naming the odd one out.
at::Device RequireSameDevice(c10::ArrayRef<Named> tensors);

/// `t` an int32/int64 index tensor of rank `ndim` (1: [batch], 2: [batch, max_blocks]); a meta
/// tensor only with `allow_meta`.
void RequireIndexTensor(std::string_view name, const at::Tensor& t, int64_t ndim = 1, bool allow_meta = true);

/// ValueError unless the 1-D index tensor `t` has `expected` entries; `why` says where that count comes from.
void RequireEntries(std::string_view name, const at::Tensor& t, const c10::SymInt& expected, std::string_view why);

/// `t` a one-element integer tensor (a layer id read by the kernels, or on the host); a meta
/// tensor only with `allow_meta`.
void RequireScalarIndexTensor(std::string_view name, const at::Tensor& t, bool allow_meta = true);

/// ValueError unless every defined index tensor is on the host or on the data's device.
void RequireIndexDevices(const at::Device& data_device, c10::ArrayRef<Named> tensors);

/// "a float16 tensor of shape (2, 3)": how a message describes a tensor given where another was expected.
std::string Describe(const at::Tensor& t);

}  // namespace ascend_kv
