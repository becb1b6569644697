// The CPU paths' one copy primitive: a piece of a tensor (a token row, an NZ token's pieces, a
// block) copied from one place to another, both sides addressed through byte strides, every
// element type as bytes. Dims contiguous on both sides collapse into one chunk, so the usual
// row is one memcpy; any strides work. Large calls split over torch's intra-op threads
// (at::parallel_for) and stream their stores past the CPU caches.
#pragma once

#include <cstdint>

#include <ATen/Parallel.h>
#include <c10/util/ArrayRef.h>

namespace ascend_kv::host {

/// How one piece is copied: `dims` outer loops (sizes and byte steps per side) around a chunk of
/// `chunk` bytes contiguous on both sides.
struct PieceCopy {
    static constexpr int kMaxDims = 4;
    int64_t chunk = 0;
    int dims = 0;
    int64_t size[kMaxDims] = {};
    int64_t src_step[kMaxDims] = {};
    int64_t dst_step[kMaxDims] = {};

    bool fits = true;

    /// A piece of `sizes` elements of `element` bytes, at element strides `src_strides` in the
    /// source and `dst_strides` in the destination, any number of dims; when more than kMaxDims
    /// outer loops remain after merging, the piece does not fit (Fits() false: copy it otherwise).
    static PieceCopy Of(c10::IntArrayRef sizes, c10::IntArrayRef src_strides, c10::IntArrayRef dst_strides,
                        int64_t element);
    /// Whether Copy, CopyRun and Zero take this piece (false for a piece of more loops than kMaxDims).
    bool Fits() const { return fits; }
    /// Bytes in one piece.
    int64_t Bytes() const;
    /// Whether the piece is one contiguous stretch on both sides.
    bool Flat() const { return dims == 0; }
};

// Bytes a call writes from which it streams them past the CPU caches (docs/benchmarks.md): a
// cache write's rows are read only by a later step; a paged load's outputs are read by attention
// next, so only loads larger than the CPU caches stream.
constexpr int64_t kStreamWrites = 1 << 20;
constexpr int64_t kStreamLoads = 6 << 20;

/// Whether a call writing `bytes` in all streams its stores past the CPU caches (x86-64 only)
/// when it writes at least `threshold` bytes: the caller picks the threshold by where the
/// written bytes are read next (docs/benchmarks.md).
bool ShouldStream(int64_t bytes, int64_t threshold);

/// Copy one piece.
void Copy(const char* src, char* dst, const PieceCopy& piece, bool stream);

/// Copy `count` pieces, the k-th `src_step`/`dst_step` bytes after the first: one memcpy when
/// the pieces are back to back on both sides.
void CopyRun(const char* src, char* dst, int64_t count, int64_t src_step, int64_t dst_step, const PieceCopy& piece,
             bool stream);

/// Zero one piece of the destination.
void Zero(char* dst, const PieceCopy& piece);

/// Ends the streamed stores of this thread (a store fence), so other threads see them.
void EndStreaming(bool stream);

/// at::parallel_for over [0, n) with chunks of at least kTaskBytes / item_bytes items, so tiny
/// calls run inline on the calling thread; `f(begin, end)` ends its own streamed stores.
constexpr int64_t kTaskBytes = 128 * 1024;
template <typename F>
void ParallelFor(int64_t n, int64_t item_bytes, const F& f)
{
    const int64_t grain = item_bytes > 0 ? std::max<int64_t>(1, kTaskBytes / item_bytes) : n;
    at::parallel_for(0, n, std::max<int64_t>(grain, 1), f);
}

}  // namespace ascend_kv::host
