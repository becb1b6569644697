// Launcher of the AscendC host model: runs a kernel body on `numBlocks` simulated vector cores,
// one after another (deterministic), with GetBlockIdx() set for each, a fresh UB per core, and
// the end-of-kernel checks (flags all waited, queue tensors all freed). Never throws: every error
// becomes a return code and a message, so a Python caller (ctypes) never crashes.
#ifndef ASCEND_KV_HOST_MODEL_LAUNCHER_H
#define ASCEND_KV_HOST_MODEL_LAUNCHER_H

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>

#include "kernel_operator.h"

namespace AscendC {
namespace host_model {

// Return codes of Launch.
enum LaunchStatus : int {
    kLaunchOk = 0,
    kLaunchModelError = 1,  // the kernel broke a rule of the model (message says which)
    kLaunchCppError = 2,    // another C++ exception escaped the kernel
    kLaunchBadArguments = 3 // numBlocks / ubBytes / regions unusable
};

constexpr uint32_t kMaxUbBytes = 192u * 1024u; // physical UB per vector core

inline void CopyMessage(const std::string& msg, char* err, size_t errLen)
{
    if (err == nullptr || errLen == 0) return;
    size_t n = std::min(msg.size(), errLen - 1);
    std::memcpy(err, msg.data(), n);
    err[n] = '\0';
}

// Does byte `off` of region r hold an element (true for every byte of a dense region)?
inline bool IsElement(const GmRegion& r, uint64_t off) { return r.elements == nullptr || r.elements[off] != 0; }

// Regions may share address ranges (views of one buffer), but no byte may be an element of a
// written tensor and of any other tensor: that would make the result depend on the order of
// the writes, or let a kernel write an input.
inline std::string CheckRegions(const GmRegion* regions, size_t n)
{
    for (size_t i = 0; i < n; ++i) {
        if (regions[i].name == nullptr) return "GM region " + std::to_string(i) + " has no name";
        if (regions[i].base == nullptr && regions[i].bytes != 0)
            return std::string("GM region '") + regions[i].name + "' has a null base and " +
                   std::to_string(regions[i].bytes) + " bytes";
        for (size_t j = 0; j < i && regions[i].bytes != 0; ++j) {
            if (regions[j].bytes == 0 || !(regions[i].writable || regions[j].writable)) continue;
            auto a0 = reinterpret_cast<uintptr_t>(regions[i].base), a1 = a0 + regions[i].bytes;
            auto b0 = reinterpret_cast<uintptr_t>(regions[j].base), b1 = b0 + regions[j].bytes;
            for (uintptr_t p = std::max(a0, b0); p < std::min(a1, b1); ++p) {
                if (IsElement(regions[i], p - a0) && IsElement(regions[j], p - b0))
                    return std::string("GM regions '") + regions[j].name + "' and '" + regions[i].name +
                           "' overlap (their elements share byte " + std::to_string(p - b0) + " of '" +
                           regions[j].name + "')";
            }
        }
    }
    return "";
}

// Runs `body` (which calls the kernel entry) once per core. ubBytes: UB capacity per core
// (kDefaultUbBytes on Atlas A2/A3; tests may pass less). garbage: fill byte of fresh UB.
// requireTaskType: the kernel must declare KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY).
inline int Launch(uint32_t numBlocks, uint32_t ubBytes, const GmRegion* regions, size_t n,
                  const std::function<void()>& body, char* err, size_t errLen, uint8_t garbage = kDefaultGarbage,
                  bool requireTaskType = false)
{
    CopyMessage("", err, errLen);
    if (numBlocks == 0 || numBlocks > 65535) {
        CopyMessage("launch: numBlocks " + std::to_string(numBlocks) + " out of range [1, 65535]", err, errLen);
        return kLaunchBadArguments;
    }
    if (ubBytes < kBlockBytes || ubBytes > kMaxUbBytes || ubBytes % kBlockBytes != 0) {
        CopyMessage("launch: ubBytes " + std::to_string(ubBytes) + " must be a multiple of 32 in [32, " +
                        std::to_string(kMaxUbBytes) + "]",
                    err, errLen);
        return kLaunchBadArguments;
    }
    std::string bad = CheckRegions(regions, n);
    if (!bad.empty()) {
        CopyMessage("launch: " + bad, err, errLen);
        return kLaunchBadArguments;
    }
    auto& st = State();
    if (st.active) {
        CopyMessage("launch: a launch is already running on this thread (nested launch)", err, errLen);
        return kLaunchBadArguments;
    }
    st.active = true;
    st.regions.assign(regions, regions + n);
    st.spans.assign(n, std::vector<GmSpan>{});
    st.blockNum = numBlocks;

    int status = kLaunchOk;
    std::string msg;
    uint32_t core = 0;
    for (; core < numBlocks && status == kLaunchOk; ++core) {
        try {
            ResetCore(core, ubBytes, garbage);
            body();
            CoreState& c = Core();
            if (!c.deferred.empty()) throw ModelError(c.deferred.front());
            if (requireTaskType && c.taskType != KERNEL_TYPE_AIV_ONLY)
                Fail("the kernel did not declare KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY): without it the "
                     "runtime may start cube cores a vector-only kernel does not use");
            if (!c.flags.empty()) {
                auto it = c.flags.begin();
                Fail("kernel returned with SetFlag<HardEvent::", HardEventName(static_cast<HardEvent>(it->first.first)),
                     ">(", it->first.second, ") never waited (", c.flags.size(), " unwaited flag(s))");
            }
        } catch (const ModelError& e) {
            status = kLaunchModelError;
            msg = e.what();
        } catch (const std::exception& e) {
            status = kLaunchCppError;
            msg = std::string("C++ exception: ") + e.what();
        } catch (...) {
            status = kLaunchCppError;
            msg = "unknown C++ exception";
        }
    }
    if (status != kLaunchOk) {
        msg = "core " + std::to_string(core - 1) + " of " + std::to_string(numBlocks) + ": " + msg;
    } else {
        msg = CrossCoreRaces();
        if (!msg.empty()) status = kLaunchModelError;
    }
    CopyMessage(msg, err, errLen);
    st.core.flags.clear();
    st.core.deferred.clear();
    st.regions.clear();
    st.spans.clear();
    st.active = false;
    return status;
}

} // namespace host_model
} // namespace AscendC

// Launch a kernel entry `kernel(args...)` on the host model, e.g.
//   int rc = ASCENDC_HOST_LAUNCH(copy_kernel, numBlocks, ubBytes, regions, nRegions, err, errLen, x, y);
#define ASCENDC_HOST_LAUNCH(kernel, numBlocks, ubBytes, regions, nRegions, err, errLen, ...) \
    ::AscendC::host_model::Launch((numBlocks), (ubBytes), (regions), (nRegions),            \
                                  [&]() { kernel(__VA_ARGS__); }, (err), (errLen))

#endif // ASCEND_KV_HOST_MODEL_LAUNCHER_H
