// A row's best next tokens by log-probability plus a base score: what a beam-search step needs of each beam
// (generate/beam_candidates.h), computed where the logits are (Backend::SequenceInput::best).
#pragma once
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace kvlm {

struct TokenScore {
    float score;    // base + log_softmax(logits)[token], in float
    int32_t token;  // -1: no such token (a row with fewer usable logits than asked for)
};

// out = the k best of the candidates id(0), id(1), .. id(n - 1) (ascending ids) by (key(id) desc, id asc), best
// first, as (key, id): exactly the first k of all n sorted so. One pass keeps the k best so far (the worst on
// top of a heap) and skips a candidate whose values[id] is not above the worst kept one's: key must never
// decrease as values[id] grows, so it scores no better, and on a tie its larger id loses. 16 candidates are
// tested at a time (one vector compare where id is the index itself).
template <typename Id, typename Key>
void best_k(const float* values, int32_t n, Id id, Key key, size_t k, std::vector<std::pair<float, int32_t>>& out) {
    const auto better = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    out.clear();
    int32_t j = 0;
    for (; j < n && out.size() < k; j++) {
        out.emplace_back(key(id(j)), id(j));
        std::push_heap(out.begin(), out.end(), better);
    }
    if (out.empty()) return;
    float worst = values[out.front().second];
    const auto consider = [&](int32_t j) {
        const int32_t i = id(j);
        if (!(values[i] > worst)) return;
        const std::pair<float, int32_t> c{key(i), i};
        if (!better(c, out.front())) return;
        std::pop_heap(out.begin(), out.end(), better);
        out.back() = c;
        std::push_heap(out.begin(), out.end(), better);
        worst = values[out.front().second];
    };
    for (; j + 16 <= n; j += 16) {
        bool any = false;
        for (int q = 0; q < 16; q++) any |= values[id(j + q)] > worst;
        if (any)
            for (int q = 0; q < 16; q++) consider(j + q);
    }
    for (; j < n; j++) consider(j);
    std::sort_heap(out.begin(), out.end(), better);
}

// The min(n, n_vocab) best tokens of logits[0..n_vocab) by score = (logits[t] - max - log(sum(exp(logits -
// max)))) + base, into out[], best first; equal scores in token order (best_k: only the logits that can still
// enter the n best are scored).
void best_tokens_cpu(const float* logits, int32_t n_vocab, float base, int32_t n, TokenScore* out);

// The first index of the largest of x[0..n) (0 when none is larger than -inf), and in *all_finite (when
// given) whether every value is finite. Two vectorizable passes: 0.035 ms over 49,152 logits here, where a
// loop that compares each value with x[best] took 0.17 ms.
int32_t argmax_cpu(const float* x, int32_t n, bool* all_finite = nullptr);

// log_softmax in float as torch computes it: x - max - log(sum(exp(x - max))), with best_tokens_cpu's max
// and sum.
void log_softmax(const float* logits, int32_t n, float* out);

}  // namespace kvlm
