// Reading index values on the host: the value rules run over host index tensors read through
// their data pointers and strides (int32 or int64, rank 1 or 2); device index tensors are
// gathered to the host in one transfer first (the one synchronisation of full validation).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/SmallVector.h>

namespace ascend_kv {

/// A call's index tensors (undefined: absent), and its per-batch values: no allocation for the usual few.
using IndexTensors = c10::SmallVector<at::Tensor, 4>;
using BatchValues = c10::SmallVector<int64_t, 16>;

/// A host index tensor, read entry by entry.
class IndexReader {
public:
    explicit IndexReader(const at::Tensor& t);
    /// Entry i of a 1-D tensor (i of the first dim, column 0 of a 2-D one).
    int64_t operator()(int64_t i) const { return At(i, 0); }
    /// Entry (i, j) of a 2-D tensor.
    int64_t At(int64_t i, int64_t j) const
    {
        const char* at = data_ + (i * stride0_ + j * stride1_) * itemsize_;
        if (itemsize_ == 4) {
            return *reinterpret_cast<const int32_t*>(at);
        }
        return *reinterpret_cast<const int64_t*>(at);
    }
    int64_t Rows() const { return rows_; }
    int64_t Columns() const { return columns_; }

private:
    const char* data_;
    int64_t itemsize_, stride0_, stride1_, rows_, columns_;
};

/// The index tensors as host tensors: host ones as they are, undefined ones undefined, the
/// device-resident ones gathered on their device as int64 and read back in one transfer.
IndexTensors OnHost(c10::ArrayRef<at::Tensor> tensors);

/// The entries of a 1-D host index tensor (column 0 of a 2-D one), as int64.
std::vector<int64_t> HostValues(const at::Tensor& host);

/// Whether every defined index tensor is on the host.
bool AllOnHost(c10::ArrayRef<at::Tensor> tensors);

/// A 128-bit integer in decimal, for messages about sums of int64 entries.
std::string WideText(__int128 value);

}  // namespace ascend_kv
