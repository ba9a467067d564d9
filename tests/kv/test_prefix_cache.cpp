// Prefix cache on a random in-memory model: reused prefixes, forks and truncations give logits
// bit-identical to computing from scratch (the CPU backend is deterministic across batching); LRU
// leaves-first eviction; a full pool is a clear error that changes nothing; refcounts return to the
// cache's own references; generate() continues a sequence exactly.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "compute/cpu_backend.h"
#include "engine/engine.h"
#include "generate/generate.h"
#include "kv/prefix_cache.h"
#include "support/random_model.h"
#include "support/test_util.h"
#include "support/tiny_model.h"
#include "util/error.h"

using namespace kvlm;
using namespace kvlm::test;

namespace {

std::vector<int32_t> random_tokens(int32_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    for (auto& t : tokens) t = int32_t(rng() % 100);  // small_random_config's vocabulary
    return tokens;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A backend, pool and cache over one random model.
struct Rig {
    std::unique_ptr<RandomModel> model;
    std::unique_ptr<Backend> backend;
    KvPool pool;
    std::unique_ptr<PrefixCache> cache;

    Rig(int32_t n_blocks, int32_t block_size)
        : model(make_random_model(small_random_config(), DType::f32, 11)), pool(n_blocks, block_size) {
        BackendOptions options;
        options.n_threads = 1;
        options.n_kv_blocks = n_blocks;
        options.block_size = block_size;
        backend = make_cpu_backend(model->config, model->weights, options);
        cache = std::make_unique<PrefixCache>(pool, *backend, kv_namespace_hash("random-model", DType::f32, block_size));
    }

    // Empty seq: `tokens` is the whole request, and its cached prefix is attached first. Otherwise the
    // tokens are appended. Returns the last token's logits.
    std::vector<float> extend(Sequence& seq, const std::vector<int32_t>& tokens, int32_t* n_reused = nullptr) {
        int32_t reused = seq.tokens.empty() ? cache->attach_prefix(seq, tokens) : 0;
        int32_t n = int32_t(tokens.size()) - reused;
        cache->reserve(seq, seq.table.n_tokens + n);
        std::vector<float> logits(size_t(model->config.n_vocab));
        backend->forward(tokens.data() + reused, n, seq.table.n_tokens, seq.table, logits.data());
        seq.table.n_tokens += n;
        seq.tokens.insert(seq.tokens.end(), tokens.begin() + reused, tokens.end());
        cache->commit(seq);
        if (n_reused) *n_reused = reused;
        return logits;
    }

    // Last-token logits of `tokens` in one forward through a fresh backend.
    std::vector<float> scratch(const std::vector<int32_t>& tokens) const {
        BackendOptions options;
        options.n_threads = 1;
        options.block_size = pool.block_size();
        options.n_kv_blocks = int32_t(tokens.size()) / pool.block_size() + 1;
        auto fresh = make_cpu_backend(model->config, model->weights, options);
        BlockTable table;
        table.blocks.resize(size_t(options.n_kv_blocks));
        std::iota(table.blocks.begin(), table.blocks.end(), 0);
        std::vector<float> logits(size_t(model->config.n_vocab));
        fresh->forward(tokens.data(), int32_t(tokens.size()), 0, table, logits.data());
        return logits;
    }

    // Every block is held by exactly the cache (indexed) or nobody.
    void check_only_cache_references() const {
        PrefixCacheStats s = cache->stats();
        CHECK(pool.n_used() == s.n_indexed);
        CHECK(s.n_evictable == s.n_indexed);
        for (int32_t b = 0; b < pool.n_blocks(); b++) CHECK(pool.refcount(b) <= 1);
    }

    bool all_cached(const Sequence& seq) const {
        for (const BlockHash& h : cache->full_block_hashes(seq))
            if (cache->lookup(h) < 0) return false;
        return true;
    }
    bool none_cached(const Sequence& seq) const {
        for (const BlockHash& h : cache->full_block_hashes(seq))
            if (cache->lookup(h) >= 0) return false;
        return true;
    }
};

}  // namespace

TEST_CASE("prefix_cache: a cached prefix gives logits bit-identical to computing from scratch") {
    Rig rig(64, 4);
    std::vector<int32_t> prompt = random_tokens(37, 1);
    Sequence a;
    CHECK(same_bits(rig.extend(a, prompt), rig.scratch(prompt)));
    CHECK(rig.cache->stats().n_indexed == 9);  // 37 tokens: 9 full blocks of 4
    rig.cache->release(a);

    // Shares the first 30 tokens: blocks 0..6 (28 tokens) match, block 7 diverges.
    std::vector<int32_t> other = concat({prompt.begin(), prompt.begin() + 30}, random_tokens(9, 2));
    Sequence b;
    int32_t n_reused = -1;
    CHECK(same_bits(rig.extend(b, other, &n_reused), rig.scratch(other)));
    CHECK(n_reused == 28);
    CHECK(rig.cache->stats().n_hit_blocks == 7);

    // The same prompt again: everything but the last token comes from the pool.
    Sequence c;
    CHECK(same_bits(rig.extend(c, prompt, &n_reused), rig.scratch(prompt)));
    CHECK(n_reused == 36);

    // Block-aligned prompt: its last cached block is mapped too and copied before its last token is
    // recomputed; the cached block itself stays intact for the next request.
    std::vector<int32_t> aligned(prompt.begin(), prompt.begin() + 32);
    for (int round = 0; round < 2; round++) {
        Sequence d;
        CHECK(same_bits(rig.extend(d, aligned, &n_reused), rig.scratch(aligned)));
        CHECK(n_reused == 31);
        rig.cache->release(d);
    }
    // Decoding on top of a reused prefix stays exact.
    std::vector<int32_t> continued = prompt;
    for (int32_t t : random_tokens(6, 3)) {
        continued.push_back(t);
        CHECK(same_bits(rig.extend(c, {t}), rig.scratch(continued)));
    }
    rig.cache->release(b);
    rig.cache->release(c);
    rig.check_only_cache_references();
}

TEST_CASE("prefix_cache: forked sequences diverging inside a shared block each get their own copy") {
    Rig rig(32, 4);
    std::vector<int32_t> prompt = random_tokens(10, 4);  // blocks 0, 1 full, block 2 holds 2 tokens
    Sequence a;
    rig.extend(a, prompt);
    Sequence b = rig.cache->fork(a);
    CHECK(b.tokens == a.tokens);
    CHECK(b.table.blocks == a.table.blocks);
    CHECK(rig.pool.refcount(a.table.blocks[2]) == 2);

    std::vector<int32_t> xs = random_tokens(7, 5), ys = random_tokens(7, 6);
    std::vector<int32_t> a_tokens = prompt, b_tokens = prompt;
    for (size_t i = 0; i < xs.size(); i++) {  // interleaved, so each write would clobber the other
        a_tokens.push_back(xs[i]);
        b_tokens.push_back(ys[i]);
        CHECK(same_bits(rig.extend(a, {xs[i]}), rig.scratch(a_tokens)));
        CHECK(same_bits(rig.extend(b, {ys[i]}), rig.scratch(b_tokens)));
    }
    CHECK(a.table.blocks[0] == b.table.blocks[0]);
    CHECK(a.table.blocks[1] == b.table.blocks[1]);
    CHECK(a.table.blocks[2] != b.table.blocks[2]);
    CHECK(rig.pool.refcount(a.table.blocks[2]) == 2);  // a's copy (now full) and the cache
    CHECK(rig.pool.refcount(b.table.blocks[2]) == 2);

    // Forking then extending only the fork leaves the original exact as well.
    Sequence c = rig.cache->fork(a);
    rig.extend(c, random_tokens(3, 7));
    a_tokens.push_back(42);
    CHECK(same_bits(rig.extend(a, {42}), rig.scratch(a_tokens)));
    for (Sequence* s : {&a, &b, &c}) rig.cache->release(*s);
    rig.check_only_cache_references();
}

TEST_CASE("prefix_cache: a fork that writes tokens already cached takes over the unused copy, leaving none pinned") {
    // Two forks of one partial prompt block, one after the other, that fill their first block alike and then
    // part (as --samples do when samples begin alike): a pool of the prompt's block plus one sequence's three
    // blocks must hold the second fork too, so the first's cached copy of the common block may not stay
    // pinned (the second's next block names its hash as parent, so it is no leaf to evict).
    Rig rig(4, 4);
    const std::vector<int32_t> prompt = random_tokens(2, 40), common = random_tokens(2, 41);
    Sequence base;
    rig.extend(base, prompt);
    for (uint64_t seed : {42, 43}) {
        Sequence s = rig.cache->fork(base);
        std::vector<int32_t> tokens = concat(prompt, common);
        rig.extend(s, common);  // block 0 full: the same tokens in both forks
        for (int32_t i = 0; i < 8; i++) {
            const std::vector<int32_t> next = random_tokens(1, seed * 100 + uint64_t(i));
            tokens.push_back(next[0]);
            CHECK(same_bits(rig.extend(s, next), rig.scratch(tokens)));
        }
        CHECK(s.table.blocks.size() == 3);
        CHECK(rig.all_cached(s));
        rig.cache->release(s);
    }
    rig.cache->release(base);
    rig.check_only_cache_references();
}

TEST_CASE("prefix_cache: eviction under pressure takes LRU leaves first and stays exact") {
    Rig rig(12, 4);
    std::vector<int32_t> ta = random_tokens(16, 10), tb = random_tokens(16, 11), tc = random_tokens(16, 12),
                         td = random_tokens(16, 13);
    auto run_and_end = [&](const std::vector<int32_t>& tokens) {
        Sequence seq;
        rig.extend(seq, tokens);
        std::vector<int32_t> kept = seq.tokens;
        rig.cache->release(seq);
        seq.tokens = kept;  // for full_block_hashes
        return seq;
    };
    Sequence a = run_and_end(ta), b = run_and_end(tb), c = run_and_end(tc);
    CHECK(rig.pool.n_free() == 0);
    CHECK(rig.cache->stats().n_evictable == 12);

    // D needs 4 blocks: all of A goes (oldest), B and C stay.
    Sequence d;
    CHECK(same_bits(rig.extend(d, td), rig.scratch(td)));
    CHECK(rig.cache->stats().n_evictions == 4);
    CHECK(rig.none_cached(a));
    CHECK(rig.all_cached(b));
    CHECK(rig.all_cached(c));
    rig.cache->release(d);

    // E reuses B's first block (touching it) and needs one block: B's leaf goes.
    std::vector<int32_t> te(tb.begin(), tb.begin() + 5);
    Sequence e;
    int32_t n_reused = -1;
    CHECK(same_bits(rig.extend(e, te, &n_reused), rig.scratch(te)));
    CHECK(n_reused == 4);
    rig.cache->release(e);
    std::vector<BlockHash> hb = rig.cache->full_block_hashes(b), hc = rig.cache->full_block_hashes(c);
    CHECK(rig.cache->lookup(hb[3]) < 0);
    CHECK(rig.cache->lookup(hb[0]) >= 0);

    // F needs 4 blocks: the one E's partial block freed, B's blocks 2 and 1 (leaves older than anything
    // else), then C's leaf - not B's root, which E used more recently.
    std::vector<int32_t> tf = random_tokens(16, 14);
    Sequence f;
    CHECK(same_bits(rig.extend(f, tf), rig.scratch(tf)));
    CHECK(rig.cache->lookup(hb[0]) >= 0);
    CHECK(rig.cache->lookup(hb[1]) < 0);
    CHECK(rig.cache->lookup(hb[2]) < 0);
    CHECK(rig.cache->lookup(hc[3]) < 0);
    CHECK(rig.cache->lookup(hc[2]) >= 0);
    rig.cache->release(f);

    // Evicted prefixes are simply recomputed.
    Sequence again;
    CHECK(same_bits(rig.extend(again, ta, &n_reused), rig.scratch(ta)));
    CHECK(n_reused == 0);
    rig.cache->release(again);
    rig.check_only_cache_references();
}

TEST_CASE("prefix_cache: a pool full of referenced blocks is a clear error that changes nothing") {
    Rig rig(6, 4);
    Sequence a, b;
    rig.extend(a, random_tokens(12, 20));  // 3 full blocks each, all referenced
    rig.extend(b, random_tokens(10, 21));
    Sequence b_fork = rig.cache->fork(b);  // shares b's partial block: writing needs a copy
    CHECK(rig.pool.n_free() == 0);

    auto snapshot = [&] {
        std::vector<int32_t> state;
        for (const Sequence* s : {&a, &b, &b_fork}) {
            state.insert(state.end(), s->table.blocks.begin(), s->table.blocks.end());
            state.insert(state.end(), s->tokens.begin(), s->tokens.end());
            state.push_back(s->table.n_tokens);
        }
        for (int32_t blk = 0; blk < rig.pool.n_blocks(); blk++) state.push_back(rig.pool.refcount(blk));
        state.push_back(rig.cache->stats().n_indexed);
        return state;
    };
    std::vector<int32_t> before = snapshot();
    for (Sequence* s : {&a, &b_fork}) {
        try {
            rig.cache->reserve(*s, s->table.n_tokens + 1);
            FAIL("reserve should have thrown");
        } catch (const Error& e) {
            CHECK_MESSAGE(std::string(e.what()).find("KV cache is full") != std::string::npos, e.what());
        }
        CHECK(snapshot() == before);
    }
    // A fresh sequence whose prefix is cached cannot start either, and leaves nothing behind.
    Sequence c;
    CHECK_THROWS_AS(rig.extend(c, concat(a.tokens, {1, 2, 3, 4, 5})), Error);
    rig.cache->truncate(c, 0);  // what prefill() does on failure
    CHECK(snapshot() == before);

    // Once b and its fork end, their cached blocks make room and a continues exactly.
    std::vector<int32_t> a_tokens = a.tokens;
    rig.cache->release(b);
    rig.cache->release(b_fork);
    a_tokens.push_back(7);
    CHECK(same_bits(rig.extend(a, {7}), rig.scratch(a_tokens)));
    rig.cache->release(a);
    rig.check_only_cache_references();
}

TEST_CASE("prefix_cache: refcounts return to the cache's own references, and to zero without the cache") {
    Rig rig(40, 4);
    std::vector<int32_t> base = random_tokens(21, 30);
    std::vector<Sequence> seqs(4);
    rig.extend(seqs[0], base);
    seqs[1] = rig.cache->fork(seqs[0]);
    rig.extend(seqs[1], random_tokens(9, 31));
    rig.extend(seqs[2], concat(base, random_tokens(3, 32)));  // reuses base's full blocks
    rig.extend(seqs[3], random_tokens(13, 33));
    rig.cache->truncate(seqs[3], 5);
    for (Sequence& s : seqs) rig.cache->release(s);
    rig.check_only_cache_references();
    CHECK(rig.cache->stats().n_indexed > 0);
    rig.cache.reset();
    CHECK(rig.pool.n_free() == rig.pool.n_blocks());
}

TEST_CASE("prefix_cache: truncate then continue equals computing from scratch") {
    Rig rig(32, 4);
    std::vector<int32_t> tokens = random_tokens(23, 40);
    Sequence a;
    rig.extend(a, tokens);
    rig.cache->truncate(a, 10);  // into block 2, which is full and cached
    CHECK(a.tokens == std::vector<int32_t>(tokens.begin(), tokens.begin() + 10));
    CHECK(a.table.blocks.size() == 3);
    std::vector<int32_t> tail = random_tokens(5, 41);
    CHECK(same_bits(rig.extend(a, tail), rig.scratch(concat({tokens.begin(), tokens.begin() + 10}, tail))));

    // The cached blocks past the truncation point were not overwritten.
    Sequence b;
    int32_t n_reused = -1;
    CHECK(same_bits(rig.extend(b, tokens, &n_reused), rig.scratch(tokens)));
    CHECK(n_reused == 20);
    rig.cache->truncate(b, 0);
    CHECK(b.table.blocks.empty());
    for (Sequence* s : {&a, &b}) rig.cache->release(*s);
    rig.check_only_cache_references();
}

TEST_CASE("prefix_cache: claimed blocks take restored bytes, reuse an already cached block, or go back") {
    Rig rig(16, 4);
    std::vector<int32_t> tokens = random_tokens(9, 50);
    Sequence a;
    rig.extend(a, tokens);
    std::vector<BlockHash> hashes = rig.cache->full_block_hashes(a);
    std::vector<uint8_t> bytes(rig.backend->kv_block_bytes());
    rig.backend->read_kv_block(a.table.blocks[0], bytes.data());
    bool cached = false;
    CHECK(rig.cache->claim_block(hashes[0], true, &cached) == a.table.blocks[0]);
    CHECK(cached);
    rig.cache->release_claimed(a.table.blocks[0]);  // the reference claim_block handed out
    rig.cache->release(a);
    rig.cache.reset();  // a new cache over the same pool and backend: nothing indexed
    rig.cache = std::make_unique<PrefixCache>(rig.pool, *rig.backend, kv_namespace_hash("random-model", DType::f32, 4));
    CHECK(rig.pool.n_free() == rig.pool.n_blocks());
    std::vector<uint8_t> zeros(bytes.size(), 0);
    for (int32_t blk = 0; blk < rig.pool.n_blocks(); blk++) rig.backend->write_kv_block(blk, zeros.data());

    // A claim whose bytes could not be read goes back to the pool, unindexed.
    int32_t dropped = rig.cache->claim_block(hashes[0], true, &cached);
    REQUIRE(dropped >= 0);
    CHECK(!cached);
    rig.cache->release_claimed(dropped);
    CHECK(rig.pool.n_free() == rig.pool.n_blocks());
    CHECK(rig.cache->lookup(hashes[0]) == -1);

    // Restore block 0 from bytes into a sequence (written where the pool is host memory), then compute the
    // rest on top.
    Sequence b;
    int32_t block = rig.cache->claim_block(hashes[0], true, &cached);
    REQUIRE(block >= 0);
    CHECK(!cached);
    void* host = rig.backend->host_kv_block(block);
    REQUIRE(host != nullptr);  // the CPU backend's pool
    std::memcpy(host, bytes.data(), bytes.size());
    rig.cache->index_claimed(block, hashes[0], rig.cache->kv_namespace());
    b.table.blocks.push_back(block);
    b.table.n_tokens = 4;
    b.tokens.assign(tokens.begin(), tokens.begin() + 4);
    CHECK(rig.cache->lookup(hashes[0]) == block);
    CHECK(same_bits(rig.extend(b, {tokens.begin() + 4, tokens.end()}), rig.scratch(tokens)));
    rig.cache->release(b);
    rig.check_only_cache_references();
}

TEST_CASE("generate: continuing a sequence and reusing the cache match a fresh engine") {
    TempDir dir;
    std::string path = dir.file("random.kvlm");
    auto model = make_random_model(small_random_config(), DType::f32, 12);
    write_random_model(*model, DType::f32, path);
    EngineOptions options;
    options.device = "cpu";
    options.n_threads = 1;
    options.n_ctx = 128;
    options.block_size = 4;
    options.quiet = true;
    SamplingParams greedy;
    greedy.temperature = 0;
    auto ignore = [](const std::string&) {};
    std::vector<int32_t> prompt = random_tokens(11, 60), more = random_tokens(6, 61);

    Engine engine(path, options);
    Sampler sampler(greedy);
    Sequence seq;
    GenerationResult first = generate(engine, seq, prompt, 8, sampler, ignore);
    CHECK(first.n_prefilled == 11);
    REQUIRE(first.has_pending_token);
    CHECK(first.transcript.size() == seq.tokens.size() + 1);
    CHECK(first.transcript == concat(seq.tokens, {first.generated.back()}));
    // Next turn: the pending token plus new text on top of the sequence.
    std::vector<int32_t> turn = concat({first.generated.back()}, more);
    GenerationResult second = generate(engine, seq, turn, 8, sampler, ignore);
    CHECK(second.n_prefilled == int32_t(turn.size()));
    CHECK(second.n_reused == 0);
    std::vector<int32_t> history = concat(first.transcript, more);

    // The same history as one prompt: from the pool in this engine, from scratch in a fresh one.
    Sequence again;
    Sampler sampler2(greedy);
    GenerationResult reused = generate(engine, again, history, 8, sampler2, ignore);
    CHECK(reused.n_reused == std::min(int32_t(history.size()) / 4 * 4, int32_t(history.size()) - 1));
    Engine fresh_engine(path, options);
    Sequence fresh;
    Sampler sampler3(greedy);
    GenerationResult scratch = generate(fresh_engine, fresh, history, 8, sampler3, ignore);
    CHECK(scratch.n_reused == 0);
    CHECK(scratch.logits_hash == second.logits_hash);
    CHECK(reused.logits_hash == second.logits_hash);
    CHECK(scratch.generated == second.generated);
    for (Sequence* s : {&seq, &again}) engine.prefix_cache().release(*s);
    fresh_engine.prefix_cache().release(fresh);

    // A prompt past the context is an error that leaves the sequence as it was.
    Sequence partial;
    generate(engine, partial, prompt, 0, sampler, ignore);
    std::vector<int32_t> before = partial.tokens;
    CHECK_THROWS_WITH_AS(generate(engine, partial, random_tokens(200, 62), 1, sampler, ignore),
                         doctest::Contains("more than the context of 128 tokens"), Error);
    CHECK(partial.tokens == before);
    engine.prefix_cache().release(partial);
}
