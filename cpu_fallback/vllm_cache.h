// The CPU path and the device fallback of gather_cache, and convert_fp8's arithmetic (docs/semantics.md §16).
#pragma once

#include <utility>

#include <ATen/core/Tensor.h>

#include "csrc/rules/vllm_cache.h"

namespace ascend_kv {

/// fp8 codes to floats: float(code) * scale in float32, rounded once to `out`'s dtype and written
/// into `out` (any device; `scale` a double or a one-element float32 tensor on `codes`' device).
void DequantizeInto(const at::Tensor& out, const at::Tensor& codes, const at::Tensor& scale);

/// convert_fp8 on any device (ATen, elementwise): codes = fp8(clamp(x / scale, -max, max)) in float32,
/// or floats = float(code) * scale.
void ConvertFp8(const ConvertFp8Call& call, double scale);

/// fp8_ds_mla rows [n, 656] (or [n, 528]) uint8 of the first n tokens of a checked call (any device, ATen):
/// per 128-element tile s = 2^ceil(log2(max(amax / 448, 1e-4))) (amax ignoring NaN), codes fp8_e4m3(x / s).
at::Tensor DsMlaRows(const ConcatMlaCall& call, int64_t n);

/// The indexer's codes [n, head_dim] and scale bytes [n, 4 * head_dim / 128] of tokens k [n, head_dim]
/// (any device, ATen): per 128 elements s = max(amax, 1e-4) / 448 (amax ignoring NaN), a power of two
/// 2^ceil(log2(s)) with `ue8m0`, codes fp8_e4m3(x / s); `mx` stores each scale as 4 copies of its
/// exponent byte (vLLM's "mxfp8").
std::pair<at::Tensor, at::Tensor> IndexerRows(const at::Tensor& k, bool ue8m0, bool mx);

namespace host {
/// gather_cache on host tensors, its plan checked: rows over torch's threads, each row's bytes one
/// piece copy; a dequantizing gather copies the codes into one temporary of its rows, then decodes them.
void GatherCache(const GatherCacheCall& call, const GatherCachePlan& plan);
}  // namespace host

namespace on_device {
/// gather_cache with its index tensors on the data's device, their values unchecked: a row whose
/// batch entry, table column or block id is out of range keeps its bytes; nothing is read back.
void GatherCache(const GatherCacheCall& call);
}  // namespace on_device

}  // namespace ascend_kv
