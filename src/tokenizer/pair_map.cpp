#include "tokenizer/pair_map.h"

namespace kvlm {

void PairMap::reserve(size_t expected) {
    size_t capacity = 16;
    while (capacity < 2 * expected) capacity *= 2;
    if (capacity <= slots_.size()) return;
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(capacity, Slot{});
    shift_ = 64;
    for (size_t c = capacity; c > 1; c /= 2) shift_--;
    size_ = 0;
    for (const Slot& slot : old)
        if (slot.key != kEmpty) insert(slot.key, slot.merge);
}

void PairMap::grow() { reserve(slots_.empty() ? 8 : slots_.size()); }

void PairMap::insert(uint64_t key, BpeMerge merge) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    const size_t mask = slots_.size() - 1;
    for (size_t i = slot_of(key);; i = (i + 1) & mask) {
        Slot& slot = slots_[i];
        if (slot.key == key) return;
        if (slot.key == kEmpty) {
            slot.key = key;
            slot.merge = merge;
            size_++;
            return;
        }
    }
}

void PairMap::insert_many(const uint64_t* keys, const BpeMerge* merges, size_t n) {
    reserve(size_ + n);
    for (size_t i = 0; i < n; i++) __builtin_prefetch(&slots_[slot_of(keys[i])], 1);
    for (size_t i = 0; i < n; i++) insert(keys[i], merges[i]);
}

const BpeMerge* PairMap::find(uint64_t key) const {
    if (slots_.empty()) return nullptr;
    const size_t mask = slots_.size() - 1;
    for (size_t i = slot_of(key);; i = (i + 1) & mask) {
        const Slot& slot = slots_[i];
        if (slot.key == key) return &slot.merge;
        if (slot.key == kEmpty) return nullptr;
    }
}

}  // namespace kvlm
