#include "csrc/dispatch/policy.h"

#include <atomic>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>

#include "csrc/dispatch/kernels.h"

namespace ascend_kv {
namespace {

enum class Requested : int8_t { kUnset = -1, kAuto, kNpu, kSim, kFallback };
enum class Validation : int8_t { kUnset = -1, kDevice, kFull };

const char* kRequestedNames[] = {"auto", "npu", "sim", "fallback"};

Requested ParseRequested(const std::string& name)
{
    for (int8_t i = 0; i < 4; ++i) {
        if (name == kRequestedNames[i]) {
            return static_cast<Requested>(i);
        }
    }
    TORCH_CHECK_VALUE(false, "backend must be one of auto, npu, sim, fallback, got '", name, "'");
}

Validation ParseValidation(const std::string& name)
{
    TORCH_CHECK_VALUE(name == "device" || name == "full", "mode must be one of device, full, got '", name, "'");
    return name == "full" ? Validation::kFull : Validation::kDevice;
}

// The environment's values (ASCEND_KV_BACKEND, ASCEND_KV_VALIDATE) as Python read them; unset
// until asked. A `with` block's value overrides them for its thread.
std::atomic<Requested> environment_backend{Requested::kUnset};
std::atomic<Validation> environment_validation{Validation::kUnset};
thread_local Requested override_backend = Requested::kUnset;
thread_local Validation override_validation = Validation::kUnset;
std::atomic<uint64_t> generation{0};  // bumped by Forget: every thread's kept decisions go

void ReadEnvironment()
{
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("ascend_kv::_environment", "")
                         .typed<std::vector<std::string>()>();
    const std::vector<std::string> values = op.call();
    TORCH_INTERNAL_ASSERT(values.size() == 2, "ascend_kv::_environment returns [backend, validate]");
    environment_backend.store(ParseRequested(values[0]));
    environment_validation.store(ParseValidation(values[1]));
}

Requested CurrentBackend()
{
    if (override_backend != Requested::kUnset) {
        return override_backend;
    }
    Requested value = environment_backend.load();
    if (value == Requested::kUnset) {
        ReadEnvironment();  // raises while a variable holds an unknown value, as Python's settings do
        value = environment_backend.load();
    }
    return value;
}

/// Python's decision (ascend_kv/dispatch/policy.py): the backend's name, or the error it raises.
Backend AskPython(Operation op, const at::Device& device, Requested requested, const std::string& outside)
{
    static auto decide = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("ascend_kv::_decide", "")
                             .typed<std::string(std::string, at::Device, std::string, std::string)>();
    const std::string backend =
        decide.call(AtbName(op), device, kRequestedNames[static_cast<int8_t>(requested)], outside);
    if (backend == "npu") {
        return Backend::kNpu;
    }
    return backend == "sim" ? Backend::kSim : Backend::kFallback;
}

/// A decision kept by this thread, keyed by what it depends on on this side.
using Key = std::tuple<int, int, int, int, std::string>;  // op, device type, index, requested, outside
struct KeyHash {
    size_t operator()(const Key& k) const
    {
        size_t h = std::hash<std::string>()(std::get<4>(k));
        for (const int part : {std::get<0>(k), std::get<1>(k), std::get<2>(k), std::get<3>(k)}) {
            h = h * 1000003u ^ static_cast<size_t>(part);
        }
        return h;
    }
};
thread_local std::unordered_map<Key, Backend, KeyHash> kept;
thread_local uint64_t kept_generation = 0;

}  // namespace

const char* AtbName(Operation op)
{
    switch (op) {
        case Operation::kKvCache: return "KVCacheOperation";
        case Operation::kPagedLoad: return "PagedCacheLoadOperation";
        case Operation::kReshapeAndCache: return "ReshapeAndCacheOperation";
        case Operation::kBlockCopy: return "BlockCopyOperation";
    }
    return "";
}

Backend HostBackend(Operation op)
{
    const Requested requested = CurrentBackend();
    if (requested == Requested::kAuto || requested == Requested::kFallback) {
        return Backend::kFallback;
    }
    if (requested == Requested::kSim && KernelsFor(KernelRole::kSim) != nullptr) {
        return Backend::kSim;
    }
    return AskPython(op, at::Device(at::kCPU), requested, "");  // loads the host build, or raises
}

Backend DeviceBackend(Operation op, const at::Device& device, const std::string& outside)
{
    const Requested requested = CurrentBackend();
    const bool npu = device.type() == c10::DeviceType::PrivateUse1;
    if (!npu && (requested == Requested::kAuto || requested == Requested::kFallback)) {
        return Backend::kFallback;
    }
    const uint64_t now = generation.load();
    if (kept_generation != now) {
        kept.clear();
        kept_generation = now;
    }
    Key key{static_cast<int>(op), static_cast<int>(device.type()), device.index(), static_cast<int>(requested), outside};
    const auto found = kept.find(key);
    if (found != kept.end()) {
        return found->second;
    }
    const Backend backend = AskPython(op, device, requested, outside);
    TORCH_INTERNAL_ASSERT(backend != Backend::kNpu || KernelsFor(KernelRole::kNpu) != nullptr,
                          "the policy chose the kernels before their library was registered");
    kept.emplace(std::move(key), backend);
    return backend;
}

bool ValidateFull()
{
    if (override_validation != Validation::kUnset) {
        return override_validation == Validation::kFull;
    }
    if (environment_validation.load() == Validation::kUnset) {
        ReadEnvironment();
    }
    return environment_validation.load() == Validation::kFull;
}

void SetOverride(const std::string& setting, const c10::optional<std::string>& value)
{
    if (setting == "backend") {
        override_backend = value ? ParseRequested(*value) : Requested::kUnset;
    } else {
        TORCH_CHECK_VALUE(setting == "validate", "setting must be 'backend' or 'validate', got '", setting, "'");
        override_validation = value ? ParseValidation(*value) : Validation::kUnset;
    }
}

void Forget()
{
    environment_backend.store(Requested::kUnset);
    environment_validation.store(Validation::kUnset);
    generation.fetch_add(1);
}

}  // namespace ascend_kv
