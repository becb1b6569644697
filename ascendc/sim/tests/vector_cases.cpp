// Test driver for the host model's vector instructions and the kernels' row arithmetic
// (ascendc/kernels/quant_row.h): `vector_cases <case> <args...>` runs one small kernel on one core
// of the model and prints "rc=<code>" and "msg=<message>"; data cases read their inputs from and
// write their outputs to files named on the command line. tests/test_host_model_vector.py checks
// the outputs against the plain torch reference and each misuse's message.
//
//   cast <dst> <src> <mode> <n> <in> <out>       Cast of n elements (types: float half bfloat16 int32 int8)
//   quant <xtype> <compute> <divide> <offset> <rows> <n> <x> <scale> <offset> <out>
//                                                 static int8 rows (QuantizeStaticRow), compute 0/1/2
//   dynamic <xtype> <rows> <n> <x> <out> <scales>  dynamic int8 rows, multiplier 127/amax per row
//   dequant <offset> <rows> <n> <codes> <scale> <offset> <out>   float rows (DequantizeRow)
//   amax <heads> <headSize> <x> <out>             per-head amax of a float row (HeadExtremes, HeadAmax)
//   <misuse>                                      one broken rule (see Misuse below)
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "host_model_launcher.h"
#include "kernel_operator.h"
#include "../../kernels/quant_row.h"

using namespace AscendC;

namespace {

std::vector<uint8_t> ReadFile(const std::string& path)
{
    std::ifstream f(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes)
{
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// Copies n elements of GM `in` into a fresh VECIN tensor (queue ordered MTE2 -> V).
template <typename T>
LocalTensor<T> Load(TQue<TPosition::VECIN, 1>& q, const GlobalTensor<T>& in, uint32_t n)
{
    LocalTensor<T> t = q.AllocTensor<T>();
    DataCopy(t, in, n);
    q.EnQue(t);
    return q.DeQue<T>();
}

// Stores a VECOUT tensor's n elements to GM (queue ordered V -> MTE3) and frees it.
template <typename T>
void Store(TQue<TPosition::VECOUT, 1>& q, const GlobalTensor<T>& out, LocalTensor<T> t, uint32_t n)
{
    q.EnQue(t);
    t = q.DeQue<T>();
    DataCopy(out, t, n);
    q.FreeTensor(t);
}

template <typename D, typename S>
void CastKernel(GM_ADDR in, GM_ADDR out, uint32_t n, RoundMode mode)
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> qin;
    TQue<TPosition::VECOUT, 1> qout;
    pipe.InitBuffer(qin, 1, n * sizeof(S));
    pipe.InitBuffer(qout, 1, n * sizeof(D));
    GlobalTensor<S> src;
    GlobalTensor<D> dst;
    src.SetGlobalBuffer(reinterpret_cast<__gm__ S*>(in), n);
    dst.SetGlobalBuffer(reinterpret_cast<__gm__ D*>(out), n);
    LocalTensor<S> a = Load(qin, src, n);
    LocalTensor<D> b = qout.AllocTensor<D>();
    Cast(b, a, mode, n);
    qin.FreeTensor(a);
    Store(qout, dst, b, n);
}

// UB for rows of n elements: the scratch of quant_row.h plus `params` float vectors of n.
struct RowBuffers {
    TBuf<TPosition::VECCALC> work, narrow, wide, params;
    ascend_kv::QuantScratch scratch;

    void Init(TPipe& pipe, uint32_t n, uint32_t paramCount)
    {
        pipe.InitBuffer(work, n * sizeof(float));
        pipe.InitBuffer(narrow, n * sizeof(half));
        pipe.InitBuffer(wide, n * sizeof(int32_t));
        pipe.InitBuffer(params, paramCount * n * sizeof(float));
        scratch = {work.Get<float>(), narrow.Get<half>(), wide.Get<int32_t>()};
    }

    // Parameter vector k, copied in from GM and ordered before the vector unit reads it.
    LocalTensor<float> Param(uint32_t k, GM_ADDR gm, uint32_t n)
    {
        GlobalTensor<float> g;
        g.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(gm), n);
        LocalTensor<float> t = params.Get<float>()[k * n];
        DataCopy(t, g, n);
        SetFlag<HardEvent::MTE2_V>(EVENT_ID0);
        WaitFlag<HardEvent::MTE2_V>(EVENT_ID0);
        return t;
    }
};

// Row r of x as float: the input tensor itself for float, else converted into the work row.
template <typename T>
LocalTensor<float> AsFloat(const LocalTensor<T>& x, const ascend_kv::QuantScratch& s, uint32_t n)
{
    if constexpr (std::is_same_v<T, float>) {
        return x;
    } else {
        Cast(s.work, x, RoundMode::CAST_NONE, n);
        return s.work;
    }
}

template <typename T>
void QuantKernel(GM_ADDR x, GM_ADDR scale, GM_ADDR offset, GM_ADDR out, uint32_t rows, uint32_t n, bool divide,
                 bool hasOffset, uint8_t compute)
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> qin;
    TQue<TPosition::VECOUT, 1> qout;
    RowBuffers ub;
    pipe.InitBuffer(qin, 1, n * sizeof(T));
    pipe.InitBuffer(qout, 1, n);
    ub.Init(pipe, n, 2);
    LocalTensor<float> s = ub.Param(0, scale, n);
    LocalTensor<float> o = ub.Param(1, offset, n);
    GlobalTensor<T> gx;
    GlobalTensor<int8_t> gq;
    gx.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(x), rows * n);
    gq.SetGlobalBuffer(reinterpret_cast<__gm__ int8_t*>(out), rows * n);
    for (uint32_t r = 0; r < rows; ++r) {
        LocalTensor<T> in = Load(qin, gx[r * n], n);
        LocalTensor<int8_t> codes = qout.AllocTensor<int8_t>();
        ascend_kv::QuantizeStaticRow(codes, ub.scratch, AsFloat(in, ub.scratch, n), s, o, divide, hasOffset,
                                     compute, n);
        qin.FreeTensor(in);
        Store(qout, gq[r * n], codes, n);
    }
}

