// HOST MODEL of the AscendC API subset used by ascendc/kernels/*.cpp.
//
// Found as "kernel_operator.h" only in host builds (-I ascendc/sim/include); CANN builds use
// Huawei's header of the same name. Names, namespaces, template parameters, argument order and
// units follow Huawei's AscendC API (Atlas A2/A3 vector cores). Every rule violation throws
// AscendC::host_model::ModelError naming the tensor/buffer, the offset/size and the rule; the
// launcher (host_model_launcher.h) turns it into a return code and a message.
//
// What it models (strictly):
//   - UB of each core: capacity (default 192 KB - 256 B - 8 KB, set by the launcher), a bump
//     allocator behind TPipe::InitBuffer (lengths rounded up to 32 B), at most 8 buffers per
//     position, fresh buffers filled with a garbage byte (0xA5 unless the launcher says otherwise)
//     on every AllocTensor and InitBuffer(TBuf).
//   - DataCopy / DataCopyPad: UB side 32-byte aligned, GM side aligned to sizeof(T),
//     count*sizeof(T) a multiple of 32 B, blockCount <= 4095, blockLen <= 65535 (32-byte units)
//     or <= 65535 bytes (DataCopyPad; a whole number of elements), paddings <= 32 B, gaps measured
//     from the end of one block to the start of the next (DataCopy: 32-byte units both sides;
//     DataCopyPad: bytes on the GM side, 32-byte blocks on the UB side, each UB block starting on
//     a 32-byte boundary), a zero blockCount or blockLen is a no-op, every UB byte inside the
//     LocalTensor, every GM element inside the buffer given to SetGlobalBuffer (reads and writes,
//     and GetValue/SetValue). A LocalTensor's index/offset must lie inside it.
//   - SetGlobalBuffer: the buffer must lie inside the span of one tensor registered by the
//     launcher (the one whose first element it starts at, else the one holding its start).
//     Registered tensors may be strided views: every access must land on bytes of the tensor's
//     own elements (not a gap of its span, even where another view's elements lie).
//   - GM tensors registered read-only (inputs) must never be written.
//   - KERNEL_TASK_TYPE_DEFAULT: only KERNEL_TYPE_AIV_ONLY (the model has no cube cores); the
//     launcher can require every kernel to declare it.
//   - Queues: AllocTensor/EnQue/DeQue/FreeTensor pairing, `num` buffers, `depth`, DeQue of an
//     empty queue, freeing a tensor that is not this queue's, use of a tensor after FreeTensor or
//     while it is enqueued, tensors still allocated when the kernel returns.
//   - SetFlag/WaitFlag: ids 0..7, a WaitFlag needs an earlier SetFlag (same event, same id), a
//     second SetFlag before the WaitFlag is an error, none left unwaited when the kernel returns.
//     As in the real API, HardEvent::V_V is a PIPE_V barrier (SetFlag) and a no-op (WaitFlag),
//     and the cube-only events (MTE1/M/FIX pairs ignored on a vector core) do nothing; other
//     cube-side events are rejected.
//   - Engine ordering inside a core, as vector clocks over the S, V, MTE2 and MTE3 pipes: an engine
//     that reads or overwrites UB bytes another engine wrote or read must be ordered after it by
//     SetFlag/WaitFlag<HardEvent::X_Y>, by a queue (EnQue->DeQue: producer->consumer, FreeTensor->
//     AllocTensor: consumer->producer; TQue<VECIN>: MTE2->V, TQue<VECOUT>: V->MTE3, TQueBind<VECIN,
//     VECOUT>: MTE2->MTE3, the events the real queues use) or by PipeBarrier<PIPE_ALL>. Scalar
//     GetValue/SetValue on UB are S-pipe accesses (they need e.g. MTE2_S after a DataCopy in).
//     Tracked per 32-byte UB block.
//   - Cores: a GM byte written by one core and read or written by another core in the same
//     launch is reported as a cross-core race when the launch ends (writable allocations only).
//   - Vector instructions (host_model_vector.h): Cast with its round modes, Add/Sub/Mul/Div,
//     Adds/Muls/Maxs/Mins, Max/Min, Abs, Duplicate, level-2 (calCount) forms, with the documented
//     rounding and saturation; operands alive, 32-byte aligned and holding calCount elements; each
//     call is a PIPE_V access ordered like any other engine's.
//
// What it does NOT model:
//   - True concurrency: cores run one after another, each core's engines run in program order;
//     the ordering rules above are checked, timing is not. No performance or bandwidth model.
//   - Bank conflicts, 512-byte GM alignment effects, cache coherency of scalar GM accesses
//     (GlobalTensor::GetValue/SetValue behave as if uncached), DataCacheCleanAndInvalid.
//   - Ordering of GM accesses between engines of one core (e.g. MTE3 write then MTE2 read of the
//     same GM bytes); only cross-core GM races are checked.
//   - The event ids the real TQue implementation takes for itself (a kernel that mixes queues with
//     literal EVENT_IDs may collide on hardware; use TPipe::AllocEventID there).
//   - Vector instructions other than those above (and their mask/repeat forms), cube cores, L1/L0,
//     SyncAll, atomics, workspaces, tiling macros.
//   - DataCopyPad's exact UB layout with left/right padding is modelled as [left pad][data][right
//     pad] rounded up to 32 B; bytes after that up to the boundary keep their (garbage) contents.
//   - Raw pointer accesses that bypass GlobalTensor (e.g. dereferencing a GM_ADDR) are unchecked and
//     can crash the host process; a kernel stopped by the model may leave GM partly written by the
//     cores that ran before it.
//   - Only the "at most 8 buffers per position" and 0..7 event-id limits are taken from the
//     documentation; other resource limits (total TQue/TBuf count, event ids used internally) are
//     not checked.
#ifndef ASCEND_KV_HOST_MODEL_KERNEL_OPERATOR_H
#define ASCEND_KV_HOST_MODEL_KERNEL_OPERATOR_H

#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "host_model_state.h"

// Device qualifiers are empty on the host (as in Huawei's CPU debug mode).
#define __global__
#define __aicore__
#define __gm__
#define __ubuf__
#define __inout_pipe__(pipe)
#define GM_ADDR __gm__ uint8_t*

