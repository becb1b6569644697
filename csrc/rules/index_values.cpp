#include "csrc/rules/index_values.h"

#include <algorithm>

#include <ATen/ops/cat.h>

namespace ascend_kv {

IndexReader::IndexReader(const at::Tensor& t)
    : data_(static_cast<const char*>(t.const_data_ptr())), itemsize_(t.element_size())
{
    const c10::IntArrayRef sizes = t.sizes(), strides = t.strides();
    TORCH_INTERNAL_ASSERT(t.is_cpu() && (itemsize_ == 4 || itemsize_ == 8) && sizes.size() <= 2,
                          "IndexReader takes host int32/int64 tensors of rank 1 or 2");
    rows_ = sizes.empty() ? 1 : sizes[0];
    columns_ = sizes.size() > 1 ? sizes[1] : 1;
    stride0_ = sizes.empty() ? 0 : strides[0];
    stride1_ = sizes.size() > 1 ? strides[1] : 0;
}

bool AllOnHost(c10::ArrayRef<at::Tensor> tensors)
{
    return std::all_of(tensors.begin(), tensors.end(), [](const at::Tensor& t) { return !t.defined() || t.is_cpu(); });
}

IndexTensors OnHost(c10::ArrayRef<at::Tensor> tensors)
{
    if (AllOnHost(tensors)) {
        return IndexTensors(tensors.begin(), tensors.end());  // the usual case
    }
    std::vector<at::Tensor> flat;
    for (const at::Tensor& t : tensors) {
        if (t.defined() && !t.is_cpu()) {
            flat.push_back(t.reshape(-1).to(at::kLong));
        }
    }
    const at::Tensor fetched = at::cat(flat).cpu();
    IndexTensors result;
    int64_t start = 0;
    for (const at::Tensor& t : tensors) {
        if (!t.defined() || t.is_cpu()) {
            result.push_back(t);
            continue;
        }
        result.push_back(fetched.narrow(0, start, t.numel()).view(t.sizes()));
        start += t.numel();
    }
    return result;
}

std::string WideText(__int128 value)
{
    if (value == 0) {
        return "0";
    }
    const bool negative = value < 0;
    unsigned __int128 magnitude = negative ? -static_cast<unsigned __int128>(value) : value;
    std::string digits;
    while (magnitude > 0) {
        digits.push_back(static_cast<char>('0' + static_cast<int>(magnitude % 10)));
        magnitude /= 10;
    }
    if (negative) {
        digits.push_back('-');
    }
    std::reverse(digits.begin(), digits.end());
    return digits;
}

std::vector<int64_t> HostValues(const at::Tensor& host)
{
    const IndexReader reader(host);
    std::vector<int64_t> values(reader.Rows());
    for (int64_t i = 0; i < reader.Rows(); ++i) {
        values[i] = reader(i);
    }
    return values;
}

}  // namespace ascend_kv
