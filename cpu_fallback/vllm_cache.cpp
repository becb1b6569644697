#include "cpu_fallback/vllm_cache.h"

#include <algorithm>
#include <vector>

#include <ATen/ATen.h>

#include "cpu_fallback/copy.h"
#include "cpu_fallback/on_device.h"
#include "cpu_fallback/quant_math.h"
#include "csrc/rules/index_values.h"

namespace ascend_kv {
namespace {

float CodeMax(at::ScalarType codes)
{
    return codes == at::kFloat8_e4m3fn ? quant_math::CodeMax<c10::Float8_e4m3fn>()
                                       : quant_math::CodeMax<c10::Float8_e5m2>();
}

}  // namespace

void DequantizeInto(const at::Tensor& out, const at::Tensor& codes, const at::Tensor& scale)
{
    out.copy_(at::mul(codes.to(at::kFloat), scale).to(out.scalar_type()));
}

void ConvertFp8(const ConvertFp8Call& call, double scale)
{
    if (call.dst.numel() == 0) {
        return;
    }
    const at::Tensor s = at::scalar_tensor(scale, call.src.options().dtype(at::kFloat));
    if (!call.quantize) {
        DequantizeInto(call.dst, call.src, s);
        return;
    }
    const float m = CodeMax(call.codes);
    call.dst.copy_(at::clamp(at::div(call.src.to(at::kFloat), s), -m, m).to(call.codes));
}

at::Tensor DsMlaRows(const ConcatMlaCall& call, int64_t n)
{
    const at::Tensor x = call.kv_c.narrow(0, 0, n).to(at::kFloat).reshape({n, kDsMlaRank / kDsMlaTile, kDsMlaTile});
    const at::Tensor amax = std::get<0>(at::abs(x).nan_to_num(0.0).max(-1, /*keepdim=*/true));
    const float m = CodeMax(at::kFloat8_e4m3fn);
    const at::Tensor scale = at::exp2(at::ceil(at::log2(at::clamp_min(amax / m, 1e-4))));
    const at::Tensor codes = at::clamp(x / scale, -m, m).to(at::kFloat8_e4m3fn).view(at::kByte).reshape({n, kDsMlaRank});
    std::vector<at::Tensor> parts = {codes, scale.reshape({n, kDsMlaRank / kDsMlaTile}).contiguous().view(at::kByte)};
    if (call.rope_tail) {
        parts.push_back(call.k_pe.size(1) == 0 ? at::zeros({n, 2 * kDsMlaRope}, codes.options())
                                               : call.k_pe.narrow(0, 0, n).contiguous().view(at::kByte));
    }
    return at::cat(parts, 1);
}

std::pair<at::Tensor, at::Tensor> IndexerRows(const at::Tensor& k, bool ue8m0, bool mx)
{
    const int64_t n = k.size(0), groups = k.size(1) / kIndexerBlock;
    const at::Tensor x = k.to(at::kFloat).reshape({n, groups, kIndexerBlock});
    const at::Tensor amax = std::get<0>(at::abs(x).nan_to_num(0.0).max(-1, /*keepdim=*/true));
    const float m = CodeMax(at::kFloat8_e4m3fn);
    at::Tensor scale = at::clamp_min(amax, 1e-4) / m;
    if (ue8m0) {
        scale = at::exp2(at::ceil(at::log2(scale)));
    }
    const at::Tensor codes = at::clamp(x / scale, -m, m).to(at::kFloat8_e4m3fn).view(at::kByte).reshape({n, -1});
    at::Tensor bytes = scale.reshape({n, groups}).contiguous().view(at::kByte);  // float32, little-endian
    if (mx) {  // the exponent byte (the float32's bits 23..30) four times
        bytes = bytes.reshape({n, groups, 4}).select(2, 3).bitwise_left_shift(1)
                    .bitwise_or(bytes.reshape({n, groups, 4}).select(2, 2).bitwise_right_shift(7))
                    .unsqueeze(2).expand({n, groups, 4}).reshape({n, 4 * groups});
    }
    return {codes, bytes};
}

namespace host {

void GatherCache(const GatherCacheCall& call, const GatherCachePlan& plan)
{
    const int64_t batch = static_cast<int64_t>(plan.first_row.size());
    if (batch == 0 || call.dst.numel() == 0) {
        return;
    }
    const int64_t begin = plan.first_row[0], end = plan.first_row[batch - 1] + plan.length[batch - 1];
    if (end <= begin) {
        return;
    }
    const at::Tensor& src = call.src_cache;
    // A dequantizing gather copies codes into a dense temporary of its rows first.
    const at::Tensor out = call.codes ? at::empty_like(call.dst.narrow(0, begin, end - begin), src.options(),
                                                       at::MemoryFormat::Contiguous)
                                      : call.dst.narrow(0, begin, end - begin);
    const int64_t element = src.element_size();
    const PieceCopy piece = PieceCopy::Of(src.sizes().slice(2), src.strides().slice(2), out.strides().slice(1), element);
    TORCH_INTERNAL_ASSERT(piece.Fits(), "gather_cache: entries of more dims than the piece copy takes");
    const IndexTensors tables = OnHost({call.block_table});
    const IndexReader table(tables[0]);
    const int64_t block_size = src.size(1);
    const char* base = static_cast<const char*>(src.const_data_ptr());
    char* dst = static_cast<char*>(out.data_ptr());
    const bool stream = ShouldStream((end - begin) * piece.Bytes(), kStreamLoads);
    ParallelFor(end - begin, piece.Bytes(), [&](int64_t first, int64_t last) {
        for (int64_t r = first; r < last; ++r) {
            const int64_t row = begin + r;
            // The last entry starting at or before the row: the one covering it (the entries are back to back).
            const int64_t b = std::upper_bound(plan.first_row.begin(), plan.first_row.end(), row) - plan.first_row.begin() - 1;
            const int64_t token = plan.first_token[b] + (row - plan.first_row[b]);
            const int64_t block = table.At(b, token / block_size);
            const char* from = base + (block * src.stride(0) + (token % block_size) * src.stride(1)) * element;
            Copy(from, dst + r * out.stride(0) * element, piece, stream);
        }
        EndStreaming(stream);
    });
    if (call.codes) {
        DequantizeInto(call.dst.narrow(0, begin, end - begin), out, call.scale);
    }
}

}  // namespace host

namespace on_device {

void GatherCache(const GatherCacheCall& call)
{
    const int64_t batch = call.Batch(), rows = call.dst.size(0), columns = call.block_table.size(1);
    const int64_t num_blocks = call.src_cache.size(0), block_size = call.src_cache.size(1);
    if (batch == 0 || rows == 0 || columns == 0 || num_blocks == 0) {
        return;
    }
    const auto opts = call.cu_seq_lens.options().dtype(at::kLong);
    const at::Tensor cu = call.cu_seq_lens.to(at::kLong);
    const at::Tensor row = at::arange(rows, opts);
    const at::Tensor entry = at::searchsorted(cu.narrow(0, 1, batch), row, false, /*right=*/true);
    at::Tensor valid = (row >= cu[0]) & (entry < batch);
    const at::Tensor b = entry.clamp_max(batch - 1);
    const at::Tensor starts = call.seq_starts.defined() ? call.seq_starts.to(at::kLong) : at::zeros({batch}, opts);
    const at::Tensor token = starts.index_select(0, b) + (row - cu.index_select(0, b));
    const at::Tensor column = at::div(token, block_size, "floor");
    valid = valid & (token >= 0) & (column < columns);
    const at::Tensor block = call.block_table.to(at::kLong).index({b, column.clamp(0, columns - 1)});
    valid = valid & (block >= 0) & (block < num_blocks);
    c10::List<std::optional<at::Tensor>> index;
    index.push_back(block.clamp(0, num_blocks - 1));
    index.push_back(token.remainder(block_size));
    const at::Tensor gathered = call.src_cache.index(index);  // [rows, *entries]
    std::vector<int64_t> mask_shape(call.dst.dim(), 1);
    mask_shape[0] = rows;
    const at::Tensor mask = valid.view(mask_shape);
    if (!call.codes) {
        Bits(call.dst).copy_(at::where(mask, Bits(gathered), Bits(call.dst)));
        return;
    }
    const at::Tensor values = at::empty_like(call.dst);
    DequantizeInto(values, gathered, call.scale);
    Bits(call.dst).copy_(at::where(mask, Bits(values), Bits(call.dst)));
}

}  // namespace on_device

}  // namespace ascend_kv
