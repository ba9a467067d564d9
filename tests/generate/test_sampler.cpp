// Sampler: greedy, seeded reproducibility, top-k/top-p/min-p truncation and the repetition penalty.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "generate/sampler.h"
#include "support/random_model.h"
#include "util/error.h"

using namespace kvlm;

namespace {

std::vector<float> random_logits(int32_t n, uint64_t seed) { return kvlm::test::random_floats(size_t(n), -5, 5, seed); }

SamplingParams plain(float temperature, uint64_t seed = 0) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.seed = seed;
    return p;
}

// Draws `n` tokens with fresh copies of the logits each time.
std::vector<int32_t> draw(Sampler& sampler, const std::vector<float>& logits, int n) {
    std::vector<int32_t> out;
    for (int i = 0; i < n; i++) {
        std::vector<float> copy = logits;
        out.push_back(sampler.sample(copy.data(), int32_t(copy.size()), {}));
    }
    return out;
}

}  // namespace

TEST_CASE("sampler: greedy returns the argmax, lowest id on ties") {
    for (uint64_t seed = 1; seed <= 5; seed++) {
        std::vector<float> logits = random_logits(1000, seed);
        int32_t want = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
        Sampler greedy(plain(0.0f));
        CHECK(greedy.sample(logits.data(), 1000, {}) == want);
    }
    std::vector<float> ties = {1, 3, 2, 3, 3};
    Sampler greedy(plain(-1.0f));
    CHECK(greedy.sample(ties.data(), 5, {}) == 1);
}

TEST_CASE("sampler: same seed gives the same tokens, different seeds differ") {
    std::vector<float> logits = random_logits(500, 7);
    for (auto& l : logits) l *= 0.2f;  // flat enough that draws vary
    Sampler a(plain(1.0f, 123)), b(plain(1.0f, 123)), c(plain(1.0f, 124));
    std::vector<int32_t> ta = draw(a, logits, 50), tb = draw(b, logits, 50), tc = draw(c, logits, 50);
    CHECK(ta == tb);
    CHECK(ta != tc);
    CHECK(std::set<int32_t>(ta.begin(), ta.end()).size() > 10);  // really sampling
}

TEST_CASE("sampler: top_k = 1 is greedy, and top_k limits draws to the k best") {
    std::vector<float> logits = random_logits(300, 9);
    for (auto& l : logits) l *= 0.1f;
    int32_t best = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    SamplingParams p = plain(1.5f, 5);
    p.top_k = 1;
    Sampler one(p);
    for (int32_t t : draw(one, logits, 30)) CHECK(t == best);

    p.top_k = 5;
    Sampler five(p);
    std::vector<float> sorted = logits;
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    std::set<int32_t> seen;
    for (int32_t t : draw(five, logits, 200)) {
        CHECK(logits[size_t(t)] >= sorted[4]);
        seen.insert(t);
    }
    CHECK(seen.size() == 5);
}

TEST_CASE("sampler: draw frequencies follow softmax(logits / temperature)") {
    std::vector<float> logits = {0.0f, std::log(2.0f), std::log(5.0f)};  // probabilities 1/8, 2/8, 5/8
    Sampler s(plain(1.0f, 99));
    std::map<int32_t, int> counts;
    const int n = 8000;
    for (int32_t t : draw(s, logits, n)) counts[t]++;
    CHECK(counts[0] / double(n) == doctest::Approx(1.0 / 8).epsilon(0.15));
    CHECK(counts[1] / double(n) == doctest::Approx(2.0 / 8).epsilon(0.1));
    CHECK(counts[2] / double(n) == doctest::Approx(5.0 / 8).epsilon(0.05));
}

TEST_CASE("sampler: min_p and top_p exclude tail tokens") {
    // Probabilities 0.5, 0.25, 0.125, 0.0625, ... (halving).
    std::vector<float> logits;
    for (int i = 0; i < 10; i++) logits.push_back(-float(i) * std::log(2.0f));
    SamplingParams p = plain(1.0f, 3);
    p.min_p = 0.2f;  // keeps p >= 0.1: tokens 0, 1, 2
    Sampler min_p(p);
    std::set<int32_t> seen;
    for (int32_t t : draw(min_p, logits, 400)) seen.insert(t);
    CHECK(seen == std::set<int32_t>{0, 1, 2});

    p = plain(1.0f, 4);
    p.top_p = 0.7f;  // 0.5 + 0.25 >= 0.7: tokens 0, 1
    Sampler top_p(p);
    seen.clear();
    for (int32_t t : draw(top_p, logits, 400)) seen.insert(t);
    CHECK(seen == std::set<int32_t>{0, 1});

    // Without truncation the tail does appear.
    Sampler all(plain(1.0f, 5));
    seen.clear();
    for (int32_t t : draw(all, logits, 2000)) seen.insert(t);
    CHECK(seen.size() >= 6);
}

