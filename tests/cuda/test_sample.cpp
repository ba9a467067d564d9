// The device sampler (cuda/kernels/sample.cu) against the CPU sampler (src/generate/sampler.cpp) on the same logits
// and the same draw: the same token for greedy, top-k, top-p, min-p, temperature and the repetition penalty
// over vocabularies of 1 to 128,256 tokens (ties, -0 and +0 included), the same penalized logits bit for
// bit, the first NaN or infinite logit reported as the CPU reports it, the logits handed back untouched when
// there are more candidates than the device sorts, and a digest that moves with any logit. Without a CUDA
// device (or in CUDA=0 builds) each case says "SKIPPED: no CUDA device (...)" and passes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "generate/sampler.h"
#include "support/cuda_emu.h"
#include "support/cuda_kernel_checks.h"
#include "util/error.h"

#ifdef KVLM_CUDA
#include "cuda/testing/cuda_test_api.h"
#endif

using namespace kvlm;
using namespace kvlm::test;

#ifndef KVLM_CUDA

TEST_CASE("cuda kernels: the device sampler picks the CPU sampler's token") {
    MESSAGE("SKIPPED: no CUDA device (this kvlm was built without CUDA)");
}

#else

namespace {

// Logits shaped like a model's: a few large, many small, some exact ties and signed zeros.
std::vector<float> model_like_logits(int32_t n_vocab, float spread, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, spread);
    std::vector<float> logits(static_cast<size_t>(n_vocab));
    for (float& l : logits) l = normal(rng);
    std::uniform_int_distribution<int32_t> pick(0, n_vocab - 1);
    for (int i = 0; i < std::min(n_vocab / 4, 40); i++) logits[size_t(pick(rng))] = 3.0f * spread + float(i % 5);  // ties
    if (n_vocab > 8) logits[3] = 0.0f, logits[5] = -0.0f;
    return logits;
}

int32_t unconstrained_argmax(const std::vector<float>& logits) {
    return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

std::vector<int32_t> random_history(int32_t n, int32_t n_vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> pick(0, n_vocab - 1);
    std::vector<int32_t> h(static_cast<size_t>(n));
    for (int32_t& t : h) t = pick(rng) % std::max(1, std::min(n_vocab, 60));  // repeats, like text
    return h;
}

struct Case {
    const char* name;
    SamplingParams params;
};

std::vector<Case> cases() {
    auto p = [](float temp, int32_t top_k, float top_p, float min_p, float penalty, int32_t last_n) {
        SamplingParams s;
        s.temperature = temp, s.top_k = top_k, s.top_p = top_p, s.min_p = min_p;
        s.repeat_penalty = penalty, s.repeat_last_n = last_n;
        return s;
    };
    return {{"greedy", p(0, 40, 0.95f, 0.05f, 1, 64)},
            {"greedy + penalty", p(0, 40, 0.95f, 0.05f, 1.3f, 64)},
            {"defaults", p(0.8f, 40, 0.95f, 0.05f, 1.1f, 64)},
            {"top-k 1", p(0.8f, 1, 1, 0, 1, 64)},
            {"top-k 5, hot", p(1.5f, 5, 1, 0, 1, 64)},
            {"top-k 1024, top-p 0.5", p(1.0f, 1024, 0.5f, 0, 1, 64)},
            {"top-k off, min-p 0.05", p(0.8f, 0, 0.95f, 0.05f, 1.1f, 64)},
            {"top-k off, min-p 0.2, cold", p(0.3f, 0, 1, 0.2f, 1, 64)},
            {"top-k off, min-p 0.01, top-p 0.5", p(1.0f, 0, 0.5f, 0.01f, 1, 64)},
            {"top-k off, min-p 1", p(0.8f, 0, 1, 1.0f, 1, 64)},
            {"penalty over the whole history", p(0.8f, 40, 1, 0, 1.2f, -1)},
            {"extreme penalty", p(0.8f, 40, 1, 0, 1e38f, 64)}};
}

}  // namespace

