// Cases for the NPU build's tiling cache (ascendc/host/tiling_cache.h), run by tests/test_tiling_cache.py
// as `tiling_cache_cases <case>`; each prints key=value lines. Entries count how many of them live.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "tiling_cache.h"

namespace {

int g_live = 0;  // entries alive (in the cache or held by a caller)
int g_made = 0;  // entries ever made

struct Entry {
    explicit Entry(int id) : id(id) { ++g_live; ++g_made; }
    Entry(const Entry& other) : id(other.id) { ++g_live; }
    ~Entry() { --g_live; }
    int id;
};

ascend_kv::TilingKey Key(int tokens, int stream = 0)
{
    // a tiling's bytes: the same shapes, a different token count per call
    return ascend_kv::TilingKey{0, reinterpret_cast<const void*>(static_cast<uintptr_t>(stream)),
                                "tokens=" + std::to_string(tokens)};
}

std::shared_ptr<Entry> Get(ascend_kv::TilingCache<Entry>& cache, int tokens, bool capturing = false)
{
    return cache.Get(Key(tokens), capturing, [tokens]() { return Entry(tokens); });
}

}  // namespace

int main(int argc, char** argv)
{
    if (argc < 2) {
        std::printf("usage: %s <case>\n", argv[0]);
        return 2;
    }
    const std::string name = argv[1];
    constexpr size_t kCapacity = ascend_kv::kTilingCacheEntries;  // the NPU build's bound
    ascend_kv::TilingCache<Entry> cache(kCapacity);
    size_t largest = 0;
    if (name == "varying_prefill") {  // 10,000 calls, each with a token count not seen before
        for (int tokens = 1; tokens <= 10000; ++tokens) {
            Get(cache, tokens);
            largest = std::max(largest, cache.Size());
        }
    } else if (name == "recently_used_stay") {  // fill, use the oldest again, add one: the second oldest goes
        for (int tokens = 0; tokens < static_cast<int>(kCapacity); ++tokens) Get(cache, tokens);
        int made = g_made;
        Get(cache, 0);
        Get(cache, 1000);
        Get(cache, 0);
        std::printf("oldest_remade=%d\n", g_made - made - 1);  // only 1000 was made
        made = g_made;
        Get(cache, 1);
        std::printf("second_oldest_remade=%d\n", g_made - made);
        largest = cache.Size();
    } else if (name == "captured_are_kept") {  // 10 tilings of a captured graph, then 10,000 eager calls
        for (int tokens = 0; tokens < 10; ++tokens) Get(cache, -1 - tokens, /*capturing=*/true);
        Get(cache, -1);  // a replay's shape used eagerly: still kept
        for (int tokens = 1; tokens <= 10000; ++tokens) Get(cache, tokens);
        const int made = g_made;
        for (int tokens = 0; tokens < 10; ++tokens) Get(cache, -1 - tokens);
        std::printf("captured_remade=%d\n", g_made - made);
        largest = cache.Size();
    } else if (name == "held_past_a_drop") {  // an entry a queued launch holds outlives its drop
        std::shared_ptr<Entry> held = Get(cache, 7);
        for (int tokens = 100; tokens < 100 + static_cast<int>(kCapacity); ++tokens) Get(cache, tokens);
        std::printf("held_id=%d\nlive_while_held=%d\n", held->id, g_live);
        largest = cache.Size();
    } else {
        std::printf("unknown case %s\n", name.c_str());
        return 2;
    }
    std::printf("size=%zu\nlargest=%zu\nlive=%d\nmade=%d\n", cache.Size(), largest, g_live, g_made);
    return 0;
}
