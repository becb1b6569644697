// Test driver for the AscendC host model: `model_cases <case>` runs one small kernel on the model
// and prints "rc=<code>" and "msg=<message>" (and, for the copy cases, "equal=<0|1>").
// Each misuse case breaks exactly one rule; tests/test_host_model.py checks the message.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "host_model_launcher.h"
#include "kernel_operator.h"

using namespace AscendC;

namespace {

constexpr int32_t kTile = 256; // int32 elements per chunk = 1 KB

// ---- correct kernels -----------------------------------------------------------------------

// Queue-based double buffering: VECIN bound to VECOUT, two buffers.
class QueueCopy {
public:
    __aicore__ inline void Init(GM_ADDR src, GM_ADDR dst, uint32_t total)
    {
        uint32_t per = total / GetBlockNum();
        uint64_t start = per * GetBlockIdx();
        count_ = per;
        src_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(src) + start, per);
        dst_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(dst) + start, per);
        pipe_.InitBuffer(que_, 2, kTile * sizeof(int32_t));
    }
    __aicore__ inline void Process()
    {
        for (uint32_t done = 0; done < count_; done += kTile) {
            LocalTensor<int32_t> t = que_.AllocTensor<int32_t>();
            DataCopy(t, src_[done], kTile);
            que_.EnQue(t);
            LocalTensor<int32_t> u = que_.DeQue<int32_t>();
            DataCopy(dst_[done], u, kTile);
            que_.FreeTensor(u);
        }
    }

private:
    TPipe pipe_;
    TQueBind<TPosition::VECIN, TPosition::VECOUT, 1> que_;
    GlobalTensor<int32_t> src_, dst_;
    uint32_t count_ = 0;
};

extern "C" __global__ __aicore__ void queue_copy(GM_ADDR src, GM_ADDR dst, uint32_t total)
{
    QueueCopy op;
    op.Init(src, dst, total);
    op.Process();
}

// Explicit ping-pong with SetFlag/WaitFlag over one TBuf split in two halves; rows strided
// through DataCopyParams (gaps) to exercise the block units.
extern "C" __global__ __aicore__ void flag_copy(GM_ADDR src, GM_ADDR dst, uint32_t total)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 2 * kTile * sizeof(int32_t));
    GlobalTensor<int32_t> s, d;
    uint32_t per = total / GetBlockNum();
    uint64_t start = per * GetBlockIdx();
    s.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(src) + start, per);
    d.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(dst) + start, per);
    LocalTensor<int32_t> half0 = buf.Get<int32_t>();
    SetFlag<HardEvent::MTE3_MTE2>(EVENT_ID0);
    SetFlag<HardEvent::MTE3_MTE2>(EVENT_ID1);
    uint32_t i = 0;
    for (uint32_t done = 0; done < per; done += kTile, ++i) {
        int32_t id = static_cast<int32_t>(i & 1);
        LocalTensor<int32_t> t = half0[(i & 1) * kTile];
        WaitFlag<HardEvent::MTE3_MTE2>(id);
        // kTile int32 = 32 blocks; copy as 4 blocks of 8 (no gaps) to exercise DataCopyParams
        DataCopy(t, s[done], DataCopyParams(4, 8, 0, 0));
        SetFlag<HardEvent::MTE2_MTE3>(id);
        WaitFlag<HardEvent::MTE2_MTE3>(id);
        DataCopy(d[done], t, kTile);
        SetFlag<HardEvent::MTE3_MTE2>(id);
    }
    WaitFlag<HardEvent::MTE3_MTE2>(EVENT_ID0);
    WaitFlag<HardEvent::MTE3_MTE2>(EVENT_ID1);
}

// Strided gather: every other 32-byte block of src (srcGap 1) into contiguous UB, then a strided
// scatter to dst (dstGap 1). Checks the gap units: dst[2k] = src[2k] blocks, dst odd blocks kept.
extern "C" __global__ __aicore__ void gap_copy(GM_ADDR src, GM_ADDR dst, uint32_t total)
{
    TPipe pipe;
    TQueBind<TPosition::VECIN, TPosition::VECOUT, 1> q;
    pipe.InitBuffer(q, 1, total * sizeof(int32_t) / 2);
    GlobalTensor<int32_t> s, d;
    s.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(src), total);
    d.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(dst), total);
    uint16_t blocks = static_cast<uint16_t>(total * sizeof(int32_t) / 32 / 2);
    LocalTensor<int32_t> t = q.AllocTensor<int32_t>();
    DataCopy(t, s, DataCopyParams(blocks, 1, 1, 0));
    q.EnQue(t);
    t = q.DeQue<int32_t>();
    DataCopy(d, t, DataCopyParams(blocks, 1, 0, 1));
    q.FreeTensor(t);
}