// Kernel types of KERNEL_TASK_TYPE_DEFAULT (global namespace, as in the device headers).
enum KernelMetaType : uint8_t {
    KERNEL_TYPE_AIV_ONLY,
    KERNEL_TYPE_AIC_ONLY,
    KERNEL_TYPE_MIX_AIV_1_0,
    KERNEL_TYPE_MIX_AIC_1_0,
    KERNEL_TYPE_MIX_AIC_1_1,
    KERNEL_TYPE_MIX_AIC_1_2,
};
#define KERNEL_TASK_TYPE_DEFAULT(type) \
    ::AscendC::host_model::DeclareTaskType((type), (type) == KERNEL_TYPE_AIV_ONLY, #type)

// Compiler-provided enums of the device toolchain (global namespace there too).
enum pipe_t { PIPE_S = 0, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL, PIPE_MTE4, PIPE_MTE5, PIPE_V2, PIPE_FIX };
enum event_t { EVENT_ID0 = 0, EVENT_ID1, EVENT_ID2, EVENT_ID3, EVENT_ID4, EVENT_ID5, EVENT_ID6, EVENT_ID7 };

// 16-bit element types: storage only (the kernels move bytes, they do no arithmetic).
struct half {
    uint16_t bits = 0;
    half() = default;
    constexpr half(int v) : bits(static_cast<uint16_t>(v)) {} // NOLINT: only 0 is meaningful
};
struct bfloat16_t {
    uint16_t bits = 0;
    bfloat16_t() = default;
    constexpr bfloat16_t(int v) : bits(static_cast<uint16_t>(v)) {} // NOLINT
};

namespace AscendC {

enum class TPosition : uint8_t {
    GM, A1, A2, B1, B2, C1, C2, CO1, CO2, VECIN, VECOUT, VECCALC, LCM = VECCALC, SPM, SHM = SPM, TSCM,
    C2PIPE2GM, C2PIPE2LOCAL, MAX,
};
using QuePosition = TPosition;

enum class HardEvent : uint8_t {
    MTE2_MTE1, MTE1_MTE2, MTE1_M, M_MTE1, MTE2_V, V_MTE2, MTE3_V, V_MTE3, M_V, V_M, V_V, MTE3_MTE1, MTE1_MTE3,
    MTE1_V, MTE2_M, M_MTE2, V_MTE1, M_FIX, FIX_M, MTE3_MTE2, MTE2_MTE3, S_V, V_S, S_MTE2, MTE2_S, S_MTE3, MTE3_S,
    MTE2_FIX, FIX_MTE2, FIX_S, M_S, FIX_MTE3, MTE1_FIX, FIX_MTE1, FIX_FIX, MAX,
};

using TEventID = int8_t;

namespace host_model {

inline const char* HardEventName(HardEvent e)
{
    static const char* names[] = {
        "MTE2_MTE1", "MTE1_MTE2", "MTE1_M", "M_MTE1", "MTE2_V", "V_MTE2", "MTE3_V", "V_MTE3", "M_V", "V_M", "V_V",
        "MTE3_MTE1", "MTE1_MTE3", "MTE1_V", "MTE2_M", "M_MTE2", "V_MTE1", "M_FIX", "FIX_M", "MTE3_MTE2",
        "MTE2_MTE3", "S_V", "V_S", "S_MTE2", "MTE2_S", "S_MTE3", "MTE3_S", "MTE2_FIX", "FIX_MTE2", "FIX_S", "M_S",
        "FIX_MTE3", "MTE1_FIX", "FIX_MTE1", "FIX_FIX", "MAX"};
    return names[static_cast<int>(e)];
}

inline const char* PositionName(TPosition p)
{
    switch (p) {
        case TPosition::GM: return "GM";
        case TPosition::VECIN: return "VECIN";
        case TPosition::VECOUT: return "VECOUT";
        case TPosition::VECCALC: return "VECCALC";
        default: return "non-vector position";
    }
}

// Engines at the ends of a vector-core event; false for cube-side events.
inline bool EventEngines(HardEvent e, Engine& src, Engine& dst)
{
    switch (e) {
        case HardEvent::MTE2_V: src = Engine::MTE2; dst = Engine::V; return true;
        case HardEvent::V_MTE2: src = Engine::V; dst = Engine::MTE2; return true;
        case HardEvent::MTE3_V: src = Engine::MTE3; dst = Engine::V; return true;
        case HardEvent::V_MTE3: src = Engine::V; dst = Engine::MTE3; return true;
        case HardEvent::MTE3_MTE2: src = Engine::MTE3; dst = Engine::MTE2; return true;
        case HardEvent::MTE2_MTE3: src = Engine::MTE2; dst = Engine::MTE3; return true;
        case HardEvent::S_V: src = Engine::S; dst = Engine::V; return true;
        case HardEvent::V_S: src = Engine::V; dst = Engine::S; return true;
        case HardEvent::S_MTE2: src = Engine::S; dst = Engine::MTE2; return true;
        case HardEvent::MTE2_S: src = Engine::MTE2; dst = Engine::S; return true;
        case HardEvent::S_MTE3: src = Engine::S; dst = Engine::MTE3; return true;
        case HardEvent::MTE3_S: src = Engine::MTE3; dst = Engine::S; return true;
        default: return false;
    }
}

// Events the real API turns into no-ops on a vector core (cube-only pipes).
inline bool IgnoredOnVectorCore(HardEvent e)
{
    return e == HardEvent::MTE2_MTE1 || e == HardEvent::MTE1_MTE2 || e == HardEvent::MTE1_M ||
           e == HardEvent::M_MTE1 || e == HardEvent::M_FIX || e == HardEvent::FIX_M;
}

// One UB buffer handed out by a queue or a TBuf.
struct UbBuffer {
    enum class St { FREE, ALLOCATED, ENQUEUED, DEQUEUED, TBUF };
    std::string owner;     // e.g. "TQueBind<VECIN,VECOUT,1> #0 buffer 1"
    uint32_t ubOffset = 0; // byte offset in this core's UB
    uint32_t bytes = 0;
    St state = St::FREE;
    uint64_t generation = 0; // bumped by AllocTensor and FreeTensor
    Clock enqClock{};        // producer's signal at EnQue
    Clock freeClock{};       // consumer's signal at FreeTensor
};

inline void FillGarbage(const UbBuffer& b) { std::memset(Core().ub + b.ubOffset, Core().garbage, b.bytes); }

inline uint32_t RoundUp32(uint64_t n) { return static_cast<uint32_t>((n + kBlockBytes - 1) / kBlockBytes * kBlockBytes); }

// Reserve `bytes` (already a multiple of 32) of UB for `who`; counts buffers per position.
inline uint32_t ReserveUb(const std::string& who, TPosition pos, uint32_t num, uint32_t len)
{
    auto& c = Core();
    if (!c.pipeAlive) Fail("InitBuffer(", who, "): no TPipe object is alive on this core");
    if (num == 0 || len == 0) Fail("InitBuffer(", who, "): num ", num, " and len ", len, " must both be > 0");
    uint32_t& used = c.positionBuffers[static_cast<int>(pos) & 31];
    if (used + num > kMaxBuffersPerPosition) {
        Fail("InitBuffer(", who, ", num=", num, "): position ", PositionName(pos), " would hold ", used + num,
             " buffers; at most ", kMaxBuffersPerPosition, " per position");
    }
    uint64_t need = static_cast<uint64_t>(num) * RoundUp32(len);
    if (c.ubUsed + need > c.ubBytes) {
        Fail("UB over-allocation: InitBuffer(", who, ", num=", num, ", len=", len, ") needs ", need, " bytes but only ",
             c.ubBytes - c.ubUsed, " of ", c.ubBytes, " UB bytes are left (", c.ubUsed, " already in use)");
    }
    used += num;
    uint32_t off = c.ubUsed;
    c.ubUsed += static_cast<uint32_t>(need);
    return off;
}

// The queue machinery, independent of the template parameters.
struct QueueImpl {
    std::string name;
    Engine producer = Engine::MTE2, consumer = Engine::MTE3;
    TPosition position = TPosition::VECIN;
    int32_t depth = 1;
    std::vector<std::shared_ptr<UbBuffer>> bufs;
    std::deque<std::shared_ptr<UbBuffer>> fifo;
    size_t next = 0;
    bool initialized = false;

    void Init(uint32_t num, uint32_t len)
    {
        if (initialized) Fail("InitBuffer(", name, "): this queue was already initialised");
        if (depth < 1) Fail("InitBuffer(", name, "): queue depth ", depth, " must be >= 1");
        uint32_t off = ReserveUb(name, position, num, len);
        int serial = Core().queueSerial++;
        name += " #" + std::to_string(serial);
        for (uint32_t i = 0; i < num; ++i) {
            auto b = std::make_shared<UbBuffer>();
            b->owner = name + " buffer " + std::to_string(i);
            b->ubOffset = off + i * RoundUp32(len);
            b->bytes = RoundUp32(len);
            bufs.push_back(b);
        }
        initialized = true;
    }

    void Need(const char* op) const
    {
        if (!initialized) Fail(op, " on ", name, " before TPipe::InitBuffer");
    }

    std::shared_ptr<UbBuffer> Alloc()
    {
        Need("AllocTensor");
        for (size_t k = 0; k < bufs.size(); ++k) {
            auto& b = bufs[(next + k) % bufs.size()];
            if (b->state == UbBuffer::St::FREE) {
                next = (next + k + 1) % bufs.size();
                b->state = UbBuffer::St::ALLOCATED;
                ++b->generation;
                FillGarbage(*b);
                Receive(producer, b->freeClock);
                return b;
            }
        }
        Fail("AllocTensor on ", name, ": all ", bufs.size(),
             " buffers are in use (allocated or enqueued and not yet freed); InitBuffer gave it num=", bufs.size());
    }

    void Own(const std::shared_ptr<UbBuffer>& b, uint64_t gen, const char* op) const
    {
        if (!b) Fail(op, " on ", name, ": the tensor was never allocated (default-constructed LocalTensor)");
        if (std::find(bufs.begin(), bufs.end(), b) == bufs.end())
            Fail(op, " on ", name, ": the tensor belongs to ", b->owner, ", not to this queue");
        if (gen != b->generation) Fail(op, " on ", name, ": stale tensor of ", b->owner, " (used after FreeTensor)");
    }

    void EnQue(const std::shared_ptr<UbBuffer>& b, uint64_t gen)
    {
        Need("EnQue");
        Own(b, gen, "EnQue");
        if (b->state != UbBuffer::St::ALLOCATED)
            Fail("EnQue on ", name, ": ", b->owner, " is not freshly allocated (EnQue twice, or EnQue after DeQue)");
        if (static_cast<int32_t>(fifo.size()) >= depth)
            Fail("EnQue on ", name, ": queue already holds ", fifo.size(), " tensors, its depth is ", depth);
        b->state = UbBuffer::St::ENQUEUED;
        b->enqClock = SignalClock(producer);
        fifo.push_back(b);
    }

    std::shared_ptr<UbBuffer> DeQue()
    {
        Need("DeQue");
        if (fifo.empty()) Fail("DeQue from an empty queue: ", name, " holds no enqueued tensor");
        auto b = fifo.front();
        fifo.pop_front();
        b->state = UbBuffer::St::DEQUEUED;
        Receive(consumer, b->enqClock);
        return b;
    }

    void Free(const std::shared_ptr<UbBuffer>& b, uint64_t gen)
    {
        Need("FreeTensor");
        Own(b, gen, "FreeTensor");
        if (b->state == UbBuffer::St::ENQUEUED) Fail("FreeTensor on ", name, ": ", b->owner, " is still enqueued");
        if (b->state == UbBuffer::St::FREE) Fail("FreeTensor on ", name, ": ", b->owner, " is already free");
        b->state = UbBuffer::St::FREE;
        ++b->generation;
        b->freeClock = SignalClock(consumer);
    }

    ~QueueImpl()
    {
        for (auto& b : bufs) {
            if (b->state == UbBuffer::St::ALLOCATED || b->state == UbBuffer::St::DEQUEUED ||
                b->state == UbBuffer::St::ENQUEUED) {
                Core().deferred.push_back("kernel returned with " + b->owner +
                                          (b->state == UbBuffer::St::ENQUEUED ? " still enqueued" : " not freed") +
                                          " (every AllocTensor needs a FreeTensor)");
            }
        }
    }
};

// The engines a queue orders, as the real API picks its events (GetQueEvt): GM -> UB (TQue<VECIN>)
// EnQue is MTE2_V, UB -> GM (TQue<VECOUT>) V_MTE3, UB -> UB (TQueBind<VECIN, VECOUT>) MTE2_MTE3;
// FreeTensor signals the reverse event.
inline void QueueEngines(TPosition src, TPosition dst, Engine& producer, Engine& consumer)
{
    if (src == TPosition::GM) {
        producer = Engine::MTE2;
        consumer = Engine::V;
    } else if (dst == TPosition::GM) {
        producer = Engine::V;
        consumer = Engine::MTE3;
    } else {
        producer = Engine::MTE2;
        consumer = Engine::MTE3;
    }
}

// The logical ends of TQue<pos> (as in the real API): VECIN is GM -> VECIN, VECOUT is VECOUT -> GM.
constexpr TPosition QueEnd(TPosition pos, bool isSrc)
{
    return pos == TPosition::VECIN ? (isSrc ? TPosition::GM : TPosition::VECIN)
           : pos == TPosition::VECOUT ? (isSrc ? TPosition::VECOUT : TPosition::GM)
                                      : pos;
}

} // namespace host_model

// ---- kernel context ----------------------------------------------------------------------------

__aicore__ inline int64_t GetBlockIdx() { return host_model::Core().blockIdx; }

namespace host_model {

// KERNEL_TASK_TYPE_DEFAULT(type): which cores the runtime starts for the kernel. The model runs
// vector cores only, so it accepts KERNEL_TYPE_AIV_ONLY and rejects the cube and mixed types;
// the launcher may also require the declaration (a kernel without it may start cube cores).
inline void DeclareTaskType(int type, bool aivOnly, const char* name)
{
    if (!aivOnly)
        Fail("KERNEL_TASK_TYPE_DEFAULT(", name, "): the host model runs vector cores only (KERNEL_TYPE_AIV_ONLY)");
    Core().taskType = type;
}

} // namespace host_model
__aicore__ inline int64_t GetBlockNum() { return host_model::State().blockNum; }

// ---- model state of the tensor classes (private to them; reached through Access) ---------------

namespace host_model {

// The model's view of a kernel object: its private member m_. Only the model uses it.
struct Access {
    template <class X>
    static auto& M(X& x)
    {
        return x.m_;
    }
};

// A LocalTensor: elements [byteOff/sizeof(T), ... + size) of one UB buffer, valid while the
// buffer's generation is `gen`.
template <typename T>
struct LocalState {
    std::shared_ptr<UbBuffer> buf;
    uint64_t gen = 0;
    uint32_t byteOff = 0; // offset of element 0 inside the buffer
    uint32_t size = 0;    // elements

    uint32_t UbOffset() const { return buf->ubOffset + byteOff; }
    uint8_t* Bytes() const { return Core().ub + UbOffset(); }

    void Live(const char* op) const
    {
        if (!buf) Fail(op, ": LocalTensor was never allocated (default-constructed)");
        if (gen != buf->generation || buf->state == UbBuffer::St::FREE) Fail(op, ": ", buf->owner, " used after FreeTensor");
        if (buf->state == UbBuffer::St::ENQUEUED) Fail(op, ": ", buf->owner, " used while enqueued (DeQue it first)");
    }

    void CheckIndex(uint32_t index, const char* op) const
    {
        Live(op);
        if (index >= size)
            Fail(op, ": index ", index, " out of bounds of a tensor of ", size, " elements in ", buf->owner);
    }
};

// A GlobalTensor: the buffer given to SetGlobalBuffer (base, size elements) seen from element off.
template <typename T>
struct GlobalState {
    T* base = nullptr;
    uint64_t size = 0;
    uint64_t off = 0;
    int region = -1;
    bool set = false;

    std::string Describe() const
    {
        std::string s = "tensor '";
        if (region >= 0) {
            const auto& reg = State().regions[region];
            uint64_t start = reinterpret_cast<uintptr_t>(base) - reinterpret_cast<uintptr_t>(reg.base);
            s += std::string(reg.name) + "' (buffer of " + std::to_string(size) + " elements";
            if (start != 0) s += " at byte " + std::to_string(start) + " of the allocation";
            return s + ")";
        }
        return s + "?' (buffer of " + std::to_string(size) + " elements)";
    }

    // Elements [off+first, off+first+count) must lie in the buffer.
    void Check(uint64_t first, uint64_t count, const char* op, const char* dir) const
    {
        if (!set) Fail(op, ": GlobalTensor used before SetGlobalBuffer");
        uint64_t a = off + first;
        if (a < off || a > size || count > size - a)
            Fail(op, " GM ", dir, " out of bounds: ", Describe(), " offset ", a, " count ", count);
    }
};

} // namespace host_model

// ---- LocalTensor -------------------------------------------------------------------------------

template <typename T>
class LocalTensor {
public:
    LocalTensor() = default;

    __aicore__ inline T GetValue(const uint32_t index) const
    {
        m_.CheckIndex(index, "LocalTensor::GetValue");
        uint64_t op = host_model::Issue(host_model::Engine::S);
        host_model::UbAccess(host_model::Engine::S, op, static_cast<uint32_t>(m_.UbOffset() + index * sizeof(T)),
                             sizeof(T), false, "LocalTensor::GetValue", m_.buf->owner, m_.buf->ubOffset);
        T v;
        std::memcpy(&v, m_.Bytes() + index * sizeof(T), sizeof(T));
        return v;
    }

    template <typename T1>
    __aicore__ inline void SetValue(const uint32_t index, const T1 value) const
    {
        m_.CheckIndex(index, "LocalTensor::SetValue");
        uint64_t op = host_model::Issue(host_model::Engine::S);
        host_model::UbAccess(host_model::Engine::S, op, static_cast<uint32_t>(m_.UbOffset() + index * sizeof(T)),
                             sizeof(T), true, "LocalTensor::SetValue", m_.buf->owner, m_.buf->ubOffset);
        T v = static_cast<T>(value);
        std::memcpy(m_.Bytes() + index * sizeof(T), &v, sizeof(T));
    }

    __aicore__ inline LocalTensor operator[](const uint32_t offset) const
    {
        m_.Live("LocalTensor::operator[]");
        if (offset > m_.size)
            host_model::Fail("LocalTensor::operator[]: offset ", offset, " past the end of a tensor of ", m_.size,
                             " elements in ", m_.buf->owner);
        LocalTensor t = *this;
        t.m_.byteOff += static_cast<uint32_t>(offset * sizeof(T));
        t.m_.size -= offset;
        return t;
    }

    __aicore__ inline uint32_t GetSize() const { return m_.size; }

    template <typename U>
    __aicore__ inline LocalTensor<U> ReinterpretCast() const
    {
        LocalTensor<U> t;
        auto& u = host_model::Access::M(t);
        u.buf = m_.buf;
        u.gen = m_.gen;
        u.byteOff = m_.byteOff;
        u.size = static_cast<uint32_t>(static_cast<uint64_t>(m_.size) * sizeof(T) / sizeof(U));
        return t;
    }

private:
    friend struct host_model::Access;
    host_model::LocalState<T> m_;
};

// ---- GlobalTensor ------------------------------------------------------------------------------

template <typename T>
class GlobalTensor {
public:
    GlobalTensor() = default;

    __aicore__ inline void SetGlobalBuffer(__gm__ T* buffer, uint64_t bufferSize)
    {
        m_ = host_model::GlobalState<T>{buffer, bufferSize, 0, -1, true};
        if (bufferSize == 0) return;
        m_.region = host_model::FindRegion(buffer);
        if (m_.region < 0)
            host_model::Fail("SetGlobalBuffer: pointer ", static_cast<const void*>(buffer), " (", bufferSize,
                             " elements) is not inside any GM allocation registered by the launcher");
        const auto& reg = host_model::State().regions[m_.region];
        uint64_t start = reinterpret_cast<uintptr_t>(buffer) - reinterpret_cast<uintptr_t>(reg.base);
        if (bufferSize > (reg.bytes - start) / sizeof(T))
            host_model::Fail("SetGlobalBuffer: buffer of ", bufferSize, " elements (", bufferSize * sizeof(T),
                             " bytes) at byte ", start, " of GM tensor '", reg.name, "' overruns the allocation of ",
                             reg.bytes, " bytes");
    }

    __aicore__ inline GlobalTensor operator[](const uint64_t offset) const
    {
        GlobalTensor t = *this;
        t.m_.off += offset;
        return t;
    }

    __aicore__ inline T GetValue(const uint64_t offset) const
    {
        m_.Check(offset, 1, "GlobalTensor::GetValue", "read");
        T* p = m_.base + m_.off + offset;
        host_model::GmTouch(m_.region, p, sizeof(T), false, "GlobalTensor::GetValue");
        T v;
        std::memcpy(&v, p, sizeof(T));
        return v;
    }

    __aicore__ inline void SetValue(const uint64_t offset, T value)
    {
        m_.Check(offset, 1, "GlobalTensor::SetValue", "write");
        T* p = m_.base + m_.off + offset;
        host_model::GmTouch(m_.region, p, sizeof(T), true, "GlobalTensor::SetValue");
        std::memcpy(p, &value, sizeof(T));
    }

    // As Huawei declares them: the address without an offset is read-only; only the offset form
    // gives a writable pointer (within the buffer, its end included).
    __aicore__ inline const __gm__ T* GetPhyAddr() const { return m_.base + m_.off; }
    __aicore__ inline __gm__ T* GetPhyAddr(const uint64_t offset) const
    {
        m_.Check(offset, 0, "GlobalTensor::GetPhyAddr", "address");
        return m_.base + m_.off + offset;
    }
    // The bufferSize given to SetGlobalBuffer, also for a tensor made by operator[] (Huawei's semantics).
    __aicore__ inline uint64_t GetSize() const { return m_.size; }

private:
    friend struct host_model::Access;
    host_model::GlobalState<T> m_;
};

// ---- queues and buffers ------------------------------------------------------------------------

namespace host_model {

// A tensor over a whole UB buffer (or its first `elements` elements).
template <typename T>
LocalTensor<T> Whole(const std::shared_ptr<UbBuffer>& b, uint32_t elements = UINT32_MAX)
{
    LocalTensor<T> t;
    auto& m = Access::M(t);
    m.buf = b;
    m.gen = b->generation;
    m.size = elements == UINT32_MAX ? static_cast<uint32_t>(b->bytes / sizeof(T)) : elements;
    return t;
}

} // namespace host_model

template <TPosition src, TPosition dst, int32_t depth, auto mask = 0>
class TQueBind {
public:
    __aicore__ inline TQueBind()
    {
        m_.name = std::string("TQueBind<") + host_model::PositionName(src) + "," + host_model::PositionName(dst) +
                     "," + std::to_string(depth) + ">";
        m_.position = src == TPosition::GM ? dst : src; // the UB end
        m_.depth = depth;
        host_model::QueueEngines(src, dst, m_.producer, m_.consumer);
    }
    TQueBind(const TQueBind&) = delete;
    TQueBind& operator=(const TQueBind&) = delete;

    template <typename T>
    __aicore__ inline LocalTensor<T> AllocTensor()
    {
        return host_model::Whole<T>(m_.Alloc());
    }

    template <typename T>
    __aicore__ inline void FreeTensor(LocalTensor<T>& tensor)
    {
        const auto& t = host_model::Access::M(tensor);
        m_.Free(t.buf, t.gen);
    }

    template <typename T>
    __aicore__ inline bool EnQue(const LocalTensor<T>& tensor)
    {
        const auto& t = host_model::Access::M(tensor);
        m_.EnQue(t.buf, t.gen);
        return true;
    }

    template <typename T>
    __aicore__ inline LocalTensor<T> DeQue()
    {
        return host_model::Whole<T>(m_.DeQue());
    }

protected:
    friend struct host_model::Access;
    host_model::QueueImpl m_;
};

template <TPosition pos, int32_t depth, auto mask = 0>
class TQue : public TQueBind<host_model::QueEnd(pos, true), host_model::QueEnd(pos, false), depth, mask> {
public:
    __aicore__ inline TQue()
    {
        this->m_.name = std::string("TQue<") + host_model::PositionName(pos) + "," + std::to_string(depth) + ">";
    }
};

template <TPosition pos = TPosition::LCM>
class TBuf {
public:
    TBuf() = default;
    TBuf(const TBuf&) = delete;
    TBuf& operator=(const TBuf&) = delete;

    template <typename T>
    __aicore__ inline LocalTensor<T> Get()
    {
        Need();
        return host_model::Whole<T>(m_);
    }

    template <typename T>
    __aicore__ inline LocalTensor<T> Get(uint32_t len)
    {
        Need();
        if (static_cast<uint64_t>(len) * sizeof(T) > m_->bytes)
            host_model::Fail("TBuf::Get(", len, "): ", len * sizeof(T), " bytes exceed ", m_->owner, " of ",
                             m_->bytes, " bytes");
        return host_model::Whole<T>(m_, len);
    }

private:
    friend struct host_model::Access;
    std::shared_ptr<host_model::UbBuffer> m_;
    void Need() const
    {
        if (!m_) host_model::Fail("TBuf::Get before TPipe::InitBuffer");
    }
};

class TPipe {
public:
    __aicore__ inline TPipe()
    {
        auto& c = host_model::Core();
        if (c.pipeAlive) host_model::Fail("a second TPipe object on one core (one TPipe per kernel)");
        c.pipeAlive = true;
        c.ubUsed = 0;
        std::fill(std::begin(c.positionBuffers), std::end(c.positionBuffers), 0u);
    }
    __aicore__ inline ~TPipe()
    {
        auto& c = host_model::Core();
        c.pipeAlive = false;
        c.ubUsed = 0;
        std::fill(std::begin(c.positionBuffers), std::end(c.positionBuffers), 0u);
    }
    TPipe(const TPipe&) = delete;
    TPipe& operator=(const TPipe&) = delete;

    template <class T>
    __aicore__ inline bool InitBuffer(T& que, uint8_t num, uint32_t len)
    {
        host_model::Access::M(que).Init(num, len);
        return true;
    }

    template <TPosition bufPos>
    __aicore__ inline bool InitBuffer(TBuf<bufPos>& buf, uint32_t len)
    {
        std::string who = std::string("TBuf<") + host_model::PositionName(bufPos) + ">";
        auto& slot = host_model::Access::M(buf);
        if (slot) host_model::Fail("InitBuffer(", who, "): this TBuf was already initialised");
        uint32_t off = host_model::ReserveUb(who, bufPos, 1, len);
        auto b = std::make_shared<host_model::UbBuffer>();
        b->owner = who + " #" + std::to_string(host_model::Core().queueSerial++);
        b->ubOffset = off;
        b->bytes = host_model::RoundUp32(len);
        b->state = host_model::UbBuffer::St::TBUF;
        host_model::FillGarbage(*b);
        slot = b;
        return true;
    }

    template <HardEvent evt>
    __aicore__ inline TEventID AllocEventID()
    {
        uint8_t& used = eventIds_[static_cast<int>(evt)];
        for (int id = 0; id < host_model::kEventIds; ++id) {
            if (!(used & (1u << id))) {
                used |= static_cast<uint8_t>(1u << id);
                return static_cast<TEventID>(id);
            }
        }
        host_model::Fail("TPipe::AllocEventID<HardEvent::", host_model::HardEventName(evt), ">: all ",
                         host_model::kEventIds, " ids are taken");
    }

    template <HardEvent evt>
    __aicore__ inline void ReleaseEventID(TEventID id)
    {
        uint8_t& used = eventIds_[static_cast<int>(evt)];
        if (id < 0 || id >= host_model::kEventIds || !(used & (1u << id)))
            host_model::Fail("TPipe::ReleaseEventID<HardEvent::", host_model::HardEventName(evt), ">(", int(id),
                             "): id was not allocated");
        used &= static_cast<uint8_t>(~(1u << id));
    }

    __aicore__ inline TEventID FetchEventID(HardEvent evt)
    {
        uint8_t used = eventIds_[static_cast<int>(evt)];
        for (int id = 0; id < host_model::kEventIds; ++id)
            if (!(used & (1u << id))) return static_cast<TEventID>(id);
        host_model::Fail("TPipe::FetchEventID(HardEvent::", host_model::HardEventName(evt), "): all ids are taken");
    }

    template <HardEvent evt>
    __aicore__ inline TEventID FetchEventID()
    {
        return FetchEventID(evt);
    }

private:
    uint8_t eventIds_[static_cast<int>(HardEvent::MAX) + 1] = {};
};

// ---- data movement -----------------------------------------------------------------------------

struct DataCopyParams {
    __aicore__ DataCopyParams() {}
    __aicore__ DataCopyParams(const uint16_t count, const uint16_t len, const uint16_t srcStrideIn,
                              const uint16_t dstStrideIn)
        : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn)
    {
    }
    uint16_t blockCount = 1;
    uint16_t blockLen = 0; // 32-byte units
    union {                // gaps in 32-byte units, from the end of one block to the start of the next
        uint16_t srcGap = 0;
        uint16_t srcStride; // older name
    };
    union {
        uint16_t dstGap = 0;
        uint16_t dstStride; // older name
    };
};

struct DataCopyExtParams {
    __aicore__ DataCopyExtParams() {}
    __aicore__ DataCopyExtParams(const uint16_t count, const uint32_t len, const uint32_t srcStrideIn,
                                 const uint32_t dstStrideIn, const uint32_t rsvIn)
        : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn), rsv(rsvIn)
    {
    }
    uint16_t blockCount = 1;
    uint32_t blockLen = 0;  // bytes
    uint32_t srcStride = 0; // gap: GM side in bytes, UB side in 32-byte blocks
    uint32_t dstStride = 0; // gap: GM side in bytes, UB side in 32-byte blocks
    uint32_t rsv = 0;
};

