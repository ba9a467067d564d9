#include "generate/beam_candidates.h"

#include <algorithm>

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

}  // namespace kvlm
