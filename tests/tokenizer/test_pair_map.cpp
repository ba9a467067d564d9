// PairMap, the BPE encoder's (left id, right id) -> merge table: the first merge of a pair stays (merges are
// inserted in rank order, so the lowest rank wins, as with std::unordered_map::emplace before it), absent
// pairs are absent across growth, and the extreme ids (0 and INT32_MAX) are keys like any other.
#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <random>

#include "tokenizer/pair_map.h"

using namespace kvlm;

TEST_CASE("tokenizer: PairMap keeps the first merge of a pair and finds every pair across growth") {
    PairMap map;
    CHECK(map.find(PairMap::key(1, 2)) == nullptr);  // empty: no slots yet
    std::map<uint64_t, BpeMerge> want;
    std::mt19937 rng(7);
    std::uniform_int_distribution<int32_t> id(0, 3000);
    for (int32_t rank = 0; rank < 20000; rank++) {  // starts at 16 slots: grows many times
        const int32_t left = rank % 97 == 0 ? INT32_MAX : id(rng), right = rank % 89 == 0 ? 0 : id(rng);
        const uint64_t key = PairMap::key(left, right);
        map.insert(key, BpeMerge{rank, rank / 2});
        want.emplace(key, BpeMerge{rank, rank / 2});  // emplace keeps the first one too
    }
    CHECK(map.size() == want.size());
    for (const auto& [key, merge] : want) {
        const BpeMerge* got = map.find(key);
        REQUIRE(got != nullptr);
        CHECK(got->rank == merge.rank);
        CHECK(got->result == merge.result);
    }
    int absent = 0;
    for (int32_t left = 3001; left < 3100; left++) absent += map.find(PairMap::key(left, left)) == nullptr;
    CHECK(absent == 99);
    PairMap zero;  // key 0 (ids 0 and 0) is a valid key, distinct from the empty marker
    CHECK(PairMap::key(0, 0) == 0);
    zero.insert(0, BpeMerge{3, 9});
    zero.insert(0, BpeMerge{4, 10});
    REQUIRE(zero.find(0) != nullptr);
    CHECK(zero.find(0)->rank == 3);
    CHECK(zero.find(0)->result == 9);
    CHECK(zero.find(1) == nullptr);
    CHECK(zero.size() == 1);
}
