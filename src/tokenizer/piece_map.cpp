// Open-addressing piece -> id table (see piece_map.h).
#include "tokenizer/piece_map.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

namespace kvlm {

namespace {

uint64_t hash_piece(std::string_view piece) { return XXH3_64bits(piece.data(), piece.size()); }

}  // namespace

void PieceMap::reserve(size_t expected) {
    size_t capacity = 16;
    while (capacity < expected * 2) capacity *= 2;
    if (capacity <= slots_.size()) return;
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(capacity, Slot{});
    size_ = 0;
    for (const Slot& s : old)
        if (s.data) insert(std::string_view(s.data, s.length), s.id);
}

void PieceMap::grow() { reserve(slots_.empty() ? 8 : slots_.size()); }

void PieceMap::insert(std::string_view piece, int32_t id) { insert_hashed(piece, hash_piece(piece), id); }

void PieceMap::insert_many(const std::string_view* pieces, const int32_t* ids, size_t n) {
    constexpr size_t kBatch = 32;
    uint64_t hashes[kBatch];
    reserve(size_ + n);
    const size_t mask = slots_.size() - 1;
    for (size_t i0 = 0; i0 < n; i0 += kBatch) {
        const size_t count = std::min(kBatch, n - i0);
        for (size_t i = 0; i < count; i++) {
            hashes[i] = hash_piece(pieces[i0 + i]);
            __builtin_prefetch(&slots_[hashes[i] & mask], 1);
        }
        for (size_t i = 0; i < count; i++)
            insert_hashed(pieces[i0 + i], hashes[i], ids[i0 + i]);
    }
}

void PieceMap::insert_hashed(std::string_view piece, uint64_t hash, int32_t id) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    const size_t mask = slots_.size() - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        Slot& s = slots_[i];
        if (!s.data) {
            s = {hash, piece.data() ? piece.data() : "", static_cast<uint32_t>(piece.size()), id};
            ++size_;
            return;
        }
        if (s.hash == hash && s.length == piece.size() && std::memcmp(s.data, piece.data(), piece.size()) == 0) return;
    }
}

int32_t PieceMap::find(std::string_view piece) const {
    if (slots_.empty()) return -1;
    return probe(piece, hash_piece(piece));
}

void PieceMap::find_many(const std::string_view* pieces, int32_t* ids, size_t n) const {
    constexpr size_t kBatch = 32;
    uint64_t hashes[kBatch];
    for (size_t i0 = 0; i0 < n; i0 += kBatch) {
        const size_t count = std::min(kBatch, n - i0);
        if (slots_.empty()) {
            std::fill(ids + i0, ids + i0 + count, -1);
            continue;
        }
        const size_t mask = slots_.size() - 1;
        for (size_t i = 0; i < count; i++) {
            hashes[i] = hash_piece(pieces[i0 + i]);
            __builtin_prefetch(&slots_[hashes[i] & mask]);
        }
        for (size_t i = 0; i < count; i++) ids[i0 + i] = probe(pieces[i0 + i], hashes[i]);
    }
}

int32_t PieceMap::probe(std::string_view piece, uint64_t hash) const {
    const size_t mask = slots_.size() - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        const Slot& s = slots_[i];
        if (!s.data) return -1;
        if (s.hash == hash && s.length == piece.size() && std::memcmp(s.data, piece.data(), piece.size()) == 0)
            return s.id;
    }
}

}  // namespace kvlm
