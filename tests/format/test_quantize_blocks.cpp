// format/quantize_blocks: every block type's quantizer read back through format/quant_blocks (the layout the
// kernels and the gguf package read), on weight-like values: the error stays within each type's bound, and
// more bits give less error. llama-quantize's perplexity beside kvlm's: bench/RESULTS.md.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "format/dtype.h"
#include "format/quant_blocks.h"
#include "format/quantize_blocks.h"

using namespace kvlm;

namespace {

// Gaussian values with a few outliers at 6-10 sigma, as trained matrices have, and rows of varying scale.
std::vector<float> weight_like(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    std::vector<float> x(n);
    for (size_t i = 0; i < n; i++) {
        const float row_scale = 0.01f * (1.0f + float((i / 256) % 7));
        x[i] = row_scale * normal(rng);
        if (uniform(rng) < 0.002f) x[i] = row_scale * (uniform(rng) < 0.5f ? -1.0f : 1.0f) * (6.0f + 4.0f * uniform(rng));
    }
    return x;
}

// Quantized, then read back through the block layout: sqrt(sum (y - x)^2 / sum x^2).
double relative_error(DType dtype, const std::vector<float>& x) {
    std::vector<uint8_t> blocks(dtype_bytes(dtype, x.size()));
    quantize_blocks(dtype, x.data(), blocks.data(), int64_t(x.size()));
    std::vector<float> y(x.size());
    dequantize_blocks(dtype, blocks.data(), y.data(), int64_t(x.size()));
    double err = 0, norm = 0;
    for (size_t i = 0; i < x.size(); i++) {
        err += double(y[i] - x[i]) * double(y[i] - x[i]);
        norm += double(x[i]) * double(x[i]);
    }
    return std::sqrt(err / norm);
}

const DType kTypes[] = {DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1,   DType::iq4_nl,
                        DType::q2_k, DType::q3_k, DType::q4_k, DType::q5_k, DType::q6_k, DType::iq4_xs};

}  // namespace

TEST_CASE("quantize_blocks: every type reads back within its error bound, more bits less error") {
    const std::vector<float> x = weight_like(256 * 64, 47);
    // Relative RMS error measured on these values (2026-12-02) with about 10% headroom: a packing mistake or a
    // worse fit shows as several times more.
    const std::map<DType, double> bound = {
        {DType::q8_0, 0.0075}, {DType::q4_0, 0.118}, {DType::q4_1, 0.092}, {DType::q5_0, 0.058},
        {DType::q5_1, 0.046},  {DType::iq4_nl, 0.093}, {DType::q2_k, 0.32}, {DType::q3_k, 0.19},
        {DType::q4_k, 0.086},  {DType::q5_k, 0.044}, {DType::q6_k, 0.023}, {DType::iq4_xs, 0.095}};
    std::map<DType, double> error;
    for (DType dtype : kTypes) {
        CAPTURE(std::string(dtype_name(dtype)));
        error[dtype] = relative_error(dtype, x);
        CHECK(error[dtype] < bound.at(dtype));
    }
    CHECK(error[DType::q6_k] < error[DType::q5_k]);
    CHECK(error[DType::q5_k] < error[DType::q4_k]);
    CHECK(error[DType::q4_k] < error[DType::q3_k]);
    CHECK(error[DType::q3_k] < error[DType::q2_k]);
    CHECK(error[DType::q4_k] < error[DType::q4_1]);  // the super-block's sub-scales beat a scale per 32
    CHECK(error[DType::q5_k] < error[DType::q5_1]);
    CHECK(error[DType::iq4_nl] < error[DType::q4_0]);  // the non-linear table beats uniform steps
}

TEST_CASE("quantize_blocks: zeros stay zeros, a constant block stays near its value, tiny values do not blow up") {
    for (DType dtype : kTypes) {
        CAPTURE(std::string(dtype_name(dtype)));
        for (float value : {0.0f, 0.25f, -3.0f, 1e-30f}) {
            CAPTURE(value);
            const std::vector<float> x(256, value);
            std::vector<uint8_t> blocks(dtype_bytes(dtype, x.size()));
            quantize_blocks(dtype, x.data(), blocks.data(), 256);
            std::vector<float> y(256);
            dequantize_blocks(dtype, blocks.data(), y.data(), 256);
            for (float v : y) {
                REQUIRE(std::isfinite(v));
                CHECK(std::fabs(v - value) <= 0.02f * std::fabs(value) + 1e-6f);
            }
        }
    }
}
