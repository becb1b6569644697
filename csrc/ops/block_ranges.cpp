// block_ranges (docs/semantics.md §17.2): a block transfer's address lists, for a transfer engine
// (Mooncake's batch_transfer_sync_read/write) to move; host tables in, three int64 host tensors out.
#include <algorithm>

#include <ATen/ops/empty.h>

#include "csrc/ops/ops.h"
#include "csrc/rules/block_ranges.h"

namespace ascend_kv {
namespace {

at::Tensor HostTensor(const std::vector<int64_t>& values)
{
    at::Tensor t = at::empty({static_cast<int64_t>(values.size())}, at::TensorOptions().dtype(at::kLong));
    std::copy(values.begin(), values.end(), t.data_ptr<int64_t>());
    return t;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> BlockRanges(
    const at::Tensor& src_bases, const at::Tensor& src_strides, const at::Tensor& src_lengths,
    const at::Tensor& src_block_ids, int64_t src_blocks, const at::Tensor& dst_bases, const at::Tensor& dst_strides,
    const at::Tensor& dst_lengths, const at::Tensor& dst_block_ids, int64_t dst_blocks)
{
    const RangeLists lists = PlanBlockRanges(src_bases, src_strides, src_lengths, src_block_ids, src_blocks, dst_bases,
                                             dst_strides, dst_lengths, dst_block_ids, dst_blocks);
    return {HostTensor(lists.src), HostTensor(lists.dst), HostTensor(lists.lengths)};
}

}  // namespace ascend_kv
