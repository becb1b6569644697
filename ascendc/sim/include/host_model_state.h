// Host model of the AscendC API: per-launch and per-core state, errors, GM registry and the
// engine-ordering (hazard) bookkeeping. Part of the HOST build only; CANN builds never see this
// directory. See kernel_operator.h for what the model does and does not model.
#ifndef ASCEND_KV_HOST_MODEL_STATE_H
#define ASCEND_KV_HOST_MODEL_STATE_H

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace AscendC {
namespace host_model {

// Every rule violation throws this; the launcher turns it into a return code and a message.
class ModelError : public std::runtime_error {
public:
    explicit ModelError(const std::string& what) : std::runtime_error(what) {}
};

template <typename... Args>
[[noreturn]] inline void Fail(const Args&... parts)
{
    std::ostringstream os;
    (os << ... << parts);
    throw ModelError(os.str());
}

// Usable UB per vector core on Atlas A2/A3: 192 KB - 256 B, minus the 8 KB the toolchain keeps.
constexpr uint32_t kDefaultUbBytes = 192u * 1024u - 256u - 8u * 1024u;
constexpr uint32_t kBlockBytes = 32;      // UB block / DataCopy unit
constexpr uint32_t kMaxBuffersPerPosition = 8;
constexpr int32_t kEventIds = 8;          // event ids 0..7 on A2/A3
constexpr uint8_t kDefaultGarbage = 0xA5; // fill byte of freshly allocated UB

// One tensor handed to a kernel (registered by the launcher): the bytes [base, base + bytes) its
// elements span. A region that is not `writable` is an input: any kernel write into it is an
// error. `elements` (one byte per byte of the span, nonzero = part of an element) describes a
// strided view whose span has gaps; null means every byte of the span is an element's. Every
// access must stay on the elements of the tensor its GlobalTensor was set up for.
struct GmRegion {
    const void* base;
    uint64_t bytes;
    const char* name;
    bool writable = true;
    const uint8_t* elements = nullptr;
};

// The engines (pipes) whose ordering the model checks. S = scalar unit (GetValue/SetValue),
// V = vector unit (no vector instructions are modelled; it appears as a queue endpoint).
enum class Engine : int { S = 0, V = 1, MTE2 = 2, MTE3 = 3, COUNT = 4 };
constexpr int kEngines = static_cast<int>(Engine::COUNT);
inline const char* EngineName(Engine e)
{
    static const char* names[] = {"S", "V", "MTE2", "MTE3"};
    return names[static_cast<int>(e)];
}

// Vector clock: clock[q] = number of operations of engine q known to be complete.
using Clock = std::array<uint64_t, kEngines>;
inline void Join(Clock& into, const Clock& other)
{
    for (int i = 0; i < kEngines; ++i) into[i] = std::max(into[i], other[i]);
}

// Per 32-byte UB block: the last writer and the last read of each engine.
struct BlockAccess {
    int writer = -1;          // engine index, -1 = none
    uint64_t writeOp = 0;     // op number (1-based) of that write
    std::array<uint64_t, kEngines> readOp{}; // latest read op per engine, 0 = none
};

// GM bytes [begin, end) of a writable region touched by one core in this launch.
struct GmSpan {
    uint64_t begin, end;
    int64_t core;
    bool write;
};

struct CoreState {
    int64_t blockIdx = 0;
    uint32_t ubBytes = kDefaultUbBytes;
    uint8_t garbage = kDefaultGarbage;
    std::unique_ptr<uint8_t[]> ubStorage;
    uint8_t* ub = nullptr;   // 32-byte aligned start of this core's UB
    bool pipeAlive = false;
    uint32_t ubUsed = 0;     // bytes handed out by InitBuffer (bump allocator)
    uint32_t positionBuffers[32] = {};
    int queueSerial = 0;

    // engine ordering
    Clock issued{};                          // ops issued per engine
    std::array<Clock, kEngines> sees{};      // sees[p] = what engine p knows complete
    std::vector<BlockAccess> blocks;

    // user SetFlag/WaitFlag: key (event, id) -> clock recorded at SetFlag
    std::map<std::pair<int, int32_t>, Clock> flags;

    std::vector<std::string> deferred; // violations found in destructors (cannot throw there)
    int taskType = -1;                 // KERNEL_TASK_TYPE_DEFAULT of this core's kernel, -1: none
};

struct LaunchState {
    std::vector<GmRegion> regions;
    std::vector<std::vector<GmSpan>> spans; // per region; writable regions only
    int64_t blockNum = 1;
    bool active = false;
    CoreState core;
};

inline LaunchState& State()
{
    static thread_local LaunchState state;
    return state;
}

inline CoreState& Core() { return State().core; }

// The registered region a GlobalTensor set up at p is for, or -1 if p is in none. Views of one
// buffer may share address ranges (K and V held block by block), so a region starting exactly
// at p wins over one that merely contains p: a kernel passes each tensor's own base.
inline int FindRegion(const void* p)
{
    const auto& regs = State().regions;
    auto addr = reinterpret_cast<uintptr_t>(p);
    for (size_t i = 0; i < regs.size(); ++i) {
        if (addr == reinterpret_cast<uintptr_t>(regs[i].base)) return static_cast<int>(i);
    }
    for (size_t i = 0; i < regs.size(); ++i) {
        auto b = reinterpret_cast<uintptr_t>(regs[i].base);
        if (addr >= b && addr < b + regs[i].bytes) return static_cast<int>(i);
    }
    return -1;
}

// Record that the current core touches GM bytes [p, p+bytes) of region r. Inputs (not writable)
// may be read by any core and never written. For writable regions the spans are kept (merged with
// the previous span of the same kind when contiguous) for CrossCoreRaces at the end of the launch.
inline void GmTouch(int r, const void* p, uint64_t bytes, bool write, const char* what)
{
    if (r < 0 || bytes == 0) return;
    auto& st = State();
    const auto& reg = st.regions[r];
    uint64_t off = reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(reg.base);
    if (reg.elements != nullptr) {
        const void* gap = std::memchr(reg.elements + off, 0, bytes);
        if (gap != nullptr) {
            uint64_t at = static_cast<uint64_t>(static_cast<const uint8_t*>(gap) - reg.elements);
            Fail(what, ": ", write ? "write to" : "read of", " byte ", at, " of GM tensor '", reg.name,
                 "', which belongs to none of its elements (a gap of the strided view; access of ", bytes,
                 " bytes from byte ", off, ")");
        }
    }
    if (!reg.writable) {
        if (write) {
            Fail(what, ": write into input GM tensor '", reg.name, "' at byte ", off, " (", bytes,
                 " bytes); the launcher registered it read-only");
        }
        return;
    }
    auto& v = st.spans[r];
    if (!v.empty()) {
        GmSpan& last = v.back();
        if (last.core == st.core.blockIdx && last.write == write && last.end == off) {
            last.end = off + bytes;
            return;
        }
    }
    v.push_back(GmSpan{off, off + bytes, st.core.blockIdx, write});
}

// A GM byte written by one core and read or written by another core in the same launch is a
// race on hardware (cores run concurrently there, in turn here): two writes as much as a write
// and a read, since the bytes may end up mixing both writes. Returns "" or a description.
inline std::string CrossCoreRaces()
{
    auto& st = State();
    for (size_t r = 0; r < st.spans.size(); ++r) {
        std::vector<GmSpan> v = st.spans[r];
        std::sort(v.begin(), v.end(), [](const GmSpan& x, const GmSpan& y) { return x.begin < y.begin; });
        std::vector<GmSpan> open;
        for (const GmSpan& x : v) {
            open.erase(std::remove_if(open.begin(), open.end(), [&](const GmSpan& y) { return y.end <= x.begin; }),
                       open.end());
            for (const GmSpan& y : open) {
                if (y.core != x.core && (x.write || y.write)) {
                    uint64_t a = std::max(x.begin, y.begin), b = std::min(x.end, y.end);
                    std::ostringstream os;
                    os << "cross-core race on GM tensor '" << st.regions[r].name << "' bytes [" << a << ", " << b
                       << "): " << (y.write ? "written" : "read") << " by core " << y.core << " and "
                       << (x.write ? "written" : "read") << " by core " << x.core
                       << " in the same launch (cores run concurrently on hardware)";
                    return os.str();
                }
            }
            open.push_back(x);
        }
    }
    return "";
}

// ---- engine ordering -------------------------------------------------------------------------

inline uint64_t Issue(Engine e)
{
    auto& c = Core();
    int i = static_cast<int>(e);
    uint64_t op = ++c.issued[i];
    c.sees[i][i] = op; // an engine executes its own ops in order
    return op;
}

// Engine e (op number op) accesses UB bytes [ubOff, ubOff+bytes).
// `api` and `owner` name the API call and the UB buffer (which starts at UB byte `ownerBase`) in a
// failure message.
inline void UbAccess(Engine e, uint64_t op, uint32_t ubOff, uint32_t bytes, bool write, const char* api,
                     const std::string& owner, uint32_t ownerBase)
{
    if (bytes == 0) return;
    auto& c = Core();
    int me = static_cast<int>(e);
    const Clock& seen = c.sees[me];
    uint32_t first = ubOff / kBlockBytes, last = (ubOff + bytes - 1) / kBlockBytes;
    for (uint32_t b = first; b <= last; ++b) {
        BlockAccess& a = c.blocks[b];
        if (a.writer >= 0 && a.writer != me && seen[a.writer] < a.writeOp) {
            Fail(api, " on ", owner, ": ", EngineName(e), " ", write ? "writes" : "reads", " its bytes [",
                 b * kBlockBytes - ownerBase, ", ", (b + 1) * kBlockBytes - ownerBase, ") still being written by ", EngineName(static_cast<Engine>(a.writer)),
                 " (no SetFlag/WaitFlag<HardEvent::", EngineName(static_cast<Engine>(a.writer)), "_", EngineName(e),
                 ">, queue EnQue/DeQue or PipeBarrier<PIPE_ALL> orders them)");
        }
        if (write) {
            for (int q = 0; q < kEngines; ++q) {
                if (q != me && a.readOp[q] != 0 && seen[q] < a.readOp[q]) {
                    Fail(api, " on ", owner, ": ", EngineName(e), " overwrites its bytes [",
                         b * kBlockBytes - ownerBase, ", ", (b + 1) * kBlockBytes - ownerBase, ") still being read by ", EngineName(static_cast<Engine>(q)),
                         " (no SetFlag/WaitFlag<HardEvent::", EngineName(static_cast<Engine>(q)), "_",
                         EngineName(e), ">, queue FreeTensor/AllocTensor or PipeBarrier<PIPE_ALL> orders them)");
                }
            }
            a.writer = me;
            a.writeOp = op;
        } else {
            a.readOp[me] = std::max(a.readOp[me], op);
        }
    }
}

// The clock a signal from `from` carries: everything `from` has seen plus all its issued ops.
inline Clock SignalClock(Engine from)
{
    auto& c = Core();
    Clock k = c.sees[static_cast<int>(from)];
    k[static_cast<int>(from)] = c.issued[static_cast<int>(from)];
    return k;
}

inline void Receive(Engine to, const Clock& k) { Join(Core().sees[static_cast<int>(to)], k); }

inline void BarrierAll()
{
    auto& c = Core();
    for (int p = 0; p < kEngines; ++p) c.sees[p] = c.issued;
}

// ---- per-core lifecycle ----------------------------------------------------------------------

inline void ResetCore(int64_t blockIdx, uint32_t ubBytes, uint8_t garbage)
{
    auto& c = Core();
    std::unique_ptr<uint8_t[]> storage = std::move(c.ubStorage); // reused when the size matches
    uint8_t* ub = c.ub;
    uint32_t had = c.ubBytes;
    std::vector<BlockAccess> blocks = std::move(c.blocks);
    c = CoreState{};
    if (!storage || had != ubBytes) {
        storage.reset(new uint8_t[ubBytes + kBlockBytes]);
        uintptr_t raw = reinterpret_cast<uintptr_t>(storage.get());
        ub = reinterpret_cast<uint8_t*>((raw + kBlockBytes - 1) / kBlockBytes * kBlockBytes);
    }
    c.ubStorage = std::move(storage);
    c.ub = ub;
    c.blockIdx = blockIdx;
    c.ubBytes = ubBytes;
    c.garbage = garbage;
    std::memset(c.ub, garbage, ubBytes);
    blocks.assign((ubBytes + kBlockBytes - 1) / kBlockBytes, BlockAccess{});
    c.blocks = std::move(blocks);
}

} // namespace host_model
} // namespace AscendC

#endif // ASCEND_KV_HOST_MODEL_STATE_H
