#include "csrc/rules/byte_ranges.h"

#include <algorithm>
#include <cstdio>

namespace ascend_kv {

std::vector<ByteRange> SortedRanges(const std::vector<int64_t>& starts, const std::vector<int64_t>& sizes)
{
    std::vector<ByteRange> ranges;
    for (size_t i = 0; i < starts.size(); ++i) {
        if (sizes[i] > 0) {
            const auto first = static_cast<uint64_t>(starts[i]);
            ranges.push_back({first, first + static_cast<uint64_t>(sizes[i]), i});
        }
    }
    SortByStart(ranges);
    return ranges;
}

void SortByStart(std::vector<ByteRange>& ranges)
{
    const auto before = [](const ByteRange& a, const ByteRange& b) {
        return a.first != b.first ? a.first < b.first : a.index < b.index;
    };
    if (!std::is_sorted(ranges.begin(), ranges.end(), before)) {
        std::sort(ranges.begin(), ranges.end(), before);
    }
}

size_t FirstOverlap(const std::vector<ByteRange>& sorted)
{
    // While the ranges before k are apart, the last of them reaches furthest.
    for (size_t k = 1; k < sorted.size(); ++k) {
        if (sorted[k].first < sorted[k - 1].end) {
            return k;
        }
    }
    return sorted.size();
}

std::string Hex(int64_t address)
{
    char text[24];
    std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(address));
    return text;
}

}  // namespace ascend_kv
