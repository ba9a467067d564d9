// KvPool / BlockTable tests: allocation, refcounts, the free-list invariant, all-or-nothing growth.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "kv/kv_pool.h"
#include "util/error.h"

using namespace kvlm;

// Free list and refcounts agree: exactly the refcount-0 blocks are free.
static void check_invariant(const KvPool& pool) {
    int32_t n_zero = 0;
    for (int32_t b = 0; b < pool.n_blocks(); b++) {
        CHECK(pool.refcount(b) >= 0);
        if (pool.refcount(b) == 0) n_zero++;
    }
    CHECK(n_zero == pool.n_free());
    CHECK(pool.n_used() + pool.n_free() == pool.n_blocks());
}

TEST_CASE("kv_pool: allocate hands out every block once, then -1") {
    KvPool pool(5, 16);
    CHECK(pool.block_size() == 16);
    CHECK(pool.n_free() == 5);
    std::set<int32_t> seen;
    for (int i = 0; i < 5; i++) {
        int32_t b = pool.allocate();
        REQUIRE(b >= 0);
        REQUIRE(b < 5);
        CHECK(seen.insert(b).second);
        CHECK(pool.refcount(b) == 1);
        check_invariant(pool);
    }
    CHECK(pool.allocate() == -1);
    CHECK(pool.n_free() == 0);
    CHECK(pool.n_used() == 5);
}

TEST_CASE("kv_pool: retain/release refcounts; a block is free only at refcount 0") {
    KvPool pool(3, 4);
    int32_t a = pool.allocate(), b = pool.allocate();
    pool.retain(a);
    CHECK(pool.refcount(a) == 2);
    pool.release(a);
    CHECK(pool.refcount(a) == 1);
    CHECK(pool.n_free() == 1);
    check_invariant(pool);
    pool.release(a);
    CHECK(pool.refcount(a) == 0);
    CHECK(pool.n_free() == 2);
    check_invariant(pool);
    // The freed block is reused (LIFO).
    CHECK(pool.allocate() == a);
    pool.release(b);
    check_invariant(pool);
}

TEST_CASE("kv_pool: constructor rejects bad sizes") {
    CHECK_THROWS_AS(KvPool(4, 0), Error);
    CHECK_THROWS_AS(KvPool(-1, 16), Error);
    KvPool empty(0, 16);
    CHECK(empty.allocate() == -1);
}

TEST_CASE("kv_pool: reserve_tokens grows the table block by block") {
    KvPool pool(10, 4);
    BlockTable table;
    reserve_tokens(pool, table, 0);
    CHECK(table.blocks.empty());
    reserve_tokens(pool, table, 1);
    CHECK(table.blocks.size() == 1);
    reserve_tokens(pool, table, 4);
    CHECK(table.blocks.size() == 1);
    CHECK(table.capacity(4) == 4);
    reserve_tokens(pool, table, 5);
    CHECK(table.blocks.size() == 2);
    reserve_tokens(pool, table, 17);
    CHECK(table.blocks.size() == 5);
    reserve_tokens(pool, table, 3);  // never shrinks
    CHECK(table.blocks.size() == 5);
    std::set<int32_t> distinct(table.blocks.begin(), table.blocks.end());
    CHECK(distinct.size() == 5);
    for (int32_t b : table.blocks) CHECK(pool.refcount(b) == 1);
    CHECK(pool.n_free() == 5);
    check_invariant(pool);
}

TEST_CASE("kv_pool: a full cache throws a clear error and changes nothing") {
    KvPool pool(3, 16);
    BlockTable table;
    reserve_tokens(pool, table, 20);  // 2 blocks
    std::vector<int32_t> before = table.blocks;
    int32_t free_before = pool.n_free();
    try {
        reserve_tokens(pool, table, 100);  // needs 7 blocks, 5 more, only 1 free
        FAIL("expected an error");
    } catch (const Error& e) {
        std::string message = e.what();
        CHECK(message.find("KV cache is full") != std::string::npos);
        CHECK(message.find("5 more blocks") != std::string::npos);
        CHECK(message.find("1 of 3 are free") != std::string::npos);
    }
    CHECK(table.blocks == before);
    CHECK(pool.n_free() == free_before);
    check_invariant(pool);
    // What fits still works afterwards.
    reserve_tokens(pool, table, 48);
    CHECK(table.blocks.size() == 3);
    CHECK(pool.n_free() == 0);
}

TEST_CASE("kv_pool: release_table frees unshared blocks and keeps shared ones") {
    KvPool pool(6, 2);
    BlockTable a, b;
    reserve_tokens(pool, a, 6);  // 3 blocks
    a.n_tokens = 6;
    // b shares a's first two blocks (a prefix), then grows on its own.
    b.blocks = std::vector<int32_t>{a.blocks[0], a.blocks[1]};
    pool.retain(a.blocks[0]);
    pool.retain(a.blocks[1]);
    reserve_tokens(pool, b, 6);
    CHECK(b.blocks.size() == 3);
    CHECK(pool.n_free() == 2);
    int32_t shared = a.blocks[0];
    release_table(pool, a);
    CHECK(a.blocks.empty());
    CHECK(a.n_tokens == 0);
    CHECK(pool.refcount(shared) == 1);
    CHECK(pool.n_free() == 3);
    check_invariant(pool);
    release_table(pool, b);
    CHECK(pool.n_free() == 6);
    check_invariant(pool);
}