// Dynamic rows: amax on the scalar unit (NaN propagates), multiplier 127/amax, stored scale
// amax * fl32(1/127).
template <typename T>
void DynamicKernel(GM_ADDR x, GM_ADDR out, GM_ADDR scales, uint32_t rows, uint32_t n)
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> qin;
    TQue<TPosition::VECOUT, 1> qout;
    RowBuffers ub;
    pipe.InitBuffer(qin, 1, n * sizeof(T));
    pipe.InitBuffer(qout, 1, n);
    ub.Init(pipe, n, 1);
    GlobalTensor<T> gx;
    GlobalTensor<int8_t> gq;
    GlobalTensor<float> gs;
    gx.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(x), rows * n);
    gq.SetGlobalBuffer(reinterpret_cast<__gm__ int8_t*>(out), rows * n);
    gs.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(scales), rows);
    for (uint32_t r = 0; r < rows; ++r) {
        LocalTensor<T> in = Load(qin, gx[r * n], n);
        LocalTensor<float> xf = AsFloat(in, ub.scratch, n);
        LocalTensor<float> mag = ub.params.Get<float>();
        Abs(mag, xf, static_cast<int32_t>(n));
        SetFlag<HardEvent::V_S>(EVENT_ID0);
        WaitFlag<HardEvent::V_S>(EVENT_ID0);
        float amax = 0.0f;
        for (uint32_t i = 0; i < n; ++i) {
            const float v = mag.GetValue(i);
            amax = (v > amax || v != v) && amax == amax ? v : amax;
        }
        SetFlag<HardEvent::S_V>(EVENT_ID0);
        WaitFlag<HardEvent::S_V>(EVENT_ID0);
        LocalTensor<int8_t> codes = qout.AllocTensor<int8_t>();
        ascend_kv::QuantizeDynamicRow(codes, ub.scratch, xf, 127.0f / amax, n);
        qin.FreeTensor(in);
        Store(qout, gq[r * n], codes, n);
        gs.SetValue(r, amax * (1.0f / 127.0f));
    }
}

