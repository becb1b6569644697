// Byte ranges named by address: the overlap test the pointer copies (swap_batch.h) and the block
// address lists (block_ranges.h) share, and how their messages show an address.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ascend_kv {

/// A non-empty byte range [first, end) of entry `index` of its table.
struct ByteRange {
    uint64_t first, end;
    size_t index;
};

/// The non-empty ranges (starts[i], sizes[i]) sorted by start, then by index.
std::vector<ByteRange> SortedRanges(const std::vector<int64_t>& starts, const std::vector<int64_t>& sizes);

/// `ranges` sorted by start, then by index (no work when they already are).
void SortByStart(std::vector<ByteRange>& ranges);

/// The position k in `sorted` (SortedRanges) of the first range that meets an earlier one, which
/// is then range k - 1 (the ranges before k are apart), or sorted.size() when all are apart.
size_t FirstOverlap(const std::vector<ByteRange>& sorted);

/// An address as a message shows it: "0x7f00".
std::string Hex(int64_t address);

}  // namespace ascend_kv
