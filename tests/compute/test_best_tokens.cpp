// argmax_cpu (compute/best_tokens.h) against the plain loop it replaces in the sampler: the first index of the
// largest value, over lengths around its 8-wide blocks, rows with ties, a maximum in the tail, all -inf, and
// the finiteness flag for NaN and +-inf anywhere.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "compute/best_tokens.h"
#include "support/random_model.h"

using namespace kvlm;
using namespace kvlm::test;

namespace {

int32_t first_largest(const std::vector<float>& x) {
    int32_t best = 0;
    for (int32_t i = 0; i < int32_t(x.size()); i++)
        if (x[size_t(i)] > x[size_t(best)]) best = i;
    return best;
}

}  // namespace

TEST_CASE("argmax_cpu: the first largest value, and whether all are finite") {
    uint64_t seed = 90;
    for (int32_t n : {1, 7, 8, 9, 15, 16, 17, 1000, 49152}) {
        CAPTURE(n);
        std::vector<float> x = random_floats(size_t(n), -4, 4, seed++);
        bool finite = false;
        CHECK(argmax_cpu(x.data(), n, &finite) == first_largest(x));
        CHECK(finite);
        for (float& v : x) v = std::floor(v);  // 8 values: ties everywhere
        CHECK(argmax_cpu(x.data(), n) == first_largest(x));
        x[size_t(n - 1)] = 100;  // in the tail past the 8-wide blocks
        CHECK(argmax_cpu(x.data(), n) == n - 1);
        for (float bad : {std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY}) {
            std::vector<float> y = x;
            y[size_t(n / 2)] = bad;
            argmax_cpu(y.data(), n, &finite);
            CHECK_FALSE(finite);
        }
    }
    const std::vector<float> all_low(5, -INFINITY);
    bool finite = true;
    CHECK(argmax_cpu(all_low.data(), 5, &finite) == 0);
    CHECK_FALSE(finite);
}