// DataCopyPad in: 20-byte rows (5 int32) out of 8-int32 rows, padded in UB to 32 B with -1; then
// `store` writes the UB rows to dst.
template <typename Store>
void PadIn(GM_ADDR src, GM_ADDR dst, uint32_t rows, Store store)
{
    TPipe pipe;
    TQueBind<TPosition::VECIN, TPosition::VECOUT, 1> q;
    pipe.InitBuffer(q, 1, rows * 32);
    GlobalTensor<int32_t> s, d;
    s.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(src), rows * 8);
    d.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(dst), rows * 8);
    LocalTensor<int32_t> t = q.AllocTensor<int32_t>();
    DataCopyPad(t, s, DataCopyExtParams(static_cast<uint16_t>(rows), 20, 12, 0, 0),
                DataCopyPadExtParams<int32_t>(true, 0, 3, -1));
    q.EnQue(t);
    t = q.DeQue<int32_t>();
    store(d, t);
    q.FreeTensor(t);
}

// PadIn, written back as 20-byte rows with a 12-byte GM gap.
extern "C" __global__ __aicore__ void pad_copy(GM_ADDR src, GM_ADDR dst, uint32_t rows)
{
    PadIn(src, dst, rows, [rows](GlobalTensor<int32_t>& d, LocalTensor<int32_t>& t) {
        DataCopyPad(d, t, DataCopyExtParams(static_cast<uint16_t>(rows), 20, 0, 12, 0));
    });
}

// PadIn, then whole 32-byte rows out with DataCopy: dst rows are src[0..5) followed by three -1.
extern "C" __global__ __aicore__ void pad_fill(GM_ADDR src, GM_ADDR dst, uint32_t rows)
{
    PadIn(src, dst, rows, [rows](GlobalTensor<int32_t>& d, LocalTensor<int32_t>& t) { DataCopy(d, t, rows * 8); });
}

// `reads` DataCopyPad blocks of readLen bytes from src into UB, then one block of writeLen bytes
// back to dst: the blockLen limit of 65535 bytes on either side.
extern "C" __global__ __aicore__ void pad_long(GM_ADDR src, GM_ADDR dst, uint16_t reads, uint32_t readLen,
                                               uint32_t writeLen)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    TPipe pipe;
    TQueBind<TPosition::VECIN, TPosition::VECOUT, 1> q;
    pipe.InitBuffer(q, 1, 2 * 65536);
    GlobalTensor<uint8_t> s, d;
    s.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(src), 2 * 65536);
    d.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(dst), 2 * 65536);
    LocalTensor<uint8_t> t = q.AllocTensor<uint8_t>();
    DataCopyPad(t, s, DataCopyExtParams(reads, readLen, 0, 0, 0), DataCopyPadExtParams<uint8_t>(false, 0, 0, 0));
    q.EnQue(t);
    t = q.DeQue<uint8_t>();
    DataCopyPad(d, t, DataCopyExtParams(1, writeLen, 0, 0, 0));
    q.FreeTensor(t);
}

std::string g_case;