TEST_CASE("sampler: repetition penalty lowers recently seen tokens, once each") {
    std::vector<float> logits = {2.0f, 1.9f, -1.0f, 0.5f};
    SamplingParams p = plain(0.0f);
    p.repeat_penalty = 1.5f;
    p.repeat_last_n = 3;
    Sampler s(p);
    std::vector<float> l = logits;
    // Token 0 seen (twice: penalized once), token 2 seen; token 3 is outside the last 3.
    CHECK(s.sample(l.data(), 4, {3, 0, 2, 0}) == 1);
    CHECK(l[0] == doctest::Approx(2.0f / 1.5f));
    CHECK(l[2] == doctest::Approx(-1.5f));
    CHECK(l[1] == 1.9f);
    CHECK(l[3] == 0.5f);
    // Penalty 1 changes nothing.
    Sampler off(plain(0.0f));
    l = logits;
    CHECK(off.sample(l.data(), 4, {0, 0, 0}) == 0);
    CHECK(l == logits);
}

TEST_CASE("sampler: an extreme repeat penalty keeps logits finite; a logit that was not finite is still an error") {
    for (float penalty : {1e38f, 1e-38f}) {
        CAPTURE(penalty);
        std::vector<float> logits = {-30.0f, 2.0f, 5.0f, -1.0f};
        SamplingParams p = plain(0.0f);
        p.repeat_penalty = penalty;
        Sampler sampler(p);
        // Tokens 0 and 2 were seen: with 1e38, token 2 drops to ~0 and token 1 wins; with 1e-38, token 2 wins.
        const int32_t got = sampler.sample(logits.data(), 4, {0, 2});
        CHECK(got == (penalty > 1 ? 1 : 2));
        for (float l : logits) CHECK(std::isfinite(l));
    }
    std::vector<float> damaged = {1.0f, std::numeric_limits<float>::infinity(), 0.5f};
    SamplingParams p = plain(0.0f);
    p.repeat_penalty = 1.1f;
    Sampler sampler(p);
    CHECK_THROWS_WITH_AS(sampler.sample(damaged.data(), 3, {1}), doctest::Contains("an infinite logit"), Error);
}

TEST_CASE("sampler: sample_allowed picks only allowed tokens, in proportion to their renormalized probabilities") {
    // Four allowed tokens of eight, logits log(1), log(2), log(3), log(4): frequencies 0.1, 0.2, 0.3, 0.4.
    std::vector<float> logits = {5, std::log(1.0f), 9, std::log(2.0f), std::log(3.0f), 7, std::log(4.0f), 8};
    const std::vector<int32_t> allowed = {1, 3, 4, 6};
    Sampler greedy(plain(0.0f));
    std::vector<float> copy = logits;
    CHECK(greedy.sample_allowed(copy.data(), 8, {}, allowed) == 6);
    SamplingParams p = plain(1.0f, 11);
    p.top_k = 0, p.top_p = 1.0f, p.min_p = 0.0f;
    Sampler sampler(p);
    std::map<int32_t, int> counts;
    const int n = 20000;
    for (int i = 0; i < n; i++) {
        copy = logits;
        counts[sampler.sample_allowed(copy.data(), 8, {}, allowed)]++;
    }
    CHECK(counts.size() == 4);
    for (auto [token, want] : std::vector<std::pair<int32_t, double>>{{1, 0.1}, {3, 0.2}, {4, 0.3}, {6, 0.4}})
        CHECK(std::abs(counts[token] / double(n) - want) < 0.015);  // ~4.5 standard deviations
    // top-k counts among the allowed tokens only: k = 1 is the best allowed one.
    p.top_k = 1;
    Sampler top1(p);
    copy = logits;
    CHECK(top1.sample_allowed(copy.data(), 8, {}, allowed) == 6);
    // A NaN outside the allowed set is still refused: the model is damaged whatever the mask hides.
    copy = logits;
    copy[0] = std::nanf("");
    CHECK_THROWS_AS(greedy.sample_allowed(copy.data(), 8, {}, allowed), kvlm::Error);
}

