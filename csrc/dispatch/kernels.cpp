#include "csrc/dispatch/kernels.h"

#include <atomic>

#include <ATen/core/dispatch/Dispatcher.h>

namespace ascend_kv {
namespace {

std::atomic<const KernelLibrary*> npu_kernels{nullptr};
std::atomic<const KernelLibrary*> sim_kernels{nullptr};
using FormatFunction = int64_t (*)(const at::Tensor&);
std::atomic<FormatFunction> format_function{nullptr};

/// torch_npu's get_npu_format, through the Python implementation of ascend_kv::_storage_format.
int64_t FormatFromPython(const at::Tensor& tensor)
{
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("ascend_kv::_storage_format", "")
                         .typed<int64_t(const at::Tensor&)>();
    return op.call(tensor);
}

}  // namespace

void UseKernelLibrary(int64_t address, const std::string& role)
{
    TORCH_CHECK_VALUE(role == "npu" || role == "sim", "role must be 'npu' or 'sim', got '", role, "'");
    const auto* table = reinterpret_cast<const KernelLibrary*>(address);
    TORCH_CHECK(table == nullptr || table->version == kKernelLibraryVersion, "the kernel library has table version ",
                table == nullptr ? 0 : table->version, ", this operator library needs ", kKernelLibraryVersion,
                ": rebuild the kernel library from these sources");
    (role == "npu" ? npu_kernels : sim_kernels).store(table);
}

const KernelLibrary* KernelsFor(KernelRole role)
{
    return (role == KernelRole::kNpu ? npu_kernels : sim_kernels).load();
}

void UseStorageFormat(int64_t address) { format_function.store(reinterpret_cast<FormatFunction>(address)); }

std::optional<int64_t> StorageFormat(const at::Tensor& tensor)
{
    if (!tensor.defined() || tensor.device().type() != c10::DeviceType::PrivateUse1) {
        return std::nullopt;
    }
    int64_t format = -1;
    if (const FormatFunction f = format_function.load()) {
        format = f(tensor);
    } else if (const KernelLibrary* kernels = npu_kernels.load(); kernels != nullptr && kernels->storage_format) {
        format = kernels->storage_format(tensor);
    }
    if (format < 0) {
        format = FormatFromPython(tensor);
    }
    return format < 0 ? std::nullopt : std::optional<int64_t>(format);
}

}  // namespace ascend_kv
