#include "csrc/ops/route.h"

#include <array>
#include <atomic>
#include <mutex>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>

#include "csrc/rules/index_values.h"
#include "csrc/rules/kernel_domain.h"

namespace ascend_kv {

bool ReadsValues(c10::ArrayRef<at::Tensor> index_tensors) { return AllOnHost(index_tensors) || ValidateFull(); }

const KernelLibrary& Kernels(Backend backend)
{
    const KernelLibrary* table = KernelsFor(backend == Backend::kNpu ? KernelRole::kNpu : KernelRole::kSim);
    TORCH_INTERNAL_ASSERT(table != nullptr, "no kernel library registered for the backend the policy chose");
    return *table;
}

at::Tensor InDomain(const at::Tensor& t, int64_t first_dim)
{
    return !t.defined() || DenseFrom(t, first_dim) ? t : t.contiguous();
}

void WriteBack(const at::Tensor& given, const at::Tensor& ran)
{
    if (given.defined() && !ran.is_same(given)) {
        given.copy_(ran);
    }
}

at::Tensor BufferOnDevice(const at::Tensor& given, const at::Device& device, bool upload)
{
    if (given.device() == device) {
        return given;
    }
    return upload ? given.to(device, /*non_blocking=*/given.is_pinned())
                  : at::empty(given.sizes(), given.options().device(device));
}

void BufferBack(const at::Tensor& given, const at::Tensor& ran)
{
    if (!ran.is_same(given)) {
        given.copy_(ran, /*non_blocking=*/given.is_pinned());
    }
}

}  // namespace ascend_kv

namespace ascend_kv {
namespace {
std::array<std::atomic<int64_t>, 4> runs{};
}  // namespace

void Count(Ran ran) { runs[static_cast<size_t>(ran)].fetch_add(1, std::memory_order_relaxed); }

std::vector<int64_t> Runs()
{
    std::vector<int64_t> counts;
    for (const auto& count : runs) {
        counts.push_back(count.load(std::memory_order_relaxed));
    }
    return counts;
}

void NoteTracing()
{
    static std::once_flag once;
    std::call_once(once, [] {
        c10::Dispatcher::singleton().findSchemaOrThrow("ascend_kv::_on_trace", "").typed<void()>().call();
    });
}

}  // namespace ascend_kv