void DequantKernel(GM_ADDR codes, GM_ADDR scale, GM_ADDR offset, GM_ADDR out, uint32_t rows, uint32_t n,
                   bool hasOffset)
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> qin;
    TQue<TPosition::VECOUT, 1> qout;
    RowBuffers ub;
    pipe.InitBuffer(qin, 1, n);
    pipe.InitBuffer(qout, 1, n * sizeof(float));
    ub.Init(pipe, n, 2);
    LocalTensor<float> s = ub.Param(0, scale, n);
    LocalTensor<float> o = ub.Param(1, offset, n);
    GlobalTensor<int8_t> gq;
    GlobalTensor<float> gy;
    gq.SetGlobalBuffer(reinterpret_cast<__gm__ int8_t*>(codes), rows * n);
    gy.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(out), rows * n);
    for (uint32_t r = 0; r < rows; ++r) {
        LocalTensor<int8_t> in = Load(qin, gq[r * n], n);
        LocalTensor<float> y = qout.AllocTensor<float>();
        ascend_kv::DequantizeRow(y, ub.scratch, in, s, o, hasOffset, n);
        qin.FreeTensor(in);
        Store(qout, gy[r * n], y, n);
    }
}

// amax of each head of one float row of heads * headSize elements, by the vector unit.
void AmaxKernel(GM_ADDR x, GM_ADDR out, uint32_t heads, uint32_t headSize)
{
    const uint32_t n = heads * headSize;
    TPipe pipe;
    TQue<TPosition::VECIN, 1> qin;
    TBuf<TPosition::VECCALC> magnitude, stage, extremes;
    pipe.InitBuffer(qin, 1, n * sizeof(float));
    pipe.InitBuffer(magnitude, n * sizeof(float));
    pipe.InitBuffer(stage, n * sizeof(half));
    pipe.InitBuffer(extremes, heads * 8 * sizeof(float));
    GlobalTensor<float> gx, gy;
    gx.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(x), n);
    gy.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(out), heads);
    LocalTensor<float> in = Load(qin, gx, n);
    LocalTensor<float> mag = magnitude.Get<float>(), ext = extremes.Get<float>();
    Abs(mag, in, static_cast<int32_t>(n));
    ascend_kv::HeadExtremes(ext, mag, in, stage.Get<half>(), heads, headSize);
    SetFlag<HardEvent::V_S>(EVENT_ID0);
    WaitFlag<HardEvent::V_S>(EVENT_ID0);
    for (uint32_t h = 0; h < heads; ++h) {
        gy.SetValue(h, ascend_kv::HeadAmax(ext, h));
    }
    qin.FreeTensor(in);
}