// ---- strided views: GM regions whose span has gaps ---------------------------------------------
// "k" and "v" are two views of one buffer of 64 blocks of 32 bytes, interleaved block by block:
// k holds the even blocks, v (starting one block later) the odd ones. Each copies its 32 blocks
// to dst with a strided DataCopyPad; the misuse cases read a gap or write through the wrong view.
extern "C" __global__ __aicore__ void views_kernel(GM_ADDR k, GM_ADDR v, GM_ADDR dst, uint32_t blocks)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    const std::string& c = g_case;
    TPipe pipe;
    TQueBind<TPosition::VECIN, TPosition::VECOUT, 1> q;
    pipe.InitBuffer(q, 1, blocks * 32);
    GlobalTensor<uint8_t> kg, vg, d;
    kg.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(k), (2 * blocks - 1) * 32);
    vg.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(v), (2 * blocks - 1) * 32);
    d.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(dst), 2 * blocks * 32);
    LocalTensor<uint8_t> t = q.AllocTensor<uint8_t>();
    DataCopyPadExtParams<uint8_t> pad(false, 0, 0, 0);
    const uint16_t n = static_cast<uint16_t>(blocks);
    if (c == "view_gap_read") {
        DataCopy(t, kg, 64); // blocks 0 and 1 of k's span: block 1 is v's
    } else if (c == "view_write_through_other") {
        DataCopyPad(t, kg, DataCopyExtParams(n, 32, 32, 0, 0), pad);
        q.EnQue(t);
        t = q.DeQue<uint8_t>();
        DataCopyPad(kg[32], t, DataCopyExtParams(1, 32, 0, 0, 0)); // k's span, v's element
    } else {
        DataCopyPad(t, vg, DataCopyExtParams(n, 32, 32, 0, 0), pad);
        q.EnQue(t);
        t = q.DeQue<uint8_t>();
        DataCopyPad(d, t, DataCopyExtParams(n, 32, 0, 32, 0)); // dst's odd blocks
    }
    q.FreeTensor(t);
}

// ---- misuse kernels (one rule each); `which` selects the mistake ------------------------------