template <typename T>
struct DataCopyPadExtParams {
    __aicore__ DataCopyPadExtParams() {}
    __aicore__ DataCopyPadExtParams(const bool isPadValue, const uint8_t leftPadValue, const uint8_t rightPadValue,
                                    T padValue)
        : isPad(isPadValue), leftPadding(leftPadValue), rightPadding(rightPadValue), paddingValue(padValue)
    {
    }
    bool isPad = false;
    uint8_t leftPadding = 0;  // elements
    uint8_t rightPadding = 0; // elements
    T paddingValue = 0;
};

namespace host_model {

constexpr uint32_t kMaxBlockCount = 4095;
constexpr uint32_t kMaxBlockLen = 65535;
// DataCopyPad's blockLen: bytes in [1, 65535] as documented (docs/host_model.md), whatever the field's width.
constexpr uint32_t kMaxPadBlockLen = 65535;

// A GM<->UB copy made of `count` blocks. GM block i starts at gmFirst + i*gmPitch bytes (relative
// to the GlobalTensor's element 0), UB block i at i*ubPitch bytes; gmLen bytes move per block;
// on the UB side each block spans ubSpan bytes (ubLen rounded up) of which [ubData, ubData+gmLen)
// hold data.
struct CopyShape {
    uint32_t count;
    uint64_t gmLen, gmPitch;
    uint64_t ubPitch, ubData, ubSpan;
};

template <typename T>
void CheckUbSide(const LocalTensor<T>& tensor, const CopyShape& s, const char* op)
{
    const auto& t = Access::M(tensor);
    t.Live(op);
    if (t.UbOffset() % kBlockBytes != 0)
        Fail(op, ": UB address not 32-byte aligned: ", t.buf->owner, " at byte offset ", t.byteOff,
             " (UB byte ", t.UbOffset(), ")");
    uint64_t extent = (static_cast<uint64_t>(s.count) - 1) * s.ubPitch + s.ubSpan;
    uint64_t have = static_cast<uint64_t>(t.size) * sizeof(T);
    if (extent > have)
        Fail(op, ": UB side spans ", extent, " bytes but the LocalTensor (", t.buf->owner, " at byte offset ",
             t.byteOff, ") has ", have, " bytes (", t.size, " elements)");
}

template <typename T>
void CheckGmSide(const GlobalTensor<T>& tensor, const CopyShape& s, const char* op, const char* dir)
{
    const auto& g = Access::M(tensor);
    if (!g.set) Fail(op, ": GlobalTensor used before SetGlobalBuffer");
    if (reinterpret_cast<uintptr_t>(g.base + g.off) % sizeof(T) != 0 || s.gmPitch % sizeof(T) != 0)
        Fail(op, ": GM address of ", g.Describe(), " offset ", g.off, " (block pitch ", s.gmPitch,
             " bytes) is not aligned to the ", sizeof(T), "-byte element type");
    uint64_t extentBytes = (static_cast<uint64_t>(s.count) - 1) * s.gmPitch + s.gmLen;
    uint64_t endElem = g.off + (extentBytes + sizeof(T) - 1) / sizeof(T);
    if (g.off > g.size || endElem > g.size) {
        std::ostringstream os;
        os << op << " GM " << dir << " out of bounds: " << g.Describe() << " offset " << g.off << " count "
           << (endElem - g.off);
        if (s.count > 1)
            os << " (blockCount " << s.count << ", " << s.gmLen << " bytes per block, pitch " << s.gmPitch
               << " bytes)";
        throw ModelError(os.str());
    }
}

template <typename T>
void CopyIn(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const CopyShape& s, const char* op)
{
    if (s.count == 0 || s.gmLen == 0) return;
    CheckUbSide(dst, s, op);
    CheckGmSide(src, s, op, "read");
    const auto& d = Access::M(dst);
    const auto& gs = Access::M(src);
    uint64_t opNo = Issue(Engine::MTE2);
    const uint8_t* g = reinterpret_cast<const uint8_t*>(gs.base + gs.off);
    for (uint32_t i = 0; i < s.count; ++i) {
        uint32_t ub = static_cast<uint32_t>(d.UbOffset() + i * s.ubPitch);
        UbAccess(Engine::MTE2, opNo, ub, static_cast<uint32_t>(s.ubSpan), true, op, d.buf->owner, d.buf->ubOffset);
        GmTouch(gs.region, g + i * s.gmPitch, s.gmLen, false, op);
        std::memcpy(Core().ub + ub + s.ubData, g + i * s.gmPitch, s.gmLen);
    }
}

template <typename T>
void CopyOut(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const CopyShape& s, const char* op)
{
    if (s.count == 0 || s.gmLen == 0) return;
    CheckUbSide(src, s, op);
    CheckGmSide(dst, s, op, "write");
    const auto& u = Access::M(src);
    const auto& gd = Access::M(dst);
    uint64_t opNo = Issue(Engine::MTE3);
    uint8_t* g = reinterpret_cast<uint8_t*>(gd.base + gd.off);
    for (uint32_t i = 0; i < s.count; ++i) {
        uint32_t ub = static_cast<uint32_t>(u.UbOffset() + i * s.ubPitch);
        UbAccess(Engine::MTE3, opNo, ub + static_cast<uint32_t>(s.ubData), static_cast<uint32_t>(s.gmLen), false,
                 op, u.buf->owner, u.buf->ubOffset);
        GmTouch(gd.region, g + i * s.gmPitch, s.gmLen, true, op);
        std::memcpy(g + i * s.gmPitch, Core().ub + ub + s.ubData, s.gmLen);
    }
}

inline void CheckParams(const DataCopyParams& p, const char* op)
{
    if (p.blockCount > kMaxBlockCount)
        Fail(op, ": DataCopyParams.blockCount ", p.blockCount, " out of range [0, ", kMaxBlockCount, "]");
    if (p.blockLen > kMaxBlockLen)
        Fail(op, ": DataCopyParams.blockLen ", p.blockLen, " out of range [0, ", kMaxBlockLen, "]");
}

inline CopyShape ShapeOf(const DataCopyParams& p, bool gmIsSrc)
{
    uint64_t len = static_cast<uint64_t>(p.blockLen) * kBlockBytes;
    uint64_t gmGap = static_cast<uint64_t>(gmIsSrc ? p.srcGap : p.dstGap) * kBlockBytes;
    uint64_t ubGap = static_cast<uint64_t>(gmIsSrc ? p.dstGap : p.srcGap) * kBlockBytes;
    return CopyShape{p.blockCount, len, len + gmGap, len + ubGap, 0, len};
}

template <typename T>
DataCopyParams CountParams(uint32_t count, const char* op)
{
    uint64_t bytes = static_cast<uint64_t>(count) * sizeof(T);
    if (bytes % kBlockBytes != 0)
        Fail(op, ": count ", count, " * sizeof(T) ", sizeof(T), " = ", bytes,
             " bytes is not a multiple of 32 (the hardware would round down)");
    if (bytes / kBlockBytes > kMaxBlockLen)
        Fail(op, ": count ", count, " moves ", bytes / kBlockBytes, " blocks of 32 B, more than ", kMaxBlockLen);
    return DataCopyParams(1, static_cast<uint16_t>(bytes / kBlockBytes), 0, 0);
}

inline void CheckExtParams(const DataCopyExtParams& p, size_t elem, const char* op)
{
    if (p.blockCount > kMaxBlockCount)
        Fail(op, ": DataCopyExtParams.blockCount ", p.blockCount, " out of range [0, ", kMaxBlockCount, "]");
    if (p.blockLen > kMaxPadBlockLen)
        Fail(op, ": DataCopyExtParams.blockLen ", p.blockLen, " bytes out of range [0, ", kMaxPadBlockLen, "]");
    if (p.blockLen % elem != 0)
        Fail(op, ": DataCopyExtParams.blockLen ", p.blockLen, " bytes is not a whole number of ", elem,
             "-byte elements");
}

} // namespace host_model

