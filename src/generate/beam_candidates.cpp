#include "generate/beam_candidates.h"

#include <algorithm>

#include "util/error.h"

namespace kvlm {

std::vector<BeamCandidate> merge_beam_candidates(const std::vector<std::vector<TokenScore>>& best, int32_t n) {
    std::vector<BeamCandidate> all;
    for (size_t b = 0; b < best.size(); b++)
        for (const TokenScore& t : best[b])
            if (t.token >= 0) all.push_back({t.score, int32_t(b), t.token});
    const auto better = [](const BeamCandidate& a, const BeamCandidate& b) {
        if (a.score != b.score) return a.score > b.score;
        return a.beam != b.beam ? a.beam < b.beam : a.token < b.token;
    };
    std::sort(all.begin(), all.end(), better);
    all.resize(std::min(all.size(), size_t(std::max(n, 0))));
    return all;
}

std::vector<BeamCandidate> best_beam_candidates(const std::vector<const float*>& rows,
                                                const std::vector<float>& beam_scores, int32_t n_vocab, int32_t n) {
    KVLM_ASSERT(rows.size() == beam_scores.size() && n_vocab > 0 && n > 0, "best_beam_candidates arguments");
    std::vector<std::vector<TokenScore>> best(rows.size());
    for (size_t b = 0; b < rows.size(); b++) {
        best[b].resize(size_t(std::min(n, n_vocab)));
        best_tokens_cpu(rows[b], n_vocab, beam_scores[b], n, best[b].data());
    }
    return merge_beam_candidates(best, n);
}

}  // namespace kvlm