extern "C" __global__ __aicore__ void misuse(GM_ADDR src, GM_ADDR dst, uint32_t total)
{
    const std::string& c = g_case;
    TPipe pipe;
    TQueBind<TPosition::VECIN, TPosition::VECOUT, 1> q;
    GlobalTensor<int32_t> s, d;
    s.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(src), total);
    d.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(dst), total);
    if (c == "ub_overalloc") {
        pipe.InitBuffer(q, 2, 1024 * 100); // 200 KB > UB
        return;
    }
    pipe.InitBuffer(q, 2, kTile * sizeof(int32_t));
    LocalTensor<int32_t> t = q.AllocTensor<int32_t>();
    if (c == "misaligned_ub") {
        DataCopy(t[4], s, 64); // UB offset 16 bytes
    } else if (c == "count_not_32b") {
        DataCopy(t, s, 12); // 48 bytes
    } else if (c == "gm_read_oob") {
        DataCopy(t, s[total - 16], 32); // 16 elements past the end
    } else if (c == "gm_write_oob") {
        DataCopy(t, s, 32);
        q.EnQue(t);
        t = q.DeQue<int32_t>();
        DataCopy(d[total - 8], t, 32);
    } else if (c == "gm_getvalue_oob") {
        (void)s.GetValue(total);
    } else if (c == "gm_setvalue_oob") {
        d[total - 1].SetValue(1, 7);
    } else if (c == "block_count_4096") {
        DataCopy(t, s, DataCopyParams(4096, 1, 0, 0));
    } else if (c == "count_over_blocklen") {
        DataCopy(t, s, 65536u * 8u); // 65536 blocks of 32 B in one burst
    } else if (c == "ub_overrun") {
        DataCopy(t, s, DataCopyParams(2, kTile * sizeof(int32_t) / 32, 0, 0)); // 2 KB into 1 KB
    } else if (c == "unpaired_setflag") {
        SetFlag<HardEvent::MTE2_MTE3>(EVENT_ID0);
    } else if (c == "wait_without_set") {
        WaitFlag<HardEvent::MTE3_MTE2>(EVENT_ID1);
    } else if (c == "wrong_flag_id") {
        DataCopy(t, s, kTile);
        SetFlag<HardEvent::MTE2_MTE3>(EVENT_ID0);
        WaitFlag<HardEvent::MTE2_MTE3>(EVENT_ID1);
    } else if (c == "double_setflag") {
        SetFlag<HardEvent::MTE2_MTE3>(EVENT_ID2);
        SetFlag<HardEvent::MTE2_MTE3>(EVENT_ID2);
    } else if (c == "event_id_8") {
        SetFlag<HardEvent::MTE2_MTE3>(8);
    } else if (c == "deque_empty") {
        (void)q.DeQue<int32_t>();
    } else if (c == "alloc_beyond_num") {
        LocalTensor<int32_t> t2 = q.AllocTensor<int32_t>();
        LocalTensor<int32_t> t3 = q.AllocTensor<int32_t>();
        (void)t2;
        (void)t3;
    } else if (c == "enque_beyond_depth") {
        LocalTensor<int32_t> t2 = q.AllocTensor<int32_t>();
        q.EnQue(t);
        q.EnQue(t2);
    } else if (c == "free_foreign") {
        TQueBind<TPosition::VECIN, TPosition::VECOUT, 1> other;
        pipe.InitBuffer(other, 1, 64);
        LocalTensor<int32_t> o = other.AllocTensor<int32_t>();
        q.FreeTensor(o);
    } else if (c == "not_freed") {
        return; // t never freed
    } else if (c == "use_after_free") {
        q.FreeTensor(t);
        DataCopy(t, s, 32);
    } else if (c == "use_while_enqueued") {
        q.EnQue(t);
        DataCopy(t, s, 32);
    } else if (c == "garbage") {
        // read before write: print the first UB bytes through GM
        int32_t v = t.GetValue(0);
        d.SetValue(0, v);
    } else if (c == "raw_no_sync") {
        DataCopy(t, s, kTile);
        DataCopy(d, t, kTile); // MTE3 reads what MTE2 wrote, no ordering
    } else if (c == "war_no_sync") {
        DataCopy(t, s, kTile);
        q.EnQue(t);
        t = q.DeQue<int32_t>();
        DataCopy(d, t, kTile);
        DataCopy(t, s, kTile); // MTE2 overwrites what MTE3 still reads
    } else if (c == "scalar_read_no_sync") {
        DataCopy(t, s, kTile);
        (void)t.GetValue(3); // S reads what MTE2 wrote
    } else if (c == "scalar_read_synced") {
        DataCopy(t, s, kTile);
        SetFlag<HardEvent::MTE2_S>(EVENT_ID0);
        WaitFlag<HardEvent::MTE2_S>(EVENT_ID0);
        d.SetValue(0, t.GetValue(3));
    } else if (c == "barrier_all") {
        DataCopy(t, s, kTile);
        PipeBarrier<PIPE_ALL>();
        DataCopy(d, t, kTile);
    } else if (c == "write_input") {
        q.EnQue(t);
        t = q.DeQue<int32_t>();
        DataCopy(s, t, 32); // src is registered read-only
    } else if (c == "setglobalbuffer_outside") {
        GlobalTensor<int32_t> g;
        g.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(src) + 8, total); // runs 8 past the allocation
    } else if (c == "cross_core_race") {
        DataCopy(t, s, 32);
        q.EnQue(t);
        t = q.DeQue<int32_t>();
        DataCopy(d, t, 32); // every core writes dst[0:32]
    } else if (c == "cross_core_read_race") {
        DataCopy(t, GetBlockIdx() == 0 ? s : d, 32); // core 1 reads dst[0:32], which core 0 writes
        q.EnQue(t);
        t = q.DeQue<int32_t>();
        if (GetBlockIdx() == 0) DataCopy(d, t, 32);
    } else if (c == "pad_over_32") {
        DataCopyPad(t, s, DataCopyExtParams(1, 20, 0, 0, 0), DataCopyPadExtParams<int32_t>(true, 0, 9, 0));
    } else if (c == "pad_len_not_elem") {
        DataCopyPad(t, s, DataCopyExtParams(1, 6, 0, 0, 0), DataCopyPadExtParams<int32_t>(false, 0, 0, 0));
    } else if (c == "vv_flag_is_a_barrier") {
        SetFlag<HardEvent::V_V>(EVENT_ID0); // a PIPE_V barrier: needs no WaitFlag
    } else if (c == "gm_misaligned") {
        GlobalTensor<int32_t> g;
        g.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(src + 2), 64);
        DataCopy(t, g, 32);
    } else if (c == "vecin_copy_out") {
        TQue<QuePosition::VECIN, 1> in;
        pipe.InitBuffer(in, 1, 128);
        LocalTensor<int32_t> x = in.AllocTensor<int32_t>();
        DataCopy(x, s, 32);
        in.EnQue(x);
        x = in.DeQue<int32_t>(); // orders MTE2 -> V only
        DataCopy(d, x, 32);      // MTE3 is not ordered after the copy in
        in.FreeTensor(x);
    } else if (c == "alloc_event_id") {
        TEventID id = pipe.AllocEventID<HardEvent::MTE2_MTE3>();
        DataCopy(t, s, 32);
        SetFlag<HardEvent::MTE2_MTE3>(id);
        WaitFlag<HardEvent::MTE2_MTE3>(id);
        DataCopy(d, t, 32);
        pipe.ReleaseEventID<HardEvent::MTE2_MTE3>(id);
    } else if (c == "cube_event") {
        SetFlag<HardEvent::MTE3_MTE1>(EVENT_ID0);
    } else if (c == "second_tpipe") {
        TPipe another;
    } else if (c == "position_limit") {
        TQue<QuePosition::VECIN, 1> a, b, e;
        pipe.InitBuffer(a, 2, 32);
        pipe.InitBuffer(b, 2, 32);
        pipe.InitBuffer(e, 3, 32); // 2 (q) + 2 + 2 + 3 = 9 VECIN buffers
    } else if (c == "restage_without_s_mte2") {
        DataCopy(t, s, kTile);
        SetFlag<HardEvent::MTE2_S>(EVENT_ID0);
        WaitFlag<HardEvent::MTE2_S>(EVENT_ID0);
        (void)t.GetValue(3);
        DataCopy(t, s[kTile], kTile); // MTE2 overwrites what S read, no S_MTE2 flag
    } else if (c == "restage_synced") {
        DataCopy(t, s, kTile);
        SetFlag<HardEvent::MTE2_S>(EVENT_ID0);
        WaitFlag<HardEvent::MTE2_S>(EVENT_ID0);
        (void)t.GetValue(3);
        SetFlag<HardEvent::S_MTE2>(EVENT_ID0);
        WaitFlag<HardEvent::S_MTE2>(EVENT_ID0);
        DataCopy(t, s[kTile], kTile);
        SetFlag<HardEvent::MTE2_S>(EVENT_ID0);
        WaitFlag<HardEvent::MTE2_S>(EVENT_ID0);
        d.SetValue(0, t.GetValue(3));
    } else if (c == "task_type_aic") {
        KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    } else if (c == "cpp_exception") {
        throw std::runtime_error("boom");
    } else if (c == "getvalue_ub_oob") {
        (void)t.GetValue(kTile);
    } else {
        std::printf("unknown case %s\n", c.c_str());
        std::exit(2);
    }
    if (c != "alloc_beyond_num" && c != "enque_beyond_depth") {
        q.FreeTensor(t);
    }
}

} // namespace

