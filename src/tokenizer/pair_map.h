// Token pair -> BPE merge (rank, result) for the byte-level encoder: an open-addressing table (linear probing,
// Fibonacci hashing of the 64-bit pair key) in one array. Building it was a quarter of a BPE tokenizer's
// start-up as std::unordered_map (a node allocation per merge, 49k for SmolLM2, 280k for Llama 3).
// Invariant: capacity is a power of two, load <= 1/2.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvlm {

struct BpeMerge {
    int32_t rank;
    int32_t result;  // token id of left + right
};

class PairMap {
public:
    static uint64_t key(int32_t left, int32_t right) {
        return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
    }
    void reserve(size_t expected);
    // Keeps the first merge of a pair inserted twice (the lower rank, as merges are inserted in rank order).
    void insert(uint64_t key, BpeMerge merge);
    // insert(keys[i], merges[i]) for i < n, in order, with every slot prefetched first so that the cache misses
    // of the 2 MB table of a 49k-merge vocabulary overlap.
    void insert_many(const uint64_t* keys, const BpeMerge* merges, size_t n);
    const BpeMerge* find(uint64_t key) const;  // nullptr if absent
    size_t size() const { return size_; }

private:
    // Token ids are non-negative int32, so no key has bit 63 set: all ones marks an empty slot.
    static constexpr uint64_t kEmpty = ~uint64_t(0);
    struct Slot {
        uint64_t key = kEmpty;
        BpeMerge merge{};
    };
    size_t slot_of(uint64_t key) const { return size_t((key * 0x9E3779B97F4A7C15ull) >> shift_); }
    void grow();

    std::vector<Slot> slots_;
    int shift_ = 64;  // 64 - log2(capacity)
    size_t size_ = 0;
};

}  // namespace kvlm