TEST_CASE("cuda kernels: the device sampler picks the CPU sampler's token") {
    if (!have_cuda_device()) return;
    const bool emulated = cuda_emulated();
    const int32_t kVocabs[] = {1, 7, 1000, 49152, 128256};
    uint32_t seed = 1;
    int checked = 0, checked_ahead = 0;
    for (int32_t n_vocab : kVocabs) {
        if (emulated && n_vocab == 128256) continue;  // every fiber would walk 125 logits per pass
        for (const Case& c : cases()) {
            for (float spread : {0.5f, 3.0f}) {
                for (int draw = 0; draw < (emulated ? 2 : 6); draw++, seed++) {
                    const std::vector<float> logits = model_like_logits(n_vocab, spread, seed);
                    const std::vector<int32_t> history = random_history(80, n_vocab, seed);
                    SamplingParams params = c.params;
                    params.seed = seed;
                    Sampler device_side(params), cpu_side(params);
                    device_side.report_probabilities(true), cpu_side.report_probabilities(true);
                    const SampleRequest request = device_side.device_request(history, n_vocab);
                    const double u01 = cpu_side.draw(n_vocab);
                    REQUIRE(u01 == request.u01);  // the same generator, the same draw
                    std::vector<float> cpu_logits = logits, gpu_logits = logits;
                    const int32_t want = cpu_side.sample(cpu_logits.data(), n_vocab, history, u01);
                    const SampleOutcome got = cuda_test::sample(gpu_logits.data(), n_vocab, request);
                    INFO(std::string(c.name) << ", n_vocab " << n_vocab << ", spread " << spread << ", seed " << seed);
                    if (got.status == SampleOutcome::kNeedsHost) {  // allowed only past the candidate bound
                        CHECK((c.params.top_k <= 0 && c.params.temperature > 0));
                        CHECK(std::memcmp(gpu_logits.data(), logits.data(), logits.size() * 4) == 0);
                        continue;
                    }
                    REQUIRE(got.status == SampleOutcome::kToken);
                    CHECK(got.token == want);
                    CHECK(got.probability == doctest::Approx(cpu_side.last_probability()).epsilon(1e-5));
                    // The CPU penalizes in place too: the same bits.
                    CHECK(std::memcmp(gpu_logits.data(), cpu_logits.data(), logits.size() * 4) == 0);
                    checked++;
                    if (draw != 0) continue;
                    // The same step enqueued before the host had its input token (the history's last): the
                    // window without it, the device adding it; the token it picks is left as the next input.
                    Sampler ahead_side(params);
                    const std::vector<int32_t> known(history.begin(), history.end() - 1);
                    const SampleRequest ahead = ahead_side.step_ahead_request(known, n_vocab);
                    REQUIRE(ahead.u01 == request.u01);
                    std::vector<float> ahead_logits = logits;
                    int32_t step_token = history.back();
                    const SampleOutcome got_ahead = cuda_test::sample(ahead_logits.data(), n_vocab, ahead, &step_token);
                    REQUIRE(got_ahead.status == SampleOutcome::kToken);
                    CHECK(got_ahead.token == want);
                    CHECK(step_token == want);
                    CHECK(got_ahead.logits_digest == got.logits_digest);
                    CHECK(std::memcmp(ahead_logits.data(), cpu_logits.data(), logits.size() * 4) == 0);
                    checked_ahead++;
                }
            }
        }
    }
    MESSAGE("device sampler == CPU sampler on " << checked << " draws, " << checked_ahead << " of them also enqueued ahead");
    CHECK(checked > 100);
    CHECK(checked_ahead > 50);
}

// Constrained output: the pick among an allowed set (a bitset on the device), as the CPU's sample_allowed makes
// it, for one token, a few, most and all of them; the probability (-v) stays the whole vocabulary's.
TEST_CASE("cuda kernels: the device sampler picks among an allowed set as the CPU's sample_allowed does") {
    if (!have_cuda_device()) return;
    const std::vector<Case> all_cases = cases();
    uint32_t seed = 500;
    int checked = 0, outside_best = 0;
    for (int32_t n_vocab : {7, 1000, 49152}) {
        for (const char* name : {"greedy + penalty", "defaults", "top-k 5, hot", "top-k off, min-p 0.05",
                                 "top-k off, min-p 0.2, cold", "top-k off, min-p 0.01, top-p 0.5"}) {
            const Case& c = *std::find_if(all_cases.begin(), all_cases.end(),
                                          [&](const Case& x) { return std::string(x.name) == name; });
            for (int set = 0; set < 4; set++, seed++) {
                const std::vector<float> logits = model_like_logits(n_vocab, 3.0f, seed);
                const std::vector<int32_t> history = random_history(80, n_vocab, seed);
                // One token; a few; every other token; all but the best ones (the unconstrained pick's rivals).
                std::mt19937 rng(seed);
                std::vector<int32_t> allowed;
                for (int32_t i = 0; i < n_vocab; i++) {
                    const bool in = set == 0   ? i == n_vocab / 2
                                    : set == 1 ? rng() % 97 == 0 || i == 1
                                    : set == 2 ? i % 2 == 1
                                               : logits[size_t(i)] < 3.0f * 3.0f;
                    if (in) allowed.push_back(i);
                }
                if (allowed.empty()) allowed.push_back(0);
                SamplingParams params = c.params;
                params.seed = seed;
                Sampler device_side(params), cpu_side(params);
                device_side.report_probabilities(true), cpu_side.report_probabilities(true);
                const SampleRequest request = device_side.allowed_request(history, n_vocab, allowed);
                std::vector<float> cpu_logits = logits, gpu_logits = logits;
                const int32_t want = cpu_side.sample_allowed(cpu_logits.data(), n_vocab, history, allowed);
                const SampleOutcome got = cuda_test::sample(gpu_logits.data(), n_vocab, request);
                INFO(name << ", n_vocab " << n_vocab << ", allowed set " << set << " (" << allowed.size()
                          << " tokens), seed " << seed);
                if (got.status == SampleOutcome::kNeedsHost) {  // more min-p survivors than the device sorts
                    CHECK(c.params.top_k <= 0);
                    CHECK(std::memcmp(gpu_logits.data(), logits.data(), logits.size() * 4) == 0);
                    continue;
                }
                REQUIRE(got.status == SampleOutcome::kToken);
                CHECK(got.token == want);
                CHECK(std::binary_search(allowed.begin(), allowed.end(), got.token));
                CHECK(got.probability == doctest::Approx(cpu_side.last_probability()).epsilon(1e-5));
                CHECK(std::memcmp(gpu_logits.data(), cpu_logits.data(), logits.size() * 4) == 0);
                outside_best += got.token != unconstrained_argmax(cpu_logits);
                checked++;
            }
        }
    }
    MESSAGE("device sampler == sample_allowed on " << checked << " draws");
    CHECK(checked >= 55);
    CHECK(outside_best >= 10);  // the sets did constrain: the pick was not the unconstrained argmax
}

