// Paged KV-cache bookkeeping (PagedAttention-style): a fixed set of physical blocks of block_size
// token slots each, a free list, reference counts, and per-sequence block tables mapping a sequence's
// logical block i to a physical block. Plain C++: the K/V bytes themselves belong to the backend.
// Invariant: a block is on the free list iff its refcount is 0.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kvlm {

class KvPool {
public:
    KvPool(int32_t n_blocks, int32_t block_size);

    int32_t block_size() const { return block_size_; }
    int32_t n_blocks() const { return int32_t(refcounts_.size()); }
    int32_t n_free() const { return int32_t(free_list_.size()); }
    int32_t n_used() const { return n_blocks() - n_free(); }
    int32_t refcount(int32_t block) const;

    // Takes a free block (refcount becomes 1). Returns -1 when none is free.
    int32_t allocate();
    void retain(int32_t block);   // refcount + 1
    void release(int32_t block);  // refcount - 1; back on the free list at 0

private:
    int32_t block_size_;
    std::vector<int32_t> refcounts_;  // [n_blocks]
    std::vector<int32_t> free_list_;  // LIFO stack of free block ids
};

// One sequence's view of the pool: tokens 0..n_tokens-1 live in blocks[pos / block_size] at slot
// pos % block_size.
struct BlockTable {
    std::vector<int32_t> blocks;  // [ceil(n_tokens / block_size)] physical block ids
    int32_t n_tokens = 0;

    int32_t capacity(int32_t block_size) const { return int32_t(blocks.size()) * block_size; }
};

// Grows `table` so it can hold n_tokens tokens, allocating blocks from `pool`. Throws Error
// ("KV cache is full: ...") naming how many blocks were needed and free if the pool runs out;
// on failure the table and pool are unchanged.
void reserve_tokens(KvPool& pool, BlockTable& table, int32_t n_tokens);
// Releases every block of `table` and empties it.
void release_table(KvPool& pool, BlockTable& table);

}  // namespace kvlm
