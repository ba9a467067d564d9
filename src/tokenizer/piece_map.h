// Piece string -> token id lookup for tokenizers: an open-addressing hash table (XXH3, linear probing)
// over string_views into storage the caller keeps alive. Flat and cache-friendly, since loading a
// 150k-token vocabulary does millions of lookups. Invariant: capacity is a power of two, load <= 1/2.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

namespace kvlm {

class PieceMap {
public:
    PieceMap() = default;
    explicit PieceMap(size_t expected) { reserve(expected); }
    void reserve(size_t expected);
    // Keeps the first id for a piece inserted twice. `piece` must outlive the map.
    void insert(std::string_view piece, int32_t id);
    // insert(pieces[i], ids[i]) for i < n, in order, with the slots of each batch prefetched first so that
    // the cache misses of a vocabulary-sized table overlap.
    void insert_many(const std::string_view* pieces, const int32_t* ids, size_t n);
    int32_t find(std::string_view piece) const;  // -1 if absent
    // ids[i] = find(pieces[i]) for i < n: all hashes first, with their slots prefetched, then the probes,
    // so that n cache misses overlap (building a BPE vocabulary's merge table looks up 150k pieces).
    void find_many(const std::string_view* pieces, int32_t* ids, size_t n) const;
    size_t size() const { return size_; }

private:
    struct Slot {
        uint64_t hash = 0;
        const char* data = nullptr;  // nullptr: empty slot
        uint32_t length = 0;
        int32_t id = -1;
    };
    void grow();
    void insert_hashed(std::string_view piece, uint64_t hash, int32_t id);
    int32_t probe(std::string_view piece, uint64_t hash) const;

    std::vector<Slot> slots_;
    size_t size_ = 0;
};

}  // namespace kvlm