template <typename T>
__aicore__ inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& repeatParams)
{
    host_model::CheckParams(repeatParams, "DataCopy");
    host_model::CopyIn(dst, src, host_model::ShapeOf(repeatParams, true), "DataCopy");
}

template <typename T>
__aicore__ inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& repeatParams)
{
    host_model::CheckParams(repeatParams, "DataCopy");
    host_model::CopyOut(dst, src, host_model::ShapeOf(repeatParams, false), "DataCopy");
}

template <typename T>
__aicore__ inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const uint32_t count)
{
    DataCopy(dst, src, host_model::CountParams<T>(count, "DataCopy"));
}

template <typename T>
__aicore__ inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count)
{
    DataCopy(dst, src, host_model::CountParams<T>(count, "DataCopy"));
}

// GM -> UB for lengths that need not be 32-byte multiples. GM side: blockLen and srcStride (gap)
// in bytes; UB side: each block padded up to a 32-byte boundary, dstStride (gap) in 32-byte blocks.
template <typename T>
__aicore__ inline void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src,
                                   const DataCopyExtParams& dataCopyParams, const DataCopyPadExtParams<T>& padParams)
{
    const char* op = "DataCopyPad";
    host_model::CheckExtParams(dataCopyParams, sizeof(T), op);
    uint64_t left = static_cast<uint64_t>(padParams.leftPadding) * sizeof(T);
    uint64_t right = static_cast<uint64_t>(padParams.rightPadding) * sizeof(T);
    if (left > host_model::kBlockBytes || right > host_model::kBlockBytes)
        host_model::Fail(op, ": leftPadding ", int(padParams.leftPadding), " / rightPadding ",
                         int(padParams.rightPadding), " elements exceed 32 bytes");
    uint64_t len = dataCopyParams.blockLen;
    uint64_t span = host_model::RoundUp32(left + len + right);
    host_model::CopyShape s{dataCopyParams.blockCount, len, len + dataCopyParams.srcStride,
                            span + static_cast<uint64_t>(dataCopyParams.dstStride) * host_model::kBlockBytes, left,
                            span};
    host_model::CopyIn(dst, src, s, op);
    if (padParams.isPad && s.count > 0 && len > 0) {
        for (uint32_t i = 0; i < s.count; ++i) {
            uint8_t* blk = host_model::Access::M(dst).Bytes() + i * s.ubPitch;
            for (uint64_t k = 0; k < left; k += sizeof(T)) std::memcpy(blk + k, &padParams.paddingValue, sizeof(T));
            for (uint64_t k = 0; k < right; k += sizeof(T))
                std::memcpy(blk + left + len + k, &padParams.paddingValue, sizeof(T));
        }
    }
}