TEST_CASE("cuda kernels: the device sampler reports the first NaN or infinite logit, as the CPU does") {
    if (!have_cuda_device()) return;
    const int32_t n_vocab = 5000;
    for (float bad : {NAN, INFINITY, -INFINITY}) {
        std::vector<float> logits = model_like_logits(n_vocab, 1.0f, 7);
        logits[4321] = 1.0f;
        logits[1234] = bad;
        logits[4000] = NAN;
        SamplingParams params;
        params.temperature = 0.8f;
        Sampler sampler(params);
        const std::vector<int32_t> history = {1, 2, 3};
        const SampleRequest request = sampler.device_request(history, n_vocab);
        std::vector<float> cpu_logits = logits;
        std::string cpu_error;
        try {
            sampler.sample(cpu_logits.data(), n_vocab, history, request.u01);
        } catch (const Error& e) {
            cpu_error = e.what();
        }
        const SampleOutcome got = cuda_test::sample(logits.data(), n_vocab, request);
        REQUIRE(got.status == SampleOutcome::kBadLogit);
        CHECK(got.bad_index == 1234);
        CHECK(got.bad_is_nan == std::isnan(bad));
        std::string gpu_error;
        try {
            throw_bad_logit(got.bad_is_nan, got.bad_index, history.size());
        } catch (const Error& e) {
            gpu_error = e.what();
        }
        CHECK(gpu_error == cpu_error);
        CHECK(cpu_error.find("(token 1234)") != std::string::npos);
    }
}

TEST_CASE("cuda kernels: the device sampler hands flat logits back untouched, and its digest follows the logits") {
    if (!have_cuda_device()) return;
    const int32_t n_vocab = 49152;
    // Flat logits, top-k off, a low min-p: every token survives the floor, more than the device sorts.
    std::vector<float> flat(static_cast<size_t>(n_vocab));
    for (int32_t i = 0; i < n_vocab; i++) flat[size_t(i)] = 0.001f * float(i % 97);
    SamplingParams params;
    params.temperature = 1.0f, params.top_k = 0, params.min_p = 0.01f, params.repeat_penalty = 1.5f;
    Sampler sampler(params);
    const std::vector<int32_t> history = {5, 6, 7, 5};
    const SampleRequest request = sampler.device_request(history, n_vocab);
    CHECK(request.n_penalty == 3);
    std::vector<float> logits = flat;
    SampleOutcome got = cuda_test::sample(logits.data(), n_vocab, request);
    CHECK(got.status == SampleOutcome::kNeedsHost);
    CHECK(std::memcmp(logits.data(), flat.data(), flat.size() * 4) == 0);  // the penalty undone

    // Greedy: the digest is a function of the logits, and one changed bit changes it.
    SamplingParams greedy;
    greedy.temperature = 0;
    Sampler g(greedy);
    const SampleRequest gr = g.device_request(history, n_vocab);
    std::vector<float> a = model_like_logits(n_vocab, 2.0f, 3), b = a, c = a;
    c[777] = std::nextafter(c[777], 100.0f);
    const SampleOutcome da = cuda_test::sample(a.data(), n_vocab, gr), db = cuda_test::sample(b.data(), n_vocab, gr),
                        dc = cuda_test::sample(c.data(), n_vocab, gr);
    CHECK(da.logits_digest == db.logits_digest);
    CHECK(da.logits_digest != dc.logits_digest);
    CHECK(da.token == db.token);
}

#endif
