#include "csrc/rules/tensors.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <c10/core/InferenceMode.h>

#include "csrc/rules/dtypes.h"
#include "csrc/rules/text.h"

namespace ascend_kv {

void RequireData(std::string_view name, const at::Tensor& t, bool allow_meta)
{
    TORCH_CHECK_TYPE(t.layout() == at::kStrided, name, " must be a dense (strided) tensor, got layout torch.",
                     t.layout() == at::kSparse ? "sparse_coo" : c10::str(t.layout()));
    TORCH_CHECK_TYPE(!t.is_quantized(), name, " must hold data, got a quantized tensor");
    TORCH_CHECK_TYPE(allow_meta || !t.is_meta(), name, " must hold data, got a meta tensor");
}

void RequireDtype(std::string_view name, const at::Tensor& t, c10::ArrayRef<at::ScalarType> allowed)
{
    const auto dtype = t.scalar_type();
    TORCH_CHECK_TYPE(std::find(allowed.begin(), allowed.end(), dtype) != allowed.end(), name, " must have dtype ",
                     DtypeList(allowed), ", got ", DtypeName(dtype));
}

void RequireCacheDtype(std::string_view name, const at::Tensor& t)
{
    if (!IsCacheDtype(t.scalar_type())) {
        RequireDtype(name, t, CacheDtypes());
    }
}

void RequireSameDtype(std::string_view name, const at::Tensor& t, std::string_view cache_name,
                      const at::Tensor& cache)
{
    TORCH_CHECK_TYPE(t.scalar_type() == cache.scalar_type(), name, ".dtype must equal ", cache_name, ".dtype = ",
                     TorchDtype(cache.scalar_type()), ", got ", TorchDtype(t.scalar_type()));
}

void RequireNdim(std::string_view name, const at::Tensor& t, std::initializer_list<int64_t> ndims,
                 std::string_view shape)
{
    TORCH_CHECK_VALUE(std::find(ndims.begin(), ndims.end(), t.dim()) != ndims.end(), name, " must be ", shape,
                      ", got shape ", ShapeOf(t));
}

bool HasDistinctElements(const at::Tensor& t)
{
    if (t.is_contiguous() || t.numel() == 0) {
        return true;
    }
    std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of the dims of size > 1
    for (int64_t d = 0; d < t.dim(); ++d) {
        if (t.size(d) > 1) {
            dims.emplace_back(t.stride(d), t.size(d));
        }
    }
    std::sort(dims.begin(), dims.end());
    int64_t span = 0;  // the largest offset the dims seen so far reach
    for (const auto& [stride, size] : dims) {
        if (stride <= span) {
            return false;
        }
        span += stride * (size - 1);
    }
    return true;
}

void RequireWritable(std::string_view name, const at::Tensor& t)
{
    TORCH_CHECK_VALUE(!t.requires_grad(), name, " requires grad, but it is written in place and the operation is not "
                      "differentiable: pass ", name, ".detach()");
    TORCH_CHECK_VALUE(!t.is_inference() || c10::InferenceMode::is_enabled(), name,
                      " was made under torch.inference_mode(), and PyTorch forbids updating such a tensor in place "
                      "outside it: call inside torch.inference_mode()");
    if (t.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) {
        return;  // shapes only: the eager call checks the strides
    }
    TORCH_CHECK_VALUE(HasDistinctElements(t), name, " is written in place, so each element needs its own memory, "
                      "but shape ", ShapeOf(t), " with strides ", Tuple(t.strides()), " maps several elements to one "
                      "place (an expand() view?): pass a tensor with distinct elements");
}

at::Device RequireSameDevice(c10::ArrayRef<Named> tensors)
{
    const Named* first = nullptr;
    for (const Named& named : tensors) {
        if (!named.tensor.defined()) {
            continue;
        }
        if (first == nullptr) {
            first = &named;
            continue;
        }
        TORCH_CHECK_VALUE(named.tensor.device() == first->tensor.device(), named.name, " is on ",
                          named.tensor.device(), " but ", first->name, " is on ", first->tensor.device(),
                          ": all tensor arguments must be on one device");
    }
    TORCH_INTERNAL_ASSERT(first != nullptr, "RequireSameDevice needs a tensor");
    return first->tensor.device();
}

void RequireIndexTensor(std::string_view name, const at::Tensor& t, int64_t ndim, bool allow_meta)
{
    RequireData(name, t, allow_meta);
    RequireDtype(name, t, IndexDtypes());
    TORCH_CHECK_VALUE(t.dim() == ndim, name, " must be ",
                      ndim == 1 ? "a 1-D tensor [batch]" : "a 2-D tensor [batch, max_blocks]", ", got shape ",
                      ShapeOf(t));
}

void RequireEntries(std::string_view name, const at::Tensor& t, const c10::SymInt& expected, std::string_view why)
{
    TORCH_CHECK_VALUE(t.sym_sizes()[0] == expected, name, " must have ", expected, " entries (", why, "), got ",
                      t.sym_sizes()[0]);
}

void RequireScalarIndexTensor(std::string_view name, const at::Tensor& t, bool allow_meta)
{
    RequireData(name, t, allow_meta);
    const auto dtype = t.scalar_type();
    TORCH_CHECK_TYPE(c10::isIntegralType(dtype, /*includeBool=*/false), name,
                     " must be an int or an integer tensor, got ", Describe(t));
    TORCH_CHECK_VALUE(t.sym_numel() == 1, name, " must have exactly one element, got shape ", ShapeOf(t));
}

void RequireIndexDevices(const at::Device& data_device, c10::ArrayRef<Named> tensors)
{
    for (const Named& named : tensors) {
        if (!named.tensor.defined()) {
            continue;
        }
        const at::Device device = named.tensor.device();
        TORCH_CHECK_VALUE(device == data_device || device.is_cpu(), named.name, " is on ", device,
                          ", but index tensors must be on the host (cpu) or on the data's device ", data_device);
    }
}

std::string Describe(const at::Tensor& t)
{
    return "a " + DtypeName(t.scalar_type()) + " tensor of shape " + ShapeOf(t);
}

}  // namespace ascend_kv
