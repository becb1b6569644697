/*
 * The NPU build's cache of tilings in device memory (launch_npu.cpp), as a policy of its own so the
 * host tests can run it (ascendc/sim/tests/tiling_cache_cases.cpp): plain C++17, no torch or CANN.
 *
 * A tiling holds per-call sizes (token counts, output rows), so an eager server whose prefill
 * lengths vary would make a new entry per length. The cache keeps at most `capacity` entries that
 * can go, dropping the least recently used first. An entry made or used while its stream is being
 * captured into a graph is kept for the life of the process instead (the graph replays a copy
 * from its memory and a kernel reading it), and nothing is dropped during a capture; kept entries
 * are as many as the distinct tilings of the captured graphs.
 */
#ifndef ASCEND_KV_HOST_TILING_CACHE_H
#define ASCEND_KV_HOST_TILING_CACHE_H

#include <cstddef>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

namespace ascend_kv {

/// Droppable entries the NPU build keeps: enough for the shapes a server cycles through, few
/// enough that varying prefill lengths cannot grow the cache.
constexpr size_t kTilingCacheEntries = 256;

/// Where a tiling is used and what it holds: (device index, stream, the tiling's bytes).
using TilingKey = std::tuple<int, const void*, std::string>;

/// `Entry`s by TilingKey, at most `capacity` of them droppable (least recently used first). Thread-safe.
template <typename Entry>
class TilingCache {
public:
    explicit TilingCache(size_t capacity) : capacity_(capacity) {}
    TilingCache(const TilingCache&) = delete;
    TilingCache& operator=(const TilingCache&) = delete;

    /// The entry of `key` (made by `make()` when there is none), shared with the caller, who may keep
    /// it alive past a drop (e.g. until a queued launch has run). `capturing`: the entry is used by
    /// a graph being captured: it is kept for good, and nothing is dropped now.
    template <typename Make>
    std::shared_ptr<Entry> Get(const TilingKey& key, bool capturing, Make make)
    {
        std::lock_guard<std::mutex> lock(mutex_);
        auto found = entries_.find(key);
        if (found == entries_.end()) {
            found = entries_.emplace(key, Slot{std::make_shared<Entry>(make()), recent_.end(), false}).first;
        } else if (!found->second.kept) {
            recent_.erase(found->second.recent);  // back at the front below
        }
        Slot& slot = found->second;
        if (capturing || slot.kept) {
            slot.kept = true;
            return slot.entry;
        }
        recent_.push_front(key);
        slot.recent = recent_.begin();
        while (recent_.size() > capacity_) {
            entries_.erase(recent_.back());
            recent_.pop_back();
        }
        return slot.entry;
    }

    /// Entries held, kept ones included.
    size_t Size() const
    {
        std::lock_guard<std::mutex> lock(mutex_);
        return entries_.size();
    }

private:
    struct Slot {
        std::shared_ptr<Entry> entry;
        std::list<TilingKey>::iterator recent;  ///< its place in recent_ (droppable entries only)
        bool kept;                              ///< used by a captured graph: never dropped
    };

    const size_t capacity_;
    mutable std::mutex mutex_;
    std::map<TilingKey, Slot> entries_;
    std::list<TilingKey> recent_;  ///< keys of the droppable entries, most recently used first
};

}  // namespace ascend_kv

#endif  // ASCEND_KV_HOST_TILING_CACHE_H
