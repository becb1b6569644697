#include "csrc/rules/swap_batch.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <string>

#include "csrc/rules/tensors.h"
#include "csrc/rules/text.h"

namespace ascend_kv {
namespace {

std::vector<int64_t> Table(std::string_view name, const at::Tensor& t)
{
    RequireData(name, t, /*allow_meta=*/false);
    RequireDtype(name, t, {at::kLong});
    TORCH_CHECK_VALUE(t.dim() == 1, name, " must be a 1-D tensor, got shape ", ShapeOf(t));
    TORCH_CHECK_VALUE(t.is_cpu(), name, " must be on the host (cpu): its values are read there, got ", t.device());
    const at::Tensor dense = t.contiguous();
    const int64_t* values = dense.const_data_ptr<int64_t>();
    return std::vector<int64_t>(values, values + dense.numel());
}

std::string Hex(int64_t address)
{
    char text[24];
    std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(address));
    return text;
}

/// A non-empty byte range [first, end) of copy `index`.
struct Range {
    uint64_t first, end;
    size_t index;
};

std::vector<Range> Ranges(const std::vector<int64_t>& starts, const std::vector<int64_t>& sizes)
{
    std::vector<Range> ranges;
    for (size_t i = 0; i < starts.size(); ++i) {
        if (sizes[i] > 0) {
            const auto first = static_cast<uint64_t>(starts[i]);
            ranges.push_back({first, first + static_cast<uint64_t>(sizes[i]), i});
        }
    }
    std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
        return a.first != b.first ? a.first < b.first : a.index < b.index;
    });
    return ranges;
}

}  // namespace

BatchCopies CheckSwapBlocksBatch(const at::Tensor& src_ptrs, const at::Tensor& dst_ptrs, const at::Tensor& sizes,
                                 int64_t direction)
{
    BatchCopies copies;
    copies.src = Table("src_ptrs", src_ptrs);
    copies.dst = Table("dst_ptrs", dst_ptrs);
    copies.sizes = Table("sizes", sizes);
    const size_t n = copies.src.size();
    TORCH_CHECK_VALUE(copies.dst.size() == n, "dst_ptrs must have one entry per copy (", n,
                      ", as src_ptrs), got ", copies.dst.size());
    TORCH_CHECK_VALUE(copies.sizes.size() == n, "sizes must have one entry per copy (", n,
                      ", as src_ptrs), got ", copies.sizes.size());
    TORCH_CHECK_VALUE(direction >= -1 && direction <= 2,
                      "direction must be None, 0 (host to device), 1 (device to host) or 2 (device to device), got ",
                      direction);
    copies.direction = direction;
    for (size_t i = 0; i < n; ++i) {
        TORCH_CHECK_VALUE(copies.sizes[i] >= 0, "sizes[", i, "] = ", copies.sizes[i], " must be >= 0 bytes");
    }
    // Destinations sorted by address meet only a neighbour; each source meets a destination only
    // if the last destination starting before its end reaches past its start (the destinations are apart).
    const std::vector<Range> targets = Ranges(copies.dst, copies.sizes);
    for (size_t k = 1; k < targets.size(); ++k) {
        const Range &a = targets[k - 1], &b = targets[k];
        if (b.first < a.end) {
            const size_t later = std::max(a.index, b.index), earlier = std::min(a.index, b.index);
            TORCH_CHECK_VALUE(false, "dst_ptrs[", later, "] = ", Hex(copies.dst[later]), " (", copies.sizes[later],
                              " bytes) overlaps the destination of copy ", earlier, " (dst_ptrs[", earlier, "] = ",
                              Hex(copies.dst[earlier]), ", ", copies.sizes[earlier],
                              " bytes): the result would depend on the order of the copies");
        }
    }
    for (const Range& source : Ranges(copies.src, copies.sizes)) {
        const auto after = std::upper_bound(targets.begin(), targets.end(), source.end - 1,
                                            [](uint64_t x, const Range& r) { return x < r.first; });
        if (after != targets.begin() && std::prev(after)->end > source.first) {
            const size_t j = std::prev(after)->index, i = source.index;
            TORCH_CHECK_VALUE(false, "dst_ptrs[", j, "] = ", Hex(copies.dst[j]), " (", copies.sizes[j],
                              " bytes) overlaps the source of copy ", i, " (src_ptrs[", i, "] = ", Hex(copies.src[i]),
                              ", ", copies.sizes[i], " bytes): the result would depend on the order of the copies");
        }
    }
    return copies;
}

}  // namespace ascend_kv
