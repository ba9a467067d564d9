#include "generate/beam_candidates.h"

#include <algorithm>
#include <cmath>

#include "compute/cpu_ops.h"
#include "util/error.h"

namespace kvlm {

namespace {

// max and log(sum(exp(x - max))) of a row. The sum by the CPU kernels' SIMD exp (each term within 2 ulp of
// expf, summed in double): libm's double exp took 0.38 ms per 49,152 logits, so that a step of 4 beams on
// session 25's H100 spent more time here than on the device.
struct RowNorm {
    float max;
    float log_sum;
};

// The largest of x[0..n), in 8 running maxima the compiler turns into vector instructions (std::max_element
// kept its one maximum in memory here: 0.2 ms a row of 49,152).
float row_max(const float* x, int32_t n) {
    float m[8];
    for (int k = 0; k < 8; k++) m[k] = x[0];
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) m[k] = x[i + k] > m[k] ? x[i + k] : m[k];
    for (; i < n; i++) m[0] = x[i] > m[0] ? x[i] : m[0];
    float max = m[0];
    for (int k = 1; k < 8; k++) max = m[k] > max ? m[k] : max;
    return max;
}

RowNorm row_norm(const float* logits, int32_t n) {
    const float max = row_max(logits, n);
    return {max, float(std::log(exp_sum_cpu(logits, n, max)))};
}

bool better(const BeamCandidate& a, const BeamCandidate& b) {
    if (a.score != b.score) return a.score > b.score;
    return a.beam != b.beam ? a.beam < b.beam : a.token < b.token;
}

}  // namespace

void log_softmax(const float* logits, int32_t n, float* out) {
    const RowNorm norm = row_norm(logits, n);
    for (int32_t i = 0; i < n; i++) out[i] = logits[i] - norm.max - norm.log_sum;
}

std::vector<BeamCandidate> best_beam_candidates(const std::vector<const float*>& rows,
                                                const std::vector<float>& beam_scores, int32_t n_vocab, int32_t n) {
    KVLM_ASSERT(rows.size() == beam_scores.size() && n_vocab > 0 && n > 0, "best_beam_candidates arguments");
    const int32_t keep = std::min(n, n_vocab);  // a row's own n best: the overall n best are among them
    std::vector<BeamCandidate> all;
    all.reserve(rows.size() * size_t(keep));
    std::vector<BeamCandidate> heap;  // the row's best so far, its worst on top
    heap.reserve(size_t(keep));
    for (size_t b = 0; b < rows.size(); b++) {
        const float* logits = rows[b];
        const RowNorm norm = row_norm(logits, n_vocab);
        const auto score = [&](int32_t t) {  // the order of operations log_softmax and the beam's sum take
            float s = logits[t] - norm.max - norm.log_sum;
            return s + beam_scores[b];
        };
        heap.clear();
        int32_t t = 0;
        for (; t < n_vocab && int32_t(heap.size()) < keep; t++) {
            heap.push_back({score(t), int32_t(b), t});
            std::push_heap(heap.begin(), heap.end(), better);
        }
        float worst_logit = logits[heap.front().token];
        // A lower logit than the worst kept one's scores no higher, and a tie loses to the earlier token: only
        // logits >= worst_logit can enter. Most 16-logit spans have none (one vectorizable test each).
        const auto consider = [&](int32_t token) {
            if (!(logits[token] >= worst_logit)) return;
            const BeamCandidate c{score(token), int32_t(b), token};
            if (!better(c, heap.front())) return;
            std::pop_heap(heap.begin(), heap.end(), better);
            heap.back() = c;
            std::push_heap(heap.begin(), heap.end(), better);
            worst_logit = logits[heap.front().token];
        };
        for (; t + 16 <= n_vocab; t += 16) {
            bool any = false;
            for (int k = 0; k < 16; k++) any |= logits[t + k] >= worst_logit;
            if (any)
                for (int k = 0; k < 16; k++) consider(t + k);
        }
        for (; t < n_vocab; t++) consider(t);
        all.insert(all.end(), heap.begin(), heap.end());
    }
    std::sort(all.begin(), all.end(), better);
    all.resize(std::min(all.size(), size_t(n)));
    return all;
}

}  // namespace kvlm
