#include "csrc/rules/memory.h"

#include <algorithm>
#include <optional>
#include <set>

namespace ascend_kv {
namespace {

struct Span {
    uintptr_t first, end;  // [first, end) bytes a non-empty tensor may touch (strides are never negative)
};

Span MemorySpan(const at::Tensor& t)
{
    const auto first = reinterpret_cast<uintptr_t>(t.const_data_ptr());
    const c10::IntArrayRef sizes = t.sizes(), strides = t.strides();
    int64_t last = 0;
    for (size_t d = 0; d < sizes.size(); ++d) {
        last += (sizes[d] - 1) * strides[d];
    }
    return {first, first + static_cast<uintptr_t>((last + 1) * t.element_size())};
}

bool Meet(const Span& a, const Span& b) { return a.first < b.end && b.first < a.end; }

struct Window {
    int64_t first, length;  // every byte of a tensor lies, modulo a period, in these bytes (wrapping)
};

/// The window of `t` for `period`, or none when it would not fit in one period. Dims whose byte
/// strides are multiples of `period` move whole periods; the others make the window.
std::optional<Window> WindowOf(const at::Tensor& t, int64_t period)
{
    const int64_t size = t.element_size();
    int64_t length = size;
    for (int64_t d = 0; d < t.dim(); ++d) {
        if (t.size(d) > 1 && (t.stride(d) * size) % period) {
            length += (t.size(d) - 1) * t.stride(d) * size;
        }
    }
    if (length > period) {
        return std::nullopt;
    }
    return Window{static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.data_ptr()) % period), length};
}

int64_t Modulo(int64_t a, int64_t period) { return ((a % period) + period) % period; }

/// Whether `a` and `b` provably share no byte because, for some period (a byte stride of either),
/// each one's bytes fall in a window of every period that the other's window misses.
bool InterleavedApart(const at::Tensor& a, const at::Tensor& b)
{
    std::set<int64_t> periods;
    for (const at::Tensor* t : {&a, &b}) {
        for (int64_t d = 0; d < t->dim(); ++d) {
            if (t->size(d) > 1 && t->stride(d) > 0) {
                periods.insert(t->stride(d) * t->element_size());
            }
        }
    }
    for (const int64_t period : periods) {
        const auto wa = WindowOf(a, period), wb = WindowOf(b, period);
        if (wa && wb && Modulo(wb->first - wa->first, period) >= wa->length &&
            Modulo(wa->first - wb->first, period) >= wb->length) {
            return true;
        }
    }
    return false;
}

}  // namespace

bool MayShareMemory(const at::Tensor& a, const at::Tensor& b)
{
    return Meet(MemorySpan(a), MemorySpan(b)) && !InterleavedApart(a, b);
}

void RequireApart(std::string_view name, const at::Tensor& out, c10::ArrayRef<Named> inputs)
{
    if (out.numel() == 0) {
        return;
    }
    const Span span = MemorySpan(out);
    for (const Named& input : inputs) {
        const at::Tensor& t = input.tensor;
        if (!t.defined() || t.numel() == 0 || t.device() != out.device()) {
            continue;  // addresses of two devices never meet
        }
        TORCH_CHECK_VALUE(!Meet(span, MemorySpan(t)) || InterleavedApart(out, t), name, " shares memory with ", input.name,
                          ", which the operation reads while it writes ", name,
                          ": pass tensors in separate memory (e.g. ", input.name, ".clone())");
    }
}

void RequireSeparateOutputs(std::string_view first_name, const at::Tensor& first, std::string_view name,
                            const at::Tensor& out)
{
    if (!first.defined() || !out.defined() || first.numel() == 0 || out.numel() == 0 ||
        first.device() != out.device()) {
        return;
    }
    TORCH_CHECK_VALUE(!MayShareMemory(first, out), name, " shares memory with ", first_name,
                      ", and the operation writes both (the NPU kernels in parallel), so which write lands would be "
                      "undefined: pass separate tensors");
}

void RequireOutputsApart(c10::ArrayRef<Named> outputs)
{
    struct Span {
        uintptr_t first, end;
        size_t index;
    };
    std::vector<Span> spans;
    for (size_t i = 0; i < outputs.size(); ++i) {
        const at::Tensor& t = outputs[i].tensor;
        if (!t.defined() || t.numel() == 0) {
            continue;
        }
        int64_t last = 0;
        for (int64_t d = 0; d < t.dim(); ++d) {
            last += (t.size(d) - 1) * t.stride(d);
        }
        const auto first = reinterpret_cast<uintptr_t>(t.data_ptr());
        spans.push_back({first, first + static_cast<uintptr_t>((last + 1) * t.element_size()), i});
    }
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
        return a.first != b.first ? a.first < b.first : a.index < b.index;
    });
    for (size_t k = 0; k < spans.size(); ++k) {
        for (size_t m = k + 1; m < spans.size() && spans[m].first < spans[k].end; ++m) {
            const size_t a = std::min(spans[k].index, spans[m].index), b = std::max(spans[k].index, spans[m].index);
            RequireSeparateOutputs(outputs[a].name, outputs[a].tensor, outputs[b].name, outputs[b].tensor);
        }
    }
}

}  // namespace ascend_kv