// UB -> GM writing exactly blockLen bytes per block. UB side: block i starts at a 32-byte boundary,
// srcStride (gap) in 32-byte blocks; GM side: dstStride (gap) in bytes.
template <typename T>
__aicore__ inline void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src,
                                   const DataCopyExtParams& dataCopyParams)
{
    const char* op = "DataCopyPad";
    host_model::CheckExtParams(dataCopyParams, sizeof(T), op);
    uint64_t len = dataCopyParams.blockLen;
    uint64_t span = host_model::RoundUp32(len);
    host_model::CopyShape s{dataCopyParams.blockCount, len, len + dataCopyParams.dstStride,
                            span + static_cast<uint64_t>(dataCopyParams.srcStride) * host_model::kBlockBytes, 0, span};
    host_model::CopyOut(dst, src, s, op);
}

// ---- synchronisation ---------------------------------------------------------------------------

template <HardEvent event>
__aicore__ inline void SetFlag(int32_t eventID)
{
    using namespace host_model;
    if (IgnoredOnVectorCore(event) || event == HardEvent::V_V) return; // V_V: a barrier on PIPE_V
    Engine from, to;
    if (!EventEngines(event, from, to))
        Fail("SetFlag<HardEvent::", HardEventName(event), ">: event not available on a vector core");
    if (eventID < 0 || eventID >= kEventIds)
        Fail("SetFlag<HardEvent::", HardEventName(event), ">(", eventID, "): event id out of range [0, ", kEventIds - 1,
             "]");
    auto key = std::make_pair(static_cast<int>(event), eventID);
    auto& flags = Core().flags;
    if (flags.count(key))
        Fail("SetFlag<HardEvent::", HardEventName(event), ">(", eventID,
             ") while the previous SetFlag with this event and id has not been waited");
    flags[key] = SignalClock(from);
}

