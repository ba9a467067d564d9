// The KV pool as a cache (vLLM/SGLang-style automatic prefix caching). Full blocks are indexed by their
// chained hash (block_hash.h); a new sequence maps every cached block matching its token prefix into its
// block table instead of recomputing it. Unreferenced cached blocks stay resident and are evicted in LRU
// order, leaves first, only when the pool needs room.
// Invariants: the cache itself holds one reference on every indexed block, so KvPool's "free iff
// refcount 0" rule still holds; a block a sequence writes into has refcount 1 (copy-on-write otherwise).
#pragma once
#include <cstdint>
#include <vector>

#include "kv/block_hash.h"
#include "kv/block_storage.h"
#include "kv/kv_pool.h"

namespace kvlm {

// A sequence in the pool: the token ids whose K/V its blocks hold (table.n_tokens == tokens.size()).
struct Sequence {
    BlockTable table;
    std::vector<int32_t> tokens;
};

struct PrefixCacheStats {
    int32_t n_indexed = 0;       // blocks in the index
    int32_t n_evictable = 0;     // indexed blocks referenced by no sequence
    int64_t n_evictions = 0;     // since construction
    int64_t n_hit_blocks = 0;    // blocks mapped by attach_prefix since construction
};

class PrefixCache {
public:
    PrefixCache(KvPool& pool, KvBlockStorage& kv_storage, const BlockHash& kv_namespace);
    ~PrefixCache();  // drops the cache's own references
    PrefixCache(const PrefixCache&) = delete;
    PrefixCache& operator=(const PrefixCache&) = delete;

    const BlockHash& kv_namespace() const;

    // `seq` must be empty. Maps the longest run of cached full blocks matching a prefix of `tokens` into
    // seq (refcount + 1 each, seq.tokens/table.n_tokens set accordingly). At most tokens.size() - 1 tokens
    // are reused, so the caller always computes at least the last token (it needs its logits).
    // Returns the number of tokens reused.
    int32_t attach_prefix(Sequence& seq, const std::vector<int32_t>& tokens);

    // Makes seq's table able to hold n_tokens: allocates blocks (from the free list, else by evicting
    // LRU leaf blocks), and copies-on-write the block holding position seq.tokens.size() if it is shared.
    // Throws Error("KV cache is full: ...") when referenced blocks leave no room; seq is then unchanged.
    void reserve(Sequence& seq, int32_t n_tokens);

    // Call after the backend wrote K/V for tokens appended to seq.tokens (and table.n_tokens updated):
    // indexes every newly completed full block of seq (a block whose hash is already indexed elsewhere is
    // left as is - the sequence keeps its own copy).
    void commit(Sequence& seq);

    Sequence fork(const Sequence& seq);             // shares every block (refcount + 1 each)
    void truncate(Sequence& seq, int32_t n_tokens);  // keeps the first n_tokens, releases blocks past them
    void release(Sequence& seq);                    // drops seq's references and empties it

    // Hash of seq's full block i (i < tokens.size() / block_size), computed along the chain.
    std::vector<BlockHash> full_block_hashes(const Sequence& seq) const;
    // Cached block with this hash, or -1. Does not change refcounts or LRU order.
    int32_t lookup(const BlockHash& hash) const;
    // Session restore, in two steps so that many blocks' bytes can be read from disk straight into the pool
    // at once. claim_block returns a block for `hash` with one reference held for the caller (append it to a
    // sequence's table): the indexed block if a full one with this hash is cached (*cached = true: its bytes
    // are there), else a fresh one (*cached = false) whose bytes the caller writes through the storage and
    // then passes to index_claimed (full blocks: indexed under `hash`, child of `parent`; a partial block is
    // never indexed), or hands back with release_claimed when they could not be read. -1 when no block can
    // be freed.
    int32_t claim_block(const BlockHash& hash, bool full, bool* cached);
    void index_claimed(int32_t block, const BlockHash& hash, const BlockHash& parent);
    void release_claimed(int32_t block);

    PrefixCacheStats stats() const;
    // Evicts every cached block no sequence references (a cold cache for benchmarks); returns how many.
    int32_t evict_unreferenced();

private:
    struct Impl;
    Impl* impl_;
};

}  // namespace kvlm
