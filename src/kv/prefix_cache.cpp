// Prefix cache over the KV pool: hash index of full blocks, the cache's own reference on each, LRU
// leaves-first eviction and copy-on-write. An indexed block is never written again (writers hold refcount
// 1, the cache's reference makes it >= 2, so they copy first), so its bytes always match its hash.
#include "kv/prefix_cache.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "util/error.h"

namespace kvlm {

namespace {
struct Node {
    int32_t block = -1;
    BlockHash parent;       // hash of the preceding block (the namespace for block 0)
    uint64_t last_used = 0; // LRU tick
};
}  // namespace

struct PrefixCache::Impl {
    KvPool& pool;
    KvBlockStorage& kv_storage;
    BlockHash ns;
    std::unordered_map<BlockHash, Node, BlockHashHasher> index;
    // Indexed children per parent hash, kept by hash so a child adopted before its parent still counts.
    std::unordered_map<BlockHash, int32_t, BlockHashHasher> n_children;
    std::vector<BlockHash> block_hash;  // [n_blocks] hash of an indexed block
    std::vector<uint8_t> indexed;       // [n_blocks] 1 if the block is in the index
    uint64_t tick = 0;
    PrefixCacheStats stats;

    Impl(KvPool& p, KvBlockStorage& b, const BlockHash& n)
        : pool(p), kv_storage(b), ns(n), block_hash(size_t(p.n_blocks())), indexed(size_t(p.n_blocks()), 0) {}

    int32_t block_size() const { return pool.block_size(); }

    void touch(int32_t block) {
        if (indexed[size_t(block)]) index[block_hash[size_t(block)]].last_used = ++tick;
    }

    // Indexes `block` under `hash`, taking the cache's own reference.
    void insert(int32_t block, const BlockHash& hash, const BlockHash& parent) {
        pool.retain(block);
        index[hash] = Node{block, parent, ++tick};
        n_children[parent]++;
        block_hash[size_t(block)] = hash;
        indexed[size_t(block)] = 1;
    }

    void erase(const BlockHash& hash) {
        auto it = index.find(hash);
        int32_t block = it->second.block;
        auto parent = n_children.find(it->second.parent);
        if (--parent->second == 0) n_children.erase(parent);
        index.erase(it);
        indexed[size_t(block)] = 0;
        pool.release(block);
    }

    // The index node `node` (whose block only the index references) now names `block`, which holds the same
    // tokens; the old block is freed.
    void repoint(Node& node, int32_t block) {
        const int32_t old = node.block;
        pool.retain(block);
        block_hash[size_t(block)] = block_hash[size_t(old)];
        indexed[size_t(block)] = 1;
        indexed[size_t(old)] = 0;
        pool.release(old);
        node.block = block;
        node.last_used = ++tick;
    }

    bool is_leaf(const BlockHash& hash) const { return n_children.find(hash) == n_children.end(); }

    // Evicts the least recently used unreferenced leaf. Linear in the index: it runs only when the free
    // list is empty, and a scan is cheap next to the forward pass that needs the block.
    bool evict_one() {
        const BlockHash* victim = nullptr;
        uint64_t oldest = UINT64_MAX;
        for (const auto& [hash, node] : index)
            if (node.last_used < oldest && pool.refcount(node.block) == 1 && is_leaf(hash)) {
                oldest = node.last_used;
                victim = &hash;
            }
        if (!victim) return false;
        erase(BlockHash(*victim));
        stats.n_evictions++;
        return true;
    }

    // Blocks that repeated leaf eviction could free: unreferenced indexed blocks with no referenced
    // indexed descendant.
    int32_t n_reclaimable() const {
        std::unordered_set<BlockHash, BlockHashHasher> pinned;  // ancestors of referenced blocks
        for (const auto& [hash, node] : index) {
            if (pool.refcount(node.block) == 1) continue;
            for (auto it = index.find(node.parent); it != index.end() && pinned.insert(it->first).second;
                 it = index.find(it->second.parent)) {
            }
        }
        int32_t n = 0;
        for (const auto& [hash, node] : index)
            if (pool.refcount(node.block) == 1 && !pinned.count(hash)) n++;
        return n;
    }

    int32_t allocate() {
        int32_t block = pool.allocate();
        if (block < 0 && evict_one()) block = pool.allocate();
        return block;
    }