template <HardEvent event>
__aicore__ inline void WaitFlag(int32_t eventID)
{
    using namespace host_model;
    if (IgnoredOnVectorCore(event) || event == HardEvent::V_V) return; // V_V: nothing to wait for
    Engine from, to;
    if (!EventEngines(event, from, to))
        Fail("WaitFlag<HardEvent::", HardEventName(event), ">: event not available on a vector core");
    if (eventID < 0 || eventID >= kEventIds)
        Fail("WaitFlag<HardEvent::", HardEventName(event), ">(", eventID, "): event id out of range [0, ",
             kEventIds - 1, "]");
    auto key = std::make_pair(static_cast<int>(event), eventID);
    auto& flags = Core().flags;
    auto it = flags.find(key);
    if (it == flags.end())
        Fail("WaitFlag<HardEvent::", HardEventName(event), ">(", eventID, ") without a matching SetFlag");
    Receive(to, it->second);
    flags.erase(it);
}

template <pipe_t pipe>
__aicore__ inline void PipeBarrier()
{
    if (pipe == PIPE_ALL) host_model::BarrierAll();
}

// ---- vector instructions -----------------------------------------------------------------------

#include "host_model_vector.h"

} // namespace AscendC

#endif // ASCEND_KV_HOST_MODEL_KERNEL_OPERATOR_H