TEST_CASE("sampler: -v's token probability is the model's softmax at temperature 1 (after the penalty), whatever the settings") {
    const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
    double total = 0;
    for (float l : logits) total += std::exp(double(l) - 3.0);
    CHECK(token_probability(logits.data(), 5, 1) == doctest::Approx(1.0 / total).epsilon(1e-6));
    CHECK(token_probability(logits.data(), 5, 2) == doctest::Approx(std::exp(-5.0) / total).epsilon(1e-6));
    for (float temperature : {0.0f, 0.7f, 1.5f}) {
        SamplingParams p = plain(temperature, 4);
        p.repeat_penalty = 2.0f;  // token 3 seen: its logit 3 -> 1.5, so greedy picks token 1
        std::vector<float> penalized = logits;
        penalized[3] = 1.5f;
        Sampler quiet(p), reporting(p);
        reporting.report_probabilities(true);
        CHECK(reporting.device_request({3}, 5).want_probability);
        CHECK_FALSE(quiet.device_request({3}, 5).want_probability);
        for (int i = 0; i < 20; i++) {
            std::vector<float> a = logits, b = logits;
            const int32_t token = quiet.sample(a.data(), 5, {3});
            CHECK(reporting.sample(b.data(), 5, {3}) == token);  // reporting changes nothing drawn
            CHECK(quiet.last_probability() == -1.0f);             // not asked for
            CHECK(reporting.last_probability() == doctest::Approx(token_probability(penalized.data(), 5, token)).epsilon(1e-6));
            if (temperature == 0) CHECK(token == 1);
        }
    }
}

namespace {

// The sampling rule written out plainly (penalty off): every candidate sorted by (logit desc, id asc), the
// first top_k kept, softmax with temperature over them (over all when top-k is off), then top-p, min-p and
// the draw u01 over the kept mass.
int32_t plain_rule(const std::vector<float>& logits, const std::vector<int32_t>& candidates, const SamplingParams& p,
                   double u01) {
    std::vector<std::pair<float, int32_t>> c;
    for (int32_t i : candidates) c.emplace_back(logits[size_t(i)], i);
    std::sort(c.begin(), c.end(), [](const auto& a, const auto& b) {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    if (p.temperature <= 0 || c.size() == 1) return c[0].second;
    const size_t k = p.top_k > 0 ? std::min(size_t(p.top_k), c.size()) : c.size();
    const float max = c[0].first, inv_temp = 1.0f / p.temperature;
    auto weight = [&](float l) { return std::exp(double((l - max) * inv_temp)); };
    double total = 0;
    if (k < c.size())
        for (size_t i = 0; i < k; i++) total += weight(c[i].first);
    else
        for (int32_t i : candidates) total += weight(logits[size_t(i)]);
    std::vector<float> prob(k);
    for (size_t i = 0; i < k; i++) prob[i] = float(weight(c[i].first) / total);
    size_t keep = k;
    if (p.top_p < 1.0f) {
        double cumulative = 0;
        for (size_t i = 0; i < keep; i++)
            if ((cumulative += prob[i]) >= p.top_p) {
                keep = i + 1;
                break;
            }
    }
    if (p.min_p > 0.0f) {
        size_t i = 1;
        while (i < keep && prob[i] >= p.min_p * prob[0]) i++;
        keep = i;
    }
    double kept = 0;
    for (size_t i = 0; i < keep; i++) kept += prob[i];
    double cumulative = 0;
    for (size_t i = 0; i < keep; i++)
        if (u01 * kept < (cumulative += prob[i])) return c[i].second;
    return c[keep - 1].second;
}

}  // namespace

TEST_CASE(
    "sampler: the token is the plain rule's (sort every candidate, keep top-k, ...), with and without an allowed set") {
    uint64_t seed = 4000;
    for (int32_t n : {5, 40, 1000, 49152}) {
        for (bool ties : {false, true}) {
            std::vector<float> logits = random_logits(n, seed++);
            if (ties)
                for (float& x : logits) x = std::floor(x);  // 10 distinct values
            std::vector<int32_t> all(static_cast<size_t>(n)), allowed;
            for (int32_t i = 0; i < n; i++) all[size_t(i)] = i;
            for (int32_t i = 0; i < n; i += 3) allowed.push_back(i);
            for (int32_t top_k : {1, 2, 40, 0}) {
                SamplingParams p = plain(0.8f, seed++);
                p.top_k = top_k, p.top_p = 0.95f, p.min_p = top_k == 0 ? 0.05f : 0.0f;
                Sampler sampler(p), allowed_sampler(p), twin(p);
                for (int i = 0; i < 20; i++) {
                    CAPTURE(n);
                    CAPTURE(ties);
                    CAPTURE(top_k);
                    CAPTURE(i);
                    const double u01 = double(i) / 20 + 0.01;
                    std::vector<float> copy = logits;
                    CHECK(sampler.sample(copy.data(), n, {}, u01) == plain_rule(logits, all, p, u01));
                    const double drawn = twin.draw(n);  // allowed_sampler takes the same draw from its own generator
                    copy = logits;
                    CHECK(allowed_sampler.sample_allowed(copy.data(), n, {}, allowed) ==
                          plain_rule(logits, allowed, p, drawn));
                }
            }
        }
    }
}
