#include "csrc/rules/kernel_domain.h"

#include <algorithm>
#include <numeric>

#include "ascendc/host/kernel_library.h"
#include "csrc/rules/text.h"

namespace ascend_kv {
namespace {

/// Whether dims [begin, end) of `t` merge into one dim of stride `*stride` (size-1 dims ignored;
/// `*stride` is the innermost kept dim's, or 1 when every dim has size 1).
bool Mergeable(const at::Tensor& t, int64_t begin, int64_t end, int64_t* stride)
{
    int64_t expected = -1;
    *stride = 1;
    for (int64_t d = end - 1; d >= begin; --d) {
        if (t.size(d) == 1) {
            continue;
        }
        if (expected == -1) {
            *stride = t.stride(d);
        } else if (t.stride(d) != expected) {
            return false;
        }
        expected = t.stride(d) * t.size(d);
    }
    return true;
}

}  // namespace

at::Tensor InMemoryOrder(const at::Tensor& t)
{
    std::vector<int64_t> order(t.dim());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin() + std::min<int64_t>(1, t.dim()), order.end(),
                     [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
    return std::is_sorted(order.begin(), order.end()) ? t : t.permute(order);
}

bool DenseFrom(const at::Tensor& t, int64_t first_dim)
{
    if (t.numel() == 0) {
        return true;
    }
    int64_t expected = 1;
    for (int64_t d = t.dim() - 1; d >= first_dim; --d) {
        if (t.size(d) != 1 && t.stride(d) != expected) {
            return false;
        }
        expected *= t.size(d);
    }
    return true;
}

std::optional<BlockRows> BlockRowsOf(const at::Tensor& t)
{
    if (t.dim() == 1) {  // a block (a state slot) of one element
        return BlockRows{1, 1, 1, t.stride(0)};
    }
    for (int64_t first = 1; first < t.dim(); ++first) {
        int64_t row = 1, rows = 1, row_stride = 1, inner = 1;
        for (int64_t d = first; d < t.dim(); ++d) {
            row *= t.size(d);
        }
        for (int64_t d = 1; d < first; ++d) {
            rows *= t.size(d);
        }
        if (!Mergeable(t, first, t.dim(), &inner) || !Mergeable(t, 1, first, &row_stride)) {
            continue;
        }
        if (row == 1 || inner == 1) {
            return BlockRows{rows, row, row_stride, t.stride(0)};
        }
    }
    return std::nullopt;
}

std::string OutsideReason(const std::vector<Rows>& rows)
{
    for (const Rows& r : rows) {
        if (r.tensor.defined() && !DenseFrom(r.tensor, r.first_dim)) {
            return std::string(r.name) + " has sizes " + Tuple(r.tensor.sizes()) + " and strides " + Tuple(r.tensor.strides()) +
                   ": the kernels need its " + r.what + " contiguous";
        }
    }
    return "";
}

std::string BlockCopyOutsideReason(const std::vector<at::Tensor>& caches, bool simultaneous, int64_t copies,
                                   const char* noun)
{
    if (simultaneous && copies > kMaxSimultaneousCopies) {
        return "a simultaneous copy of " + std::to_string(copies) + " destinations: the kernel holds a chunk of at most " +
               std::to_string(kMaxSimultaneousCopies) + " sources in its UB at once";
    }
    for (size_t i = 0; i < caches.size(); ++i) {
        if (caches[i].numel() && !BlockRowsOf(InMemoryOrder(caches[i]))) {
            return std::string(noun) + " " + std::to_string(i) + " has sizes " + Tuple(caches[i].sizes()) + " and strides " +
                   Tuple(caches[i].strides()) + ": the kernel needs each block to be rows of contiguous elements, "
                   "evenly spaced";
        }
    }
    return "";
}

}  // namespace ascend_kv