// Misuse: one broken rule each, on 64 floats of UB.
void Misuse(const std::string& name, GM_ADDR in)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 64 * sizeof(float));
    LocalTensor<float> t = buf.Get<float>();
    Duplicate(t, 1.0f, 64);
    if (name == "unaligned") {
        Adds(t[1], t[1], 1.0f, 8);
    } else if (name == "count_past_end") {
        Muls(t[32], t[32], 2.0f, 40);
    } else if (name == "partial_overlap") {
        Add(t[8], t, t, 16);
    } else if (name == "nan_max") {
        Duplicate(t, std::numeric_limits<float>::quiet_NaN(), 8);
        Maxs(t, t, 0.0f, 8);
    } else if (name == "bad_round_mode") {
        LocalTensor<bfloat16_t> b = t.ReinterpretCast<bfloat16_t>();
        Cast(b, t[32], RoundMode::CAST_NONE, 16);
    } else if (name == "unordered_read") {  // a DataCopy into UB read by the vector unit without MTE2_V
        GlobalTensor<float> g;
        g.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(in), 64);
        SetFlag<HardEvent::V_MTE2>(EVENT_ID0);
        WaitFlag<HardEvent::V_MTE2>(EVENT_ID0);
        DataCopy(t, g, 64);
        Muls(t, t, 2.0f, 64);
    } else if (name == "scalar_read_unordered") {  // a vector result read by the scalar unit without V_S
        Muls(t, t, 2.0f, 64);
        (void)t.GetValue(0);
    } else if (name == "reduce_max_work_over_dst") {
        ReduceMax(t, t[16], t, 16);
    } else if (name == "reduce_min_nan") {
        Duplicate(t[8], std::numeric_limits<float>::quiet_NaN(), 1);
        ReduceMin(t[32], t[8], t[48], 8);
    } else if (name.rfind("reduce_dst_at_", 0) == 0) {  // reduce_dst_at_<float|half>_<byte offset>
        // a value-only result needs element alignment: the last accepted and first rejected offsets
        const bool isFloat = name.find("float") != std::string::npos;
        const uint32_t at = static_cast<uint32_t>(std::stoul(name.substr(name.rfind('_') + 1)));
        const LocalTensor<uint8_t> bytes = t.ReinterpretCast<uint8_t>();
        if (isFloat) {
            ReduceMin(bytes[at].ReinterpretCast<float>(), t[8], t[48], 8);
        } else {
            const LocalTensor<half> h = t.ReinterpretCast<half>();
            ReduceMax(bytes[at].ReinterpretCast<half>(), h[16], h[96], 16);
        }
    } else if (name == "compare_count") {
        LocalTensor<uint8_t> bits = buf.Get<uint8_t>();
        Compare(bits, t[32], t[32], CMPMODE::NE, 32);
    } else if (name == "select_mode") {
        LocalTensor<uint8_t> bits = buf.Get<uint8_t>();
        Select(t[32], bits, t[32], 0.0f, SELMODE::VSEL_CMPMASK_SPR, 8);
    } else {
        host_model::Fail("no such case: ", name);
    }
}

}  // namespace

