// One beam-search step's selection: the best (beam, token) continuations by summed log-probability, as
// Hugging Face's beam search ranks them (generate/beam_search.h), from each beam's own best tokens
// (compute/best_tokens.h) rather than every (beam, token) pair.
#pragma once
#include <cstdint>
#include <vector>

#include "compute/best_tokens.h"

namespace kvlm {

struct BeamCandidate {
    float score;  // the beam's score + log_softmax(its logits)[token], in float
    int32_t beam;
    int32_t token;
};

// The n best of the beams' candidates, best first, equal scores in (beam, token) order: best[b] holds beam
// b's own best tokens (at least n of them, or all it has; token -1 entries are skipped). The overall n best
// are among the beams' own n best, so this is exactly the first n of all pairs sorted so.
std::vector<BeamCandidate> merge_beam_candidates(const std::vector<std::vector<TokenScore>>& best, int32_t n);

}  // namespace kvlm
