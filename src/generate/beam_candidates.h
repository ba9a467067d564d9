// One beam-search step's selection: the best (beam, token) continuations by summed log-probability, as
// Hugging Face's beam search ranks them (generate/beam_search.h), without scoring every (beam, token) pair.
#pragma once
#include <cstdint>
#include <vector>

namespace kvlm {

struct BeamCandidate {
    float score;  // the beam's score + log_softmax(its logits)[token], in float
    int32_t beam;
    int32_t token;
};

// The n best candidates over beams b = 0.. with next-token logits rows[b] ([n_vocab]) and scores
// beam_scores[b], best first; equal scores in (beam, token) order. Exactly the first n of all
// n_beams x n_vocab pairs sorted so, but each row is one pass that scores only the logits that can still
// enter its n best (a score rises with its logit, so the rest cannot).
std::vector<BeamCandidate> best_beam_candidates(const std::vector<const float*>& rows,
                                                const std::vector<float>& beam_scores, int32_t n_vocab, int32_t n);

// log_softmax in float as torch computes it: x - max - log(sum(exp(x - max))).
void log_softmax(const float* logits, int32_t n, float* out);

}  // namespace kvlm
