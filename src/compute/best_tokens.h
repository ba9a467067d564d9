// A row's best next tokens by log-probability plus a base score: what a beam-search step needs of each beam
// (generate/beam_candidates.h), computed where the logits are (Backend::SequenceInput::best).
#pragma once
#include <cstdint>

namespace kvlm {

struct TokenScore {
    float score;    // base + log_softmax(logits)[token], in float
    int32_t token;  // -1: no such token (a row with fewer usable logits than asked for)
};

// The min(n, n_vocab) best tokens of logits[0..n_vocab) by score = (logits[t] - max - log(sum(exp(logits -
// max)))) + base, into out[], best first; equal scores in token order. One pass that scores only the
// logits that can still enter the n best (a score rises with its logit, so the rest cannot).
void best_tokens_cpu(const float* logits, int32_t n_vocab, float base, int32_t n, TokenScore* out);

// The first index of the largest of x[0..n) (0 when none is larger than -inf), and in *all_finite (when
// given) whether every value is finite. Two vectorizable passes: 0.035 ms over 49,152 logits here, where a loop that
// compares each value with x[best] took 0.17 ms.
int32_t argmax_cpu(const float* x, int32_t n, bool* all_finite = nullptr);

// log_softmax in float as torch computes it: x - max - log(sum(exp(x - max))), with best_tokens_cpu's max
// and sum.
void log_softmax(const float* logits, int32_t n, float* out);

}  // namespace kvlm