int main(int argc, char** argv)
{
    if (argc < 2) {
        std::printf("usage: %s <case> [numBlocks] [ubBytes]\n", argv[0]);
        return 2;
    }
    std::string name = argv[1];
    uint32_t blocks = argc > 2 ? static_cast<uint32_t>(std::stoul(argv[2])) : 4;
    uint32_t ub = argc > 3 ? static_cast<uint32_t>(std::stoul(argv[3])) : host_model::kDefaultUbBytes;
    const uint32_t total = 4096; // int32 elements
    std::vector<int32_t> src(total), dst(total, 0x11111111);
    for (uint32_t i = 0; i < total; ++i) src[i] = static_cast<int32_t>(i * 2654435761u);
    host_model::GmRegion regions[] = {
        {src.data(), src.size() * sizeof(int32_t), "src", false},
        {dst.data(), dst.size() * sizeof(int32_t), "dst", true},
    };
    char err[1024];
    int rc;
    std::vector<int32_t> expect;
    if (name == "queue_copy" || name == "flag_copy") {
        auto k = name == "queue_copy" ? queue_copy : flag_copy;
        rc = ASCENDC_HOST_LAUNCH(k, blocks, ub, regions, 2, err, sizeof(err), reinterpret_cast<GM_ADDR>(src.data()),
                                 reinterpret_cast<GM_ADDR>(dst.data()), total);
        expect = src;
    } else if (name == "gap_copy") {
        rc = ASCENDC_HOST_LAUNCH(gap_copy, 1, ub, regions, 2, err, sizeof(err), reinterpret_cast<GM_ADDR>(src.data()),
                                 reinterpret_cast<GM_ADDR>(dst.data()), total);
        expect = dst;
        for (uint32_t i = 0; i < total; ++i)
            if ((i / 8) % 2 == 0) expect[i] = src[i];
    } else if (name == "pad_copy" || name == "pad_fill") {
        const bool fill = name == "pad_fill";
        auto k = fill ? pad_fill : pad_copy;
        rc = ASCENDC_HOST_LAUNCH(k, 1, ub, regions, 2, err, sizeof(err), reinterpret_cast<GM_ADDR>(src.data()),
                                 reinterpret_cast<GM_ADDR>(dst.data()), total / 8);
        // pad_copy leaves the last 3 int32 of each row of dst alone; pad_fill writes -1 there.
        expect = fill ? src : dst;
        for (uint32_t i = 0; i < total; ++i) {
            if (i % 8 < 5) {
                expect[i] = src[i];
            } else if (fill) {
                expect[i] = -1;
            }
        }
    } else if (name == "pad_len_limit" || name == "pad_read_over_limit" || name == "pad_write_over_limit") {
        // blockLen 65535 (the largest documented) moves; 65536 is refused reading, or writing after
        // a read of two 32768-byte blocks.
        const bool write_over = name == "pad_write_over_limit";
        const uint32_t len = name == "pad_len_limit" ? 65535 : 65536;
        std::vector<uint8_t> in(2 * 65536), out(2 * 65536, 0x11);
        for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>((i * 2654435761u) >> 24);
        host_model::GmRegion buffers[] = {{in.data(), in.size(), "src", false}, {out.data(), out.size(), "dst", true}};
        rc = host_model::Launch(1, ub, buffers, 2, [&]() {
            pad_long(in.data(), out.data(), write_over ? 2 : 1, write_over ? len / 2 : len, len); },
            err, sizeof(err), host_model::kDefaultGarbage, true);
        std::vector<uint8_t> want(out.size(), 0x11);
        std::copy_n(in.begin(), len, want.begin());
        std::printf("rc=%d\nmsg=%s\nequal=%d\n", rc, err, want == out ? 1 : 0);
        return 0;
    } else if (name == "undeclared_task_type") {
        rc = host_model::Launch(1, ub, regions, 2, [&]() { queue_copy(reinterpret_cast<GM_ADDR>(src.data()),
                                                                    reinterpret_cast<GM_ADDR>(dst.data()), total); },
                                err, sizeof(err), host_model::kDefaultGarbage, true);
    } else if (name.rfind("view", 0) == 0) {
        // src as 64 blocks: k = its even blocks, v = its odd blocks (v starts one block in).
        std::vector<uint8_t> even(63 * 32, 0); // relative to each view's base: its blocks 0, 2, ..., 62
        for (uint32_t b = 0; b < 63; b += 2) std::fill_n(even.begin() + b * 32, 32, 1);
        const bool written = name == "view_write_through_other" || name == "view_overlapping_outputs";
        uint8_t* base = reinterpret_cast<uint8_t*>(src.data());
        host_model::GmRegion views[] = {
            {base, 63 * 32, "k", written, name == "view_overlapping_outputs" ? nullptr : even.data()},
            {base + 32, 63 * 32, "v", written, even.data()},
            {dst.data(), 64 * 32, "dst", true, nullptr},
        };
        g_case = name;
        rc = host_model::Launch(1, ub, views, 3, [&]() { views_kernel(base, base + 32, reinterpret_cast<GM_ADDR>(dst.data()), 32); },
                                err, sizeof(err), host_model::kDefaultGarbage, true);
        if (name == "view_copy") {
            expect = std::vector<int32_t>(total, 0x11111111);
            for (uint32_t i = 0; i < 64 * 8; ++i)
                if ((i / 8) % 2 == 0) expect[i] = src[i + 8]; // dst block 2j = v's element j = src block 2j + 1
        }
    } else {
        g_case = name;
        rc = ASCENDC_HOST_LAUNCH(misuse, blocks, ub, regions, 2, err, sizeof(err),
                                 reinterpret_cast<GM_ADDR>(src.data()), reinterpret_cast<GM_ADDR>(dst.data()), total);
    }
    std::printf("rc=%d\nmsg=%s\n", rc, err);
    if (!expect.empty()) std::printf("equal=%d\n", expect == dst ? 1 : 0);
    std::printf("dst0=%08x\n", static_cast<uint32_t>(dst[0]));
    return 0;
}
