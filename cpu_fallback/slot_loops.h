// The two token loops every host path of reshape_and_cache and paged_cache_load shares, copying
// or quantizing: which thread writes which slot, and which cache slots fill which output rows.
#pragma once

#include <algorithm>
#include <cstdint>

#include <ATen/Parallel.h>

#include "cpu_fallback/copy.h"
#include "csrc/rules/index_values.h"
#include "csrc/rules/paged_cache_load.h"

namespace ascend_kv::host {

/// The last entry b with start[b] <= x (starts non-decreasing; entries of length 0 share their
/// successor's start, so this is the entry holding x).
inline int64_t EntryAt(c10::ArrayRef<int64_t> start, int64_t x)
{
    return std::upper_bound(start.begin(), start.end(), x) - start.begin() - 1;
}

/// write(i, slot) for every token i with a slot (padding skipped), over `token_bytes * n` bytes of
/// work: each block has one writing thread, which writes its tokens in order, so a slot named twice
/// takes the last token, as in the serial loop. `done()` runs at the end of each thread's share.
template <typename Write, typename Done>
void ForEachSlot(const BatchValues& slot_of, int64_t block_size, int64_t token_bytes, const Write& write,
                 const Done& done)
{
    const int64_t n = static_cast<int64_t>(slot_of.size());
    const int64_t owners = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), n * token_bytes / kTaskBytes));
    at::parallel_for(0, owners, 1, [&](int64_t begin, int64_t end) {
        for (int64_t owner = begin; owner < end; ++owner) {
            for (int64_t i = 0; i < n; ++i) {
                const int64_t slot = slot_of[i];
                if (slot >= 0 && (owners == 1 || (slot / block_size) % owners == owner)) {
                    write(i, slot);
                }
            }
        }
        done();
    });
}

/// run(r, block, slot, n, valid) for every run of n consecutive tokens of one block that fill
/// output rows r.. of a paged load (valid false: a zero_fill token of a missing or invalid block),
/// over `token_bytes` of work per token. `done()` runs at the end of each thread's share.
template <typename Run, typename Done>
void ForEachLoadRun(const PagedLoadCall& call, const PagedLoadPlan& plan, int64_t tokens, int64_t token_bytes,
                    const Run& run, const Done& done)
{
    const int64_t block_size = call.geometry.block_size.expect_int();
    const int64_t num_blocks = call.geometry.num_blocks.expect_int();
    const IndexReader table(call.block_table);
    const int64_t first_row = plan.out_start.empty() ? 0 : plan.out_start[0];
    ParallelFor(tokens, token_bytes, [&](int64_t begin, int64_t end) {
        for (int64_t r = first_row + begin, last = first_row + end, b = EntryAt(plan.out_start, r); r < last;) {
            const int64_t j = r - plan.out_start[b];
            if (j >= plan.lens[b]) {
                ++b;
                continue;
            }
            const int64_t column = plan.first_column[b] + j / block_size, slot = j % block_size;
            const int64_t n = std::min({block_size - slot, plan.lens[b] - j, last - r});
            const int64_t block = column < table.Columns() ? table.At(b, column) : -1;
            run(r, block, slot, n, block >= 0 && block < num_blocks);  // valid always, but with zero_fill
            r += n;
        }
        done();
    });
}

}  // namespace ascend_kv::host
