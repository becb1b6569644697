#include "csrc/rules/block_ranges.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <unordered_map>

#include "csrc/rules/byte_ranges.h"
#include "csrc/rules/index_values.h"
#include "csrc/rules/tensors.h"
#include "csrc/rules/text.h"

namespace ascend_kv {
namespace {

constexpr at::ScalarType kRowDtypes[] = {at::kLong};
constexpr at::ScalarType kIdDtypes[] = {at::kInt, at::kLong};

/// A host table of `dtypes`, 1-D, with `entries` entries (-1: any), read.
std::vector<int64_t> Table(const std::string& name, const at::Tensor& t, c10::ArrayRef<at::ScalarType> dtypes,
                           int64_t entries, const char* why)
{
    RequireData(name, t, /*allow_meta=*/false);
    RequireDtype(name, t, dtypes);
    TORCH_CHECK_VALUE(t.dim() == 1, name, " must be a 1-D tensor, got shape ", ShapeOf(t));
    TORCH_CHECK_VALUE(t.is_cpu(), name, " must be on the host (cpu): its values are read there, got ", t.device());
    TORCH_CHECK_VALUE(entries < 0 || t.size(0) == entries, name, " must have ", entries, " entries (", why, "), got ",
                      t.size(0));
    return HostValues(t);
}

BlockSide ReadSide(const char* side, const at::Tensor& bases, const at::Tensor& strides, const at::Tensor& lengths,
                   const at::Tensor& ids, int64_t blocks, int64_t rows, int64_t n)  // rows, n: -1 = its own
{
    const std::string prefix(side);
    BlockSide s{side};
    s.bases = Table(prefix + "_bases", bases, kRowDtypes, rows, "one per row, as src_bases");
    rows = static_cast<int64_t>(s.bases.size());
    s.strides = Table(prefix + "_strides", strides, kRowDtypes, rows, "one per row, as src_bases");
    s.lengths = Table(prefix + "_lengths", lengths, kRowDtypes, rows, "one per row, as src_bases");
    s.ids = Table(prefix + "_block_ids", ids, kIdDtypes, n, "one per block, as src_block_ids");
    n = static_cast<int64_t>(s.ids.size());
    s.blocks = blocks;
    TORCH_CHECK_VALUE(blocks >= 0, prefix, "_blocks must be >= 0, got ", blocks);
    for (int64_t r = 0; r < rows; ++r) {
        TORCH_CHECK_VALUE(s.bases[r] >= 0, prefix, "_bases[", r, "] = ", s.bases[r], " must be an address (>= 0)");
        TORCH_CHECK_VALUE(s.lengths[r] >= 0, prefix, "_lengths[", r, "] = ", s.lengths[r], " must be >= 0 bytes");
        TORCH_CHECK_VALUE(s.strides[r] >= s.lengths[r], prefix, "_strides[", r, "] = ", s.strides[r],
                          " must be at least the block's ", s.lengths[r], " bytes (", prefix, "_lengths[", r,
                          "]): a block may not reach into the next one");
        const __int128 end = static_cast<__int128>(s.bases[r]) +
                             static_cast<__int128>(std::max<int64_t>(blocks, 1) - 1) * s.strides[r] + s.lengths[r];
        TORCH_CHECK_VALUE(end <= INT64_MAX, prefix, "_bases[", r, "] = ", s.bases[r], " with ", blocks,
                          " blocks of stride ", s.strides[r], " ends past the address space (", WideText(end), ")");
    }
    for (int64_t j = 0; j < n; ++j) {
        TORCH_CHECK_VALUE(s.ids[j] >= 0 && s.ids[j] < blocks, prefix, "_block_ids[", j, "] = ", s.ids[j],
                          " is out of range: the ", side, " side holds ", blocks, " blocks");
    }
    return s;
}

/// Distinct destination ids: a block is written by one transfer only.
void RequireDistinct(const BlockSide& dst)
{
    std::unordered_map<int64_t, size_t> first;
    for (size_t j = 0; j < dst.ids.size(); ++j) {
        const auto [at, fresh] = first.emplace(dst.ids[j], j);
        TORCH_CHECK_VALUE(fresh, "dst_block_ids[", j, "] = ", dst.ids[j], " repeats dst_block_ids[", at->second,
                          "]: a block can be the destination of one transfer only");
    }
}

}  // namespace

RangeLists PlanBlockRanges(const at::Tensor& src_bases, const at::Tensor& src_strides,
                           const at::Tensor& src_lengths, const at::Tensor& src_block_ids, int64_t src_blocks,
                           const at::Tensor& dst_bases, const at::Tensor& dst_strides,
                           const at::Tensor& dst_lengths, const at::Tensor& dst_block_ids, int64_t dst_blocks)
{
    const BlockSide src = ReadSide("src", src_bases, src_strides, src_lengths, src_block_ids, src_blocks, -1, -1);
    const auto rows = static_cast<int64_t>(src.bases.size()), n = static_cast<int64_t>(src.ids.size());
    const BlockSide dst = ReadSide("dst", dst_bases, dst_strides, dst_lengths, dst_block_ids, dst_blocks, rows, n);
    for (int64_t r = 0; r < rows; ++r) {
        TORCH_CHECK_VALUE(dst.lengths[r] == src.lengths[r], "dst_lengths[", r, "] = ", dst.lengths[r],
                          " differs from src_lengths[", r, "] = ", src.lengths[r],
                          ": a block must be as many bytes on both sides (the two memories' geometry differ)");
    }
    RequireDistinct(dst);
    // Every (row, block) item, item r * n + j; generated rows by destination base and blocks by
    // destination id, so a usual request comes out sorted by destination and needs no sort.
    std::vector<int64_t> from(rows * n), to(rows * n), sizes(rows * n);
    std::vector<int64_t> row_order(rows), block_order(n);
    std::iota(row_order.begin(), row_order.end(), 0);
    std::iota(block_order.begin(), block_order.end(), 0);
    std::sort(row_order.begin(), row_order.end(), [&](int64_t a, int64_t b) { return dst.bases[a] < dst.bases[b]; });
    std::sort(block_order.begin(), block_order.end(), [&](int64_t a, int64_t b) { return dst.ids[a] < dst.ids[b]; });
    std::vector<ByteRange> sorted;
    sorted.reserve(rows * n);
    for (const int64_t r : row_order) {
        for (const int64_t j : block_order) {
            const int64_t i = r * n + j;
            from[i] = src.bases[r] + src.ids[j] * src.strides[r];
            to[i] = dst.bases[r] + dst.ids[j] * dst.strides[r];
            sizes[i] = src.lengths[r];
            if (sizes[i] > 0) {
                const auto first = static_cast<uint64_t>(to[i]);
                sorted.push_back({first, first + static_cast<uint64_t>(sizes[i]), static_cast<size_t>(i)});
            }
        }
    }
    SortByStart(sorted);
    if (const size_t k = FirstOverlap(sorted); k < sorted.size()) {
        const size_t a = std::min(sorted[k - 1].index, sorted[k].index), b = std::max(sorted[k - 1].index, sorted[k].index);
        TORCH_CHECK_VALUE(false, "dst_bases[", b / n, "] (block dst_block_ids[", b % n, "] = ", dst.ids[b % n], " at ", Hex(to[b]),
                          ", ", sizes[b], " bytes) overlaps the destination of row ", a / n, "'s block dst_block_ids[",
                          a % n, "] = ", dst.ids[a % n], " (", Hex(to[a]), ", ", sizes[a],
                          " bytes): the destination rows overlap");
    }
    RangeLists lists;
    for (const ByteRange& range : sorted) {
        const size_t i = range.index;
        if (!lists.dst.empty() && lists.dst.back() + lists.lengths.back() == to[i] &&
            lists.src.back() + lists.lengths.back() == from[i]) {
            lists.lengths.back() += sizes[i];  // the next bytes on both sides: one range
            continue;
        }
        lists.src.push_back(from[i]);
        lists.dst.push_back(to[i]);
        lists.lengths.push_back(sizes[i]);
    }
    return lists;
}

}  // namespace ascend_kv
