// The device's beam-search picks (cuda/kernels/best_tokens.cu) against best_tokens_cpu: the same tokens in the same
// order, scores within float rounding of the host's (the device sums exp in its own order), over random rows,
// rows of few distinct values (ties, kept in token order), rows at a -1e9 base (every score one float, so the
// lowest tokens win), a vocabulary smaller than n (token -1 past it), and 128,256-logit rows.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "compute/best_tokens.h"
#include "support/cuda_kernel_checks.h"
#include "support/random_model.h"

#ifdef KVLM_CUDA
#include "cuda/testing/cuda_test_api.h"
#endif

using namespace kvlm;
using namespace kvlm::test;

#ifndef KVLM_CUDA

TEST_CASE("cuda kernels: beam picks where the logits are") {
    MESSAGE("SKIPPED: no CUDA device (this kvlm was built without CUDA)");
}

#else

TEST_CASE("cuda kernels: beam picks where the logits are, as best_tokens_cpu picks them") {
    if (!have_cuda_device()) return;
    uint64_t seed = 310;
    struct Case {
        int32_t n_vocab, n_rows, n;
        const char* kind;
    };
    const Case kCases[] = {{1000, 4, 8, "random"}, {1000, 3, 6, "ties"},     {1000, 2, 16, "base -1e9"},
                           {5, 2, 8, "random"},    {49152, 8, 16, "random"}, {128256, 2, 64, "ties"},
                           {4096, 64, 2, "random"}};
    for (const Case& c : kCases) {
        CAPTURE(c.kind);
        CAPTURE(c.n_vocab);
        CAPTURE(c.n);
        std::vector<float> logits = random_floats(size_t(c.n_rows) * size_t(c.n_vocab), -8, 8, seed++);
        if (std::string(c.kind) == "ties")
            for (float& x : logits) x = std::floor(x / 4);  // 4 distinct values
        std::vector<float> bases = random_floats(size_t(c.n_rows), -5, 0, seed++);
        if (std::string(c.kind) == "base -1e9") bases.assign(bases.size(), -1e9f);
        std::vector<TokenScore> got(size_t(c.n_rows) * size_t(c.n));
        cuda_test::best_tokens(logits.data(), c.n_rows, c.n_vocab, bases.data(), c.n, got.data());
        for (int32_t r = 0; r < c.n_rows; r++) {
            CAPTURE(r);
            const int32_t keep = std::min(c.n, c.n_vocab);
            std::vector<TokenScore> want(static_cast<size_t>(keep));
            best_tokens_cpu(&logits[size_t(r) * size_t(c.n_vocab)], c.n_vocab, bases[size_t(r)], c.n, want.data());
            for (int32_t k = 0; k < c.n; k++) {
                const TokenScore& g = got[size_t(r) * size_t(c.n) + size_t(k)];
                if (k >= keep) {
                    CHECK(g.token == -1);
                    continue;
                }
                CHECK(g.token == want[size_t(k)].token);
                CHECK(std::fabs(g.score - want[size_t(k)].score) <= 1e-5f * (1 + std::fabs(want[size_t(k)].score)));
            }
        }
    }
}

#endif  // KVLM_CUDA
