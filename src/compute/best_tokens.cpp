#include "compute/best_tokens.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "compute/cpu_ops.h"

namespace kvlm {

namespace {

// The largest of x[0..n) (-inf when none is larger; NaN never is), in 8 running maxima the compiler turns into
// vector instructions (std::max_element kept its one maximum in memory here: 0.2 ms a row of 49,152), and in
// *all_finite (when given) whether every value is finite.
float row_max(const float* x, int32_t n, bool* all_finite) {
    float m[8];
    bool finite[8];
    for (int k = 0; k < 8; k++) m[k] = -INFINITY, finite[k] = true;
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) {
            const float v = x[i + k];
            finite[k] &= v - v == 0.0f;  // false for NaN and +-inf
            m[k] = v > m[k] ? v : m[k];
        }
    bool all = true;
    float max = -INFINITY;
    for (; i < n; i++) all &= x[i] - x[i] == 0.0f, max = x[i] > max ? x[i] : max;
    for (int k = 0; k < 8; k++) all &= finite[k], max = m[k] > max ? m[k] : max;
    if (all_finite) *all_finite = all;
    return max;
}

// max and log(sum(exp(x - max))) of a row. The sum by the CPU kernels' SIMD exp (each term within 2 ulp of
// expf, summed in double): libm's double exp took 0.38 ms per 49,152 logits, so that a step of 4 beams on
// session 25's H100 spent more time here than on the device.
struct RowNorm {
    float max;
    float log_sum;
};

RowNorm row_norm(const float* logits, int32_t n) {
    const float max = row_max(logits, n, nullptr);
    return {max, float(std::log(exp_sum_cpu(logits, n, max)))};
}

}  // namespace

int32_t argmax_cpu(const float* x, int32_t n, bool* all_finite) {
    const float max = row_max(x, n, all_finite);
    for (int32_t j = 0; j < n; j++)
        if (x[j] == max) return j;
    return 0;
}

void log_softmax(const float* logits, int32_t n, float* out) {
    const RowNorm norm = row_norm(logits, n);
    for (int32_t i = 0; i < n; i++) out[i] = logits[i] - norm.max - norm.log_sum;
}

void best_tokens_cpu(const float* logits, int32_t n_vocab, float base, int32_t n, TokenScore* out) {
    const int32_t keep = std::min(n, n_vocab);
    if (keep <= 0) return;
    const RowNorm norm = row_norm(logits, n_vocab);
    const auto score = [&](int32_t t) {  // the order of operations of log_softmax, then the base
        float s = logits[t] - norm.max - norm.log_sum;
        return s + base;
    };
    const auto itself = [](int32_t t) { return t; };
    std::vector<std::pair<float, int32_t>> best;
    best_k(logits, n_vocab, itself, score, size_t(keep), best);
    for (size_t i = 0; i < best.size(); i++) out[i] = {best[i].first, best[i].second};
}

}  // namespace kvlm
