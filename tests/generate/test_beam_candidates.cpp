// A beam-search step's selection (each beam's best_tokens_cpu, then merge_beam_candidates) against the plain
// rule it replaces: score every (beam, token) pair as log_softmax(row)[token] + the beam's score, sort all of
// them best first (equal scores in (beam, token) order), keep the first n. Random rows, rows of close logits,
// many equal logits, and rows whose different logits round to one score (a beam at -1e9, as every beam but
// the first starts), where the rule's tie order picks the lowest token however low its logit.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "generate/beam_candidates.h"
#include "support/random_model.h"

using namespace kvlm;
using namespace kvlm::test;

namespace {

std::vector<BeamCandidate> by_sorting_all(const std::vector<std::vector<float>>& rows,
                                          const std::vector<float>& beam_scores, int32_t n_vocab, int32_t n) {
    std::vector<float> scores(rows.size() * size_t(n_vocab));
    for (size_t b = 0; b < rows.size(); b++) {
        float* row = &scores[b * size_t(n_vocab)];
        log_softmax(rows[b].data(), n_vocab, row);
        for (int32_t t = 0; t < n_vocab; t++) row[t] += beam_scores[b];
    }
    std::vector<int32_t> order(scores.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return scores[size_t(a)] > scores[size_t(b)]; });
    std::vector<BeamCandidate> out;
    for (size_t i = 0; i < order.size() && int32_t(out.size()) < n; i++)
        out.push_back({scores[size_t(order[i])], order[i] / n_vocab, order[i] % n_vocab});
    return out;
}

// As beam_search takes them: each beam's own best (best_tokens_cpu), merged.
std::vector<BeamCandidate> by_merging_each_beams_best(const std::vector<std::vector<float>>& rows,
                                                      const std::vector<float>& beam_scores, int32_t n_vocab,
                                                      int32_t n) {
    std::vector<std::vector<TokenScore>> best(rows.size(), std::vector<TokenScore>(size_t(n), {0, -1}));
    for (size_t b = 0; b < rows.size(); b++)
        best_tokens_cpu(rows[b].data(), n_vocab, beam_scores[b], n, best[b].data());
    return merge_beam_candidates(best, n);
}

void check_selection(const std::vector<std::vector<float>>& rows, const std::vector<float>& beam_scores,
                     int32_t n_vocab, int32_t n, const char* what) {
    const std::vector<BeamCandidate> got = by_merging_each_beams_best(rows, beam_scores, n_vocab, n);
    const std::vector<BeamCandidate> want = by_sorting_all(rows, beam_scores, n_vocab, n);
    INFO(what << ": " << rows.size() << " beams, n_vocab " << n_vocab << ", n " << n);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); i++) {
        CAPTURE(i);
        CHECK(got[i].beam == want[i].beam);
        CHECK(got[i].token == want[i].token);
        CHECK(got[i].score == want[i].score);
    }
}

}  // namespace

TEST_CASE("beam candidates: the n best (beam, token) pairs are those of scoring and sorting all of them") {
    uint64_t seed = 70;
    for (int32_t n_vocab : {1, 7, 1000, 49152}) {
        for (int32_t n_beams : {1, 2, 4, 8}) {
            const int32_t n = 2 * n_beams;
            std::vector<std::vector<float>> random_rows, close, few_values, increasing;
            std::vector<float> scores, first_only;
            for (int32_t b = 0; b < n_beams; b++) {
                random_rows.push_back(random_floats(size_t(n_vocab), -8, 8, seed++));
                close.push_back(random_floats(size_t(n_vocab), 0, 1e-3f, seed++));  // neighbours a few ulp apart
                std::vector<float> coarse = random_floats(size_t(n_vocab), 0, 4, seed++);
                for (float& x : coarse) x = std::floor(x);  // 4 distinct logits: ties everywhere
                few_values.push_back(coarse);
                std::vector<float> rising(static_cast<size_t>(n_vocab));
                for (int32_t t = 0; t < n_vocab; t++) rising[size_t(t)] = 1e-3f * float((t * 7 + b) % 97);
                increasing.push_back(rising);
                scores.push_back(-float(b) * 0.37f - 1.0f);
                first_only.push_back(b == 0 ? 0.0f : -1e9f);  // the first step's beams
            }
            check_selection(random_rows, scores, n_vocab, n, "random logits");
            check_selection(close, scores, n_vocab, n, "logits within 1e-3");
            check_selection(few_values, scores, n_vocab, n, "4 distinct logits");
            check_selection(few_values, first_only, n_vocab, n, "4 distinct logits, beams at -1e9");
            check_selection(increasing, first_only, n_vocab, n, "distinct logits, one score a beam at -1e9");
        }
    }
}
