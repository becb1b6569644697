/*
 * The row walk of paged_cache_load (ascendc/kernels/paged_cache_load.cpp describes it): batch
 * entries, the output rows each writes, every core's even share of them, and the runs of tokens
 * that share one cache block. Shared by the byte-copying kernel and the dequantizing one, which
 * move the runs (a Mover's LoadRun).
 */
#ifndef ASCEND_KV_PAGED_WALK_H
#define ASCEND_KV_PAGED_WALK_H

#include "copy_common.h"

namespace ascend_kv {

class PagedWalk {
public:
    /// The index tensors staged into UB; `t_` is the load's tiling.
    __aicore__ inline void Init(GM_ADDR blockTable, GM_ADDR contextLens, GM_ADDR seqStarts, const PagedLoadTiling& tiling,
                                AscendC::TPipe* pipe)
    {
        t_ = tiling;
        rows_ = MaxU64(t_.keyRows, t_.valueRows);
        lens_.Init(pipe, contextLens, t_.batch + t_.cumsum, t_.lensElemBytes, t_.stageBytes);
        if (t_.startsElemBytes != 0) {
            starts_.Init(pipe, seqStarts, t_.batch, t_.startsElemBytes, t_.stageBytes);
        }
        table_.Init(pipe, blockTable, t_.batch * t_.maxBlocks, t_.tableElemBytes, t_.stageBytes);
    }

    /// The work of core `core` (< usedCores): mover.LoadRun(key, block, slot, outRow, tokens) for
    /// each run of tokens of one cache block (key: true for the key side, false for the value side).
    template <typename Mover>
    __aicore__ inline void Walk(uint64_t core, Mover& mover)
    {
        const Range written = WrittenRows();
        if (written.begin >= written.end) {
            return;
        }
        Range mine = CoreShare(written.end - written.begin, core, t_.usedCores);
        mine.begin += written.begin;
        mine.end += written.begin;
        uint64_t prefix = 0;
        for (uint64_t b = 0; b < t_.batch && mine.begin < mine.end; ++b) {
            const Entry entry = EntryAt(b, prefix);
            const uint64_t lo = MaxU64(entry.rows.begin, mine.begin);
            const uint64_t hi = MinU64(entry.rows.end, mine.end);
            if (lo < hi) {
                LoadEntry(mover, b, entry.first, lo, hi);
            }
            if (t_.cumsum == 0 && prefix >= mine.end) {
                break;  // default mode: later entries start at or after prefix
            }
        }
    }

private:
    /// Batch entry b: token j goes to output row first + j; `rows` are the rows inside [0, R).
    struct Entry {
        int64_t first;
        Range rows;
    };

    /// Entry b. Default mode: first = prefix, which advances past the entry's tokens.
    __aicore__ inline Entry EntryAt(uint64_t b, uint64_t& prefix)
    {
        Entry entry;
        uint64_t count = 0;
        if (t_.cumsum != 0) {
            entry.first = lens_.Get(b);
            count = ClampCount(SaturatingSub(lens_.Get(b + 1), entry.first), rows_);
        } else {
            entry.first = static_cast<int64_t>(prefix);
            count = ClampCount(lens_.Get(b), rows_);
            prefix = MinU64(prefix + count, rows_);
        }
        entry.rows = RowsInside(entry.first, count, rows_);
        return entry;
    }

    /**
     * The output rows any entry writes, as one range (their bounding range). The cores split
     * it evenly by rows, so a row several entries write (cumsum mode with decreasing
     * context_lens) belongs to one core, which writes it in entry order: the last entry wins,
     * on every run, and no two cores ever write one row.
     */
    __aicore__ inline Range WrittenRows()
    {
        Range written{rows_, 0};
        uint64_t prefix = 0;
        for (uint64_t b = 0; b < t_.batch; ++b) {
            const Entry entry = EntryAt(b, prefix);
            if (entry.rows.begin < entry.rows.end) {
                written.begin = MinU64(written.begin, entry.rows.begin);
                written.end = MaxU64(written.end, entry.rows.end);
            }
            if (t_.cumsum == 0 && prefix >= rows_) {
                break;
            }
        }
        return written;
    }

    /// Output rows [lo, hi) of batch entry b (token j = row - first), one block-table column at a time.
    template <typename Mover>
    __aicore__ inline void LoadEntry(Mover& mover, uint64_t b, int64_t first, uint64_t lo, uint64_t hi)
    {
        const int64_t firstColumn = t_.startsElemBytes != 0 ? FloorDiv(starts_.Get(b), t_.blockSize) : 0;
        for (uint64_t row = lo; row < hi;) {
            const uint64_t j = row - static_cast<uint64_t>(first);
            const uint64_t c = j / t_.blockSize;
            const uint64_t runEnd = MinU64(hi, row + ((c + 1) * t_.blockSize - j));
            uint64_t column = 0;
            if (IndexInRange(firstColumn, c, t_.maxBlocks, column)) {
                const int64_t block = table_.Get(b * t_.maxBlocks + column);
                if (block >= 0 && static_cast<uint64_t>(block) < t_.numBlocks) {
                    const uint64_t slot = j - c * t_.blockSize;
                    mover.LoadRun(true, static_cast<uint64_t>(block), slot, row, runEnd - row);
                    mover.LoadRun(false, static_cast<uint64_t>(block), slot, row, runEnd - row);
                }
            }
            row = runEnd;
        }
    }

    PagedLoadTiling t_;
    uint64_t rows_ = 0;
    StagedIndex lens_;
    StagedIndex starts_;
    StagedIndex table_;
};

}  // namespace ascend_kv

#endif  // ASCEND_KV_PAGED_WALK_H
