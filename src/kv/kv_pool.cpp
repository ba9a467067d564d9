// KV block allocator and block tables. A block is on the free list iff its refcount is 0; reserve_tokens
// is all-or-nothing.
#include "kv/kv_pool.h"

#include "util/error.h"

namespace kvlm {

KvPool::KvPool(int32_t n_blocks, int32_t block_size) : block_size_(block_size) {
    if (n_blocks < 0) throw_error("KV pool: n_blocks = {} must not be negative", n_blocks);
    if (block_size < 1) throw_error("KV pool: block_size = {} must be at least 1", block_size);
    refcounts_.assign(size_t(n_blocks), 0);
    free_list_.reserve(size_t(n_blocks));
    // Stack order: block 0 is handed out first.
    for (int32_t b = n_blocks - 1; b >= 0; b--) free_list_.push_back(b);
}

int32_t KvPool::refcount(int32_t block) const {
    KVLM_ASSERT(block >= 0 && block < n_blocks(), "block id out of range");
    return refcounts_[size_t(block)];
}

int32_t KvPool::allocate() {
    if (free_list_.empty()) return -1;
    int32_t block = free_list_.back();
    free_list_.pop_back();
    KVLM_ASSERT(refcounts_[size_t(block)] == 0, "free block has a nonzero refcount");
    refcounts_[size_t(block)] = 1;
    return block;
}

void KvPool::retain(int32_t block) {
    KVLM_ASSERT(block >= 0 && block < n_blocks(), "block id out of range");
    KVLM_ASSERT(refcounts_[size_t(block)] > 0, "retain of a free block");
    refcounts_[size_t(block)]++;
}

void KvPool::release(int32_t block) {
    KVLM_ASSERT(block >= 0 && block < n_blocks(), "block id out of range");
    KVLM_ASSERT(refcounts_[size_t(block)] > 0, "release of a free block");
    if (--refcounts_[size_t(block)] == 0) free_list_.push_back(block);
}

void reserve_tokens(KvPool& pool, BlockTable& table, int32_t n_tokens) {
    int64_t needed_blocks = (int64_t(n_tokens) + pool.block_size() - 1) / pool.block_size();
    int64_t missing = needed_blocks - int64_t(table.blocks.size());
    if (missing <= 0) return;
    if (missing > pool.n_free())
        throw_error("KV cache is full: {} tokens need {} more blocks of {} tokens, but only {} of {} are free "
                    "(hint: raise --kv-mem or shorten the context)",
                    n_tokens, missing, pool.block_size(), pool.n_free(), pool.n_blocks());
    table.blocks.reserve(size_t(needed_blocks));
    for (int64_t i = 0; i < missing; i++) table.blocks.push_back(pool.allocate());
}

void release_table(KvPool& pool, BlockTable& table) {
    for (int32_t block : table.blocks) pool.release(block);
    table.blocks.clear();
    table.n_tokens = 0;
}

}  // namespace kvlm