    void release_block(int32_t block) {
        touch(block);
        pool.release(block);
    }
};

PrefixCache::PrefixCache(KvPool& pool, KvBlockStorage& kv_storage, const BlockHash& kv_namespace)
    : impl_(new Impl(pool, kv_storage, kv_namespace)) {}

PrefixCache::~PrefixCache() {
    for (const auto& [hash, node] : impl_->index) impl_->pool.release(node.block);
    delete impl_;
}

const BlockHash& PrefixCache::kv_namespace() const { return impl_->ns; }

int32_t PrefixCache::attach_prefix(Sequence& seq, const std::vector<int32_t>& tokens) {
    KVLM_ASSERT(seq.tokens.empty() && seq.table.blocks.empty() && seq.table.n_tokens == 0,
                "attach_prefix needs an empty sequence");
    if (tokens.size() < 2) return 0;
    const int32_t bs = impl_->block_size();
    const int32_t n_max = int32_t(tokens.size()) - 1;
    // A full block matching past n_max is still mapped: the caller recomputes its last token into a
    // copy (reserve copies-on-write), which beats recomputing the whole block.
    BlockHash parent = impl_->ns;
    int32_t n_blocks = 0;
    for (int32_t i = 0; (i + 1) * bs <= int32_t(tokens.size()); i++) {
        BlockHash hash = chain_block_hash(parent, tokens.data() + size_t(i) * size_t(bs), bs);
        auto it = impl_->index.find(hash);
        if (it == impl_->index.end()) break;
        impl_->pool.retain(it->second.block);
        it->second.last_used = ++impl_->tick;
        seq.table.blocks.push_back(it->second.block);
        parent = hash;
        n_blocks++;
    }
    int32_t n_reused = std::min(n_blocks * bs, n_max);
    seq.tokens.assign(tokens.begin(), tokens.begin() + n_reused);
    seq.table.n_tokens = n_reused;
    impl_->stats.n_hit_blocks += n_blocks;
    return n_reused;
}

void PrefixCache::reserve(Sequence& seq, int32_t n_tokens) {
    Impl& m = *impl_;
    const int32_t bs = m.block_size();
    BlockTable& table = seq.table;
    const int32_t n_needed_blocks = int32_t((int64_t(n_tokens) + bs - 1) / bs);
    // Blocks seq will write into that someone else also references: copy-on-write.
    std::vector<int32_t> shared;  // logical block indices
    for (int32_t i = table.n_tokens / bs; i < std::min<int32_t>(n_needed_blocks, int32_t(table.blocks.size())); i++)
        if (m.pool.refcount(table.blocks[size_t(i)]) > 1) shared.push_back(i);
    int64_t n_missing = std::max<int64_t>(0, n_needed_blocks - int64_t(table.blocks.size())) + int64_t(shared.size());
    if (n_missing == 0) return;
    if (n_missing > m.pool.n_free()) {
        int32_t n_reclaimable = m.n_reclaimable();
        if (n_missing > int64_t(m.pool.n_free()) + n_reclaimable)
            throw_error("KV cache is full: {} tokens need {} more blocks of {} tokens, but only {} of {} are free "
                        "({} free, {} cached and unreferenced; hint: raise --kv-mem or shorten the context)",
                        n_tokens, n_missing, bs, m.pool.n_free() + n_reclaimable, m.pool.n_blocks(), m.pool.n_free(),
                        n_reclaimable);
    }
    for (int32_t i : shared) {
        int32_t old_block = table.blocks[size_t(i)];
        int32_t new_block = m.allocate();
        KVLM_ASSERT(new_block >= 0, "allocation failed after the capacity check");
        if (int64_t(i) * bs < table.n_tokens) m.kv_storage.copy_kv_block(old_block, new_block);
        table.blocks[size_t(i)] = new_block;
        m.release_block(old_block);
    }
    while (int32_t(table.blocks.size()) < n_needed_blocks) {
        int32_t block = m.allocate();
        KVLM_ASSERT(block >= 0, "allocation failed after the capacity check");
        table.blocks.push_back(block);
    }
}

void PrefixCache::commit(Sequence& seq) {
    Impl& m = *impl_;
    const int32_t bs = m.block_size();
    KVLM_ASSERT(seq.table.n_tokens == int32_t(seq.tokens.size()), "sequence tokens and table disagree");
    const int32_t n_full = int32_t(seq.tokens.size()) / bs;
    BlockHash parent = m.ns;
    for (int32_t i = 0; i < n_full; i++) {
        int32_t block = seq.table.blocks[size_t(i)];
        if (m.indexed[size_t(block)]) {  // already indexed: its hash is this chain's (content-addressed)
            parent = m.block_hash[size_t(block)];
            continue;
        }
        BlockHash hash = chain_block_hash(parent, seq.tokens.data() + size_t(i) * size_t(bs), bs);
        auto it = m.index.find(hash);
        if (it == m.index.end()) {
            m.insert(block, hash, parent);
        } else if (m.pool.refcount(it->second.block) == 1) {
            // The same tokens were cached before (an earlier sample that began alike) and nobody uses that copy:
            // the index takes this sequence's block instead. Left as it was, the old copy could never be evicted
            // (this chain's next block names it as parent) nor reused by this sequence: a block lost per
            // duplicate, enough to fill a pool sized for the context.
            m.repoint(it->second, block);
        }
        parent = hash;
    }
}

Sequence PrefixCache::fork(const Sequence& seq) {
    const int32_t bs = impl_->block_size();
    Sequence copy;
    copy.tokens = seq.tokens;
    copy.table.n_tokens = seq.table.n_tokens;
    // Only blocks holding tokens: spare capacity past them stays the original's.
    size_t n_blocks = size_t((int64_t(seq.table.n_tokens) + bs - 1) / bs);
    copy.table.blocks.assign(seq.table.blocks.begin(), seq.table.blocks.begin() + std::min(n_blocks, seq.table.blocks.size()));
    for (int32_t block : copy.table.blocks) impl_->pool.retain(block);
    return copy;
}

void PrefixCache::truncate(Sequence& seq, int32_t n_tokens) {
    KVLM_ASSERT(n_tokens >= 0 && n_tokens <= seq.table.n_tokens, "truncate past the sequence's end");
    const int32_t bs = impl_->block_size();
    size_t n_blocks = size_t((int64_t(n_tokens) + bs - 1) / bs);
    while (seq.table.blocks.size() > n_blocks) {
        impl_->release_block(seq.table.blocks.back());
        seq.table.blocks.pop_back();
    }
    seq.tokens.resize(size_t(n_tokens));
    seq.table.n_tokens = n_tokens;
}

void PrefixCache::release(Sequence& seq) {
    // Front to back: ticks increase along the chain (eviction takes leaves first regardless).
    for (int32_t block : seq.table.blocks) impl_->release_block(block);
    seq.table.blocks.clear();
    seq.table.n_tokens = 0;
    seq.tokens.clear();
}

std::vector<BlockHash> PrefixCache::full_block_hashes(const Sequence& seq) const {
    const int32_t bs = impl_->block_size();
    std::vector<BlockHash> hashes;
    BlockHash parent = impl_->ns;
    for (size_t i = 0; (i + 1) * size_t(bs) <= seq.tokens.size(); i++) {
        parent = chain_block_hash(parent, seq.tokens.data() + i * size_t(bs), bs);
        hashes.push_back(parent);
    }
    return hashes;
}

int32_t PrefixCache::lookup(const BlockHash& hash) const {
    auto it = impl_->index.find(hash);
    return it == impl_->index.end() ? -1 : it->second.block;
}

int32_t PrefixCache::claim_block(const BlockHash& hash, bool full, bool* cached) {
    Impl& m = *impl_;
    *cached = false;
    if (full) {
        auto it = m.index.find(hash);
        if (it != m.index.end()) {
            m.pool.retain(it->second.block);
            it->second.last_used = ++m.tick;
            *cached = true;
            return it->second.block;
        }
    }
    return m.allocate();
}

void PrefixCache::index_claimed(int32_t block, const BlockHash& hash, const BlockHash& parent) {
    KVLM_ASSERT(!impl_->index.count(hash), "index_claimed: the hash is indexed already (claim_block returns that block)");
    impl_->insert(block, hash, parent);
}

void PrefixCache::release_claimed(int32_t block) { impl_->pool.release(block); }

PrefixCacheStats PrefixCache::stats() const {
    PrefixCacheStats s = impl_->stats;
    s.n_indexed = int32_t(impl_->index.size());
    for (const auto& [hash, node] : impl_->index)
        if (impl_->pool.refcount(node.block) == 1) s.n_evictable++;
    return s;
}

int32_t PrefixCache::evict_unreferenced() {
    int32_t n = 0;
    while (impl_->evict_one()) n++;
    return n;
}

}  // namespace kvlm
