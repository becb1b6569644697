#include "cpu_fallback/copy.h"

#include <algorithm>
#include <cstring>

#include <c10/util/SmallVector.h>

#if (defined(__x86_64__) || defined(_M_X64)) && !defined(ASCEND_KV_PORTABLE_COPY)
#include <emmintrin.h>  // SSE2: baseline on x86-64
#define ASCEND_KV_CAN_STREAM 1
#else
#define ASCEND_KV_CAN_STREAM 0
#endif

namespace ascend_kv::host {
namespace {

/// n bytes, a multiple of 32, to a 16-byte aligned destination, through non-temporal stores.
inline void StreamChunk(char* dst, const char* src, int64_t n)
{
#if ASCEND_KV_CAN_STREAM
    for (int64_t i = 0; i < n; i += 32) {  // both loads before the stores
        const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    }
#else
    std::memcpy(dst, src, n);
#endif
}

inline void CopyChunk(char* dst, const char* src, int64_t n, bool stream)
{
    if (stream && n % 32 == 0 && reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
        StreamChunk(dst, src, n);
    } else {
        std::memcpy(dst, src, n);
    }
}

/// 32 bytes (an NZ fractal row), inline: streamed to a 16-byte aligned `dst` when `stream`.
inline void Copy32(char* dst, const char* src, bool stream)
{
    if (stream) {
        StreamChunk(dst, src, 32);
    } else {
        std::memcpy(dst, src, 32);
    }
}

/// `count` items of a one-loop piece (e.g. an NZ token's fractal rows): kPieceGroup pieces at a time,
/// item by item within a group, so the source is read as a few sequential streams (one per
/// fractal) and each item's destination is written in whole cache lines (docs/benchmarks.md).
constexpr int64_t kPieceGroup = 8;
void CopyPieceGroups(const char* src, char* dst, int64_t count, int64_t src_step, int64_t dst_step,
                     const PieceCopy& piece, bool stream)
{
    const int64_t pieces = piece.size[0], src_piece = piece.src_step[0], dst_piece = piece.dst_step[0];
    const bool fractal_rows = piece.chunk == 32;
    const bool stream32 = stream && fractal_rows &&
                          (reinterpret_cast<uintptr_t>(dst) | dst_step | dst_piece) % 16 == 0;
    for (int64_t p0 = 0; p0 < pieces; p0 += kPieceGroup) {
        const int64_t p1 = std::min(p0 + kPieceGroup, pieces);
        for (int64_t k = 0; k < count; ++k) {
            const char* s = src + k * src_step;
            char* d = dst + k * dst_step;
            for (int64_t p = p0; p < p1; ++p) {
                if (fractal_rows) {
                    Copy32(d + p * dst_piece, s + p * src_piece, stream32);
                } else {
                    CopyChunk(d + p * dst_piece, s + p * src_piece, piece.chunk, stream);
                }
            }
        }
    }
}

void CopyDims(const char* src, char* dst, const PieceCopy& piece, int dim, bool stream)
{
    if (dim == piece.dims) {
        CopyChunk(dst, src, piece.chunk, stream);
        return;
    }
    for (int64_t i = 0; i < piece.size[dim]; ++i) {
        CopyDims(src + i * piece.src_step[dim], dst + i * piece.dst_step[dim], piece, dim + 1, stream);
    }
}

void ZeroDims(char* dst, const PieceCopy& piece, int dim)
{
    if (dim == piece.dims) {
        std::memset(dst, 0, piece.chunk);
        return;
    }
    for (int64_t i = 0; i < piece.size[dim]; ++i) {
        ZeroDims(dst + i * piece.dst_step[dim], piece, dim + 1);
    }
}

}  // namespace

PieceCopy PieceCopy::Of(c10::IntArrayRef sizes, c10::IntArrayRef src_strides, c10::IntArrayRef dst_strides,
                        int64_t element)
{
    // Dims of size > 1, innermost last, as (size, source step, destination step) in bytes.
    const size_t rank = sizes.size();
    c10::SmallVector<int64_t, kMaxDims + 1> size(rank), src(rank), dst(rank);
    int n = 0;
    for (size_t d = 0; d < rank; ++d) {
        if (sizes[d] == 0) {
            return PieceCopy{};  // an empty piece: nothing to copy
        }
        if (sizes[d] > 1) {
            size[n] = sizes[d];
            src[n] = src_strides[d] * element;
            dst[n] = dst_strides[d] * element;
            ++n;
        }
    }
    PieceCopy piece;
    piece.chunk = element;
    while (n > 0 && src[n - 1] == piece.chunk && dst[n - 1] == piece.chunk) {  // contiguous on both sides
        piece.chunk *= size[n - 1];
        --n;
    }
    for (int d = 0; d < n; ++d) {  // outer dims that merge with the next one on both sides become one
        if (piece.dims > 0) {
            const int last = piece.dims - 1;
            if (piece.src_step[last] == src[d] * size[d] && piece.dst_step[last] == dst[d] * size[d]) {
                piece.size[last] *= size[d];
                piece.src_step[last] = src[d];
                piece.dst_step[last] = dst[d];
                continue;
            }
        }
        if (piece.dims == kMaxDims) {
            piece.fits = false;  // more loops than a piece holds: the caller copies it otherwise
            return piece;
        }
        piece.size[piece.dims] = size[d];
        piece.src_step[piece.dims] = src[d];
        piece.dst_step[piece.dims] = dst[d];
        ++piece.dims;
    }
    return piece;
}

int64_t PieceCopy::Bytes() const
{
    int64_t bytes = chunk;
    for (int d = 0; d < dims; ++d) {
        bytes *= size[d];
    }
    return bytes;
}

bool ShouldStream(int64_t bytes, int64_t threshold) { return ASCEND_KV_CAN_STREAM && bytes >= threshold; }

void Copy(const char* src, char* dst, const PieceCopy& piece, bool stream)
{
    TORCH_INTERNAL_ASSERT(piece.fits, "a piece of more than ", PieceCopy::kMaxDims, " loops reached Copy");
    if (piece.chunk == 0) {
        return;
    }
    if (piece.dims == 0) {
        CopyChunk(dst, src, piece.chunk, stream);
        return;
    }
    if (piece.dims == 1) {
        CopyPieceGroups(src, dst, 1, 0, 0, piece, stream);
        return;
    }
    CopyDims(src, dst, piece, 0, stream);
}

void CopyRun(const char* src, char* dst, int64_t count, int64_t src_step, int64_t dst_step, const PieceCopy& piece,
             bool stream)
{
    TORCH_INTERNAL_ASSERT(piece.fits, "a piece of more than ", PieceCopy::kMaxDims, " loops reached CopyRun");
    if (count <= 0 || piece.chunk == 0) {
        return;
    }
    if (piece.dims == 0 && src_step == piece.chunk && dst_step == piece.chunk) {
        CopyChunk(dst, src, piece.chunk * count, stream);
        return;
    }
    if (piece.dims == 1) {
        CopyPieceGroups(src, dst, count, src_step, dst_step, piece, stream);
        return;
    }
    for (int64_t k = 0; k < count; ++k) {
        Copy(src + k * src_step, dst + k * dst_step, piece, stream);
    }
}

void Zero(char* dst, const PieceCopy& piece)
{
    TORCH_INTERNAL_ASSERT(piece.fits, "a piece of more than ", PieceCopy::kMaxDims, " loops reached Zero");
    if (piece.chunk != 0) {
        ZeroDims(dst, piece, 0);
    }
}

void EndStreaming(bool stream)
{
#if ASCEND_KV_CAN_STREAM
    if (stream) {
        _mm_sfence();
    }
#else
    static_cast<void>(stream);
#endif
}

}  // namespace ascend_kv::host