int main(int argc, char** argv)
{
    if (argc < 2) {
        std::printf("usage: %s <case> <args...>\n", argv[0]);
        return 2;
    }
    const std::string name = argv[1];
    std::vector<std::string> a(argv + 2, argv + argc);
    char err[1024];
    int rc = 0;
    auto launch = [&](std::vector<host_model::GmRegion> regions, const std::function<void()>& body) {
        rc = host_model::Launch(1, host_model::kDefaultUbBytes, regions.data(), regions.size(), body, err,
                                sizeof(err));
    };
    if (name == "cast") {
        const std::string dt = a[0], st = a[1];
        const auto mode = static_cast<RoundMode>(std::stoi(a[2]));
        const uint32_t n = static_cast<uint32_t>(std::stoul(a[3]));
        std::vector<uint8_t> in = ReadFile(a[4]);
        auto size = [](const std::string& t) { return t == "float" || t == "int32" ? 4u : t == "int8" ? 1u : 2u; };
        std::vector<uint8_t> out(n * size(dt), 0);
        auto run = [&](auto kernel) {
            launch({{in.data(), in.size(), "in", false}, {out.data(), out.size(), "out", true}},
                   [&]() { kernel(in.data(), out.data(), n, mode); });
        };
        const std::string pair = dt + "<-" + st;
        if (pair == "float<-half") run(CastKernel<float, half>);
        else if (pair == "float<-bfloat16") run(CastKernel<float, bfloat16_t>);
        else if (pair == "half<-float") run(CastKernel<half, float>);
        else if (pair == "bfloat16<-float") run(CastKernel<bfloat16_t, float>);
        else if (pair == "float<-float") run(CastKernel<float, float>);
        else if (pair == "int32<-float") run(CastKernel<int32_t, float>);
        else if (pair == "float<-int32") run(CastKernel<float, int32_t>);
        else if (pair == "int8<-half") run(CastKernel<int8_t, half>);
        else if (pair == "half<-int8") run(CastKernel<half, int8_t>);
        else {
            std::printf("unknown pair %s\n", pair.c_str());
            return 2;
        }
        WriteFile(a[5], out);
    } else if (name == "quant") {
        const std::string xt = a[0];
        const auto compute = static_cast<uint8_t>(std::stoi(a[1]));
        const bool divide = a[2] == "1", hasOffset = a[3] == "1";
        const uint32_t rows = static_cast<uint32_t>(std::stoul(a[4])), n = static_cast<uint32_t>(std::stoul(a[5]));
        std::vector<uint8_t> x = ReadFile(a[6]), scale = ReadFile(a[7]), offset = ReadFile(a[8]);
        std::vector<uint8_t> out(static_cast<size_t>(rows) * n, 0);
        auto run = [&](auto kernel) {
            launch({{x.data(), x.size(), "x", false},
                    {scale.data(), scale.size(), "scale", false},
                    {offset.data(), offset.size(), "offset", false},
                    {out.data(), out.size(), "out", true}},
                   [&]() { kernel(x.data(), scale.data(), offset.data(), out.data(), rows, n, divide, hasOffset,
                                  compute); });
        };
        if (xt == "float") run(QuantKernel<float>);
        else if (xt == "half") run(QuantKernel<half>);
        else run(QuantKernel<bfloat16_t>);
        WriteFile(a[9], out);
    } else if (name == "dynamic") {
        const std::string xt = a[0];
        const uint32_t rows = static_cast<uint32_t>(std::stoul(a[1])), n = static_cast<uint32_t>(std::stoul(a[2]));
        std::vector<uint8_t> x = ReadFile(a[3]);
        std::vector<uint8_t> out(static_cast<size_t>(rows) * n, 0), scales(rows * sizeof(float), 0);
        auto run = [&](auto kernel) {
            launch({{x.data(), x.size(), "x", false},
                    {out.data(), out.size(), "out", true},
                    {scales.data(), scales.size(), "scales", true}},
                   [&]() { kernel(x.data(), out.data(), scales.data(), rows, n); });
        };
        if (xt == "float") run(DynamicKernel<float>);
        else if (xt == "half") run(DynamicKernel<half>);
        else run(DynamicKernel<bfloat16_t>);
        WriteFile(a[4], out);
        WriteFile(a[5], scales);
    } else if (name == "dequant") {
        const bool hasOffset = a[0] == "1";
        const uint32_t rows = static_cast<uint32_t>(std::stoul(a[1])), n = static_cast<uint32_t>(std::stoul(a[2]));
        std::vector<uint8_t> q = ReadFile(a[3]), scale = ReadFile(a[4]), offset = ReadFile(a[5]);
        std::vector<uint8_t> out(static_cast<size_t>(rows) * n * sizeof(float), 0);
        launch({{q.data(), q.size(), "codes", false},
                {scale.data(), scale.size(), "scale", false},
                {offset.data(), offset.size(), "offset", false},
                {out.data(), out.size(), "out", true}},
               [&]() { DequantKernel(q.data(), scale.data(), offset.data(), out.data(), rows, n, hasOffset); });
        WriteFile(a[6], out);
    } else if (name == "amax") {
        const uint32_t heads = static_cast<uint32_t>(std::stoul(a[0])), d = static_cast<uint32_t>(std::stoul(a[1]));
        std::vector<uint8_t> x = ReadFile(a[2]);
        std::vector<uint8_t> out(heads * sizeof(float), 0);
        launch({{x.data(), x.size(), "x", false}, {out.data(), out.size(), "out", true}},
               [&]() { AmaxKernel(x.data(), out.data(), heads, d); });
        WriteFile(a[3], out);
    } else {
        std::vector<float> in(64, 3.0f);
        launch({{in.data(), in.size() * sizeof(float), "in", false}},
               [&]() { Misuse(name, reinterpret_cast<GM_ADDR>(in.data())); });
    }
    std::printf("rc=%d\nmsg=%s\n", rc, err);
    return 0;
}
