#include "csrc/rules/swap_batch.h"

#include <algorithm>
#include <iterator>
#include <string>

#include "csrc/rules/byte_ranges.h"
#include "csrc/rules/index_values.h"
#include "csrc/rules/tensors.h"
#include "csrc/rules/text.h"

namespace ascend_kv {
namespace {

/// The structure of one table: dense, one of `dtypes`, 1-D.
void RequireTable(std::string_view name, const at::Tensor& t, c10::ArrayRef<at::ScalarType> dtypes, bool meta)
{
    RequireData(name, t, meta);
    RequireDtype(name, t, dtypes);
    TORCH_CHECK_VALUE(t.dim() == 1, name, " must be a 1-D tensor, got shape ", ShapeOf(t));
}

/// The lengths of the three tables: dst_ptrs and sizes as long as src_ptrs.
void RequireLengths(const at::Tensor& src_ptrs, const at::Tensor& dst_ptrs, const at::Tensor& sizes)
{
    const c10::SymInt n = src_ptrs.sym_size(0);
    TORCH_CHECK_VALUE(dst_ptrs.sym_size(0) == n, "dst_ptrs must have one entry per copy (", n, ", as src_ptrs), got ",
                      dst_ptrs.sym_size(0));
    TORCH_CHECK_VALUE(sizes.sym_size(0) == n, "sizes must have one entry per copy (", n, ", as src_ptrs), got ",
                      sizes.sym_size(0));
}

/// Sizes >= 0; destination ranges that meet neither each other nor any source range.
void RequireRangesApart(const BatchCopies& copies)
{
    for (size_t i = 0; i < copies.sizes.size(); ++i) {
        TORCH_CHECK_VALUE(copies.sizes[i] >= 0, "sizes[", i, "] = ", copies.sizes[i], " must be >= 0 bytes");
    }
    // Each source meets a destination only if the last destination starting before its end
    // reaches past its start (the destinations are apart).
    const std::vector<ByteRange> targets = SortedRanges(copies.dst, copies.sizes);
    if (const size_t k = FirstOverlap(targets); k < targets.size()) {
        const ByteRange &a = targets[k - 1], &b = targets[k];
        const size_t later = std::max(a.index, b.index), earlier = std::min(a.index, b.index);
        TORCH_CHECK_VALUE(false, "dst_ptrs[", later, "] = ", Hex(copies.dst[later]), " (", copies.sizes[later],
                          " bytes) overlaps the destination of copy ", earlier, " (dst_ptrs[", earlier, "] = ",
                          Hex(copies.dst[earlier]), ", ", copies.sizes[earlier],
                          " bytes): the result would depend on the order of the copies");
    }
    for (const ByteRange& source : SortedRanges(copies.src, copies.sizes)) {
        const auto after = std::upper_bound(targets.begin(), targets.end(), source.end - 1,
                                            [](uint64_t x, const ByteRange& r) { return x < r.first; });
        if (after != targets.begin() && std::prev(after)->end > source.first) {
            const size_t j = std::prev(after)->index, i = source.index;
            TORCH_CHECK_VALUE(false, "dst_ptrs[", j, "] = ", Hex(copies.dst[j]), " (", copies.sizes[j],
                              " bytes) overlaps the source of copy ", i, " (src_ptrs[", i, "] = ", Hex(copies.src[i]),
                              ", ", copies.sizes[i], " bytes): the result would depend on the order of the copies");
        }
    }
}

constexpr at::ScalarType kAddressDtypes[] = {at::kLong};
constexpr at::ScalarType kSizeDtypes[] = {at::kInt, at::kLong};

}  // namespace

BatchCopies CheckSwapBlocksBatch(const at::Tensor& src_ptrs, const at::Tensor& dst_ptrs, const at::Tensor& sizes,
                                 int64_t direction)
{
    for (const auto& [name, table] : {std::pair{"src_ptrs", &src_ptrs}, std::pair{"dst_ptrs", &dst_ptrs},
                                      std::pair{"sizes", &sizes}}) {
        RequireTable(name, *table, kAddressDtypes, /*meta=*/false);
        TORCH_CHECK_VALUE(table->is_cpu(), name, " must be on the host (cpu): its values are read there, got ",
                          table->device());
    }
    RequireLengths(src_ptrs, dst_ptrs, sizes);
    TORCH_CHECK_VALUE(direction >= -1 && direction <= 2,
                      "direction must be None, 0 (host to device), 1 (device to host) or 2 (device to device), got ",
                      direction);
    BatchCopies copies{HostValues(src_ptrs), HostValues(dst_ptrs), HostValues(sizes), direction};
    RequireRangesApart(copies);
    return copies;
}

void CheckBatchMemcpy(const at::Tensor& src_ptrs, const at::Tensor& dst_ptrs, const at::Tensor& sizes, Check check)
{
    const bool meta = AllowsMeta(check, src_ptrs);
    RequireTable("src_ptrs", src_ptrs, kAddressDtypes, meta);
    RequireTable("dst_ptrs", dst_ptrs, kAddressDtypes, meta);
    RequireTable("sizes", sizes, kSizeDtypes, meta);
    RequireLengths(src_ptrs, dst_ptrs, sizes);
    RequireSameDevice({{"src_ptrs", src_ptrs}, {"dst_ptrs", dst_ptrs}, {"sizes", sizes}});
}

BatchCopies PlanBatchMemcpy(const at::Tensor& src_ptrs, const at::Tensor& dst_ptrs, const at::Tensor& sizes)
{
    const IndexTensors host = OnHost({src_ptrs, dst_ptrs, sizes});
    BatchCopies copies{HostValues(host[0]), HostValues(host[1]), HostValues(host[2]), -1};
    RequireRangesApart(copies);
    return copies;
}

}  // namespace ascend_kv
