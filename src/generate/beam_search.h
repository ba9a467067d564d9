// Beam search (`kvlm run --beams N`), scored and stopped as Hugging Face transformers' generate() does with
// num_beams=N, do_sample=False, early_stopping=False (BeamSearchScorer, transformers 4.46): each step the
// 2N best (beam, token) pairs by summed log-probability; an end-of-generation token among the top N closes
// a hypothesis scored sum / generated_length^length_penalty; the search ends when N hypotheses exist and
// none of the running beams can beat the worst of them, or at the token limit.
//
// The KV cache is never copied per beam: beams are forks of one prompt sequence sharing every block through
// the pool's reference counts, a beam that falls behind releases its blocks, and only the block a beam
// writes into is copied when it is shared (PrefixCache::reserve). All beams run in one
// Backend::forward_sequences per step.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/engine.h"
#include "generate/stop_rule.h"
#include "kv/prefix_cache.h"

namespace kvlm {

struct BeamOptions {
    int32_t n_beams = 1;
    float length_penalty = 1.0f;  // --length-penalty: > 0 favours longer hypotheses, < 0 shorter
    int32_t n_predict = -1;       // new tokens at most (-1: until the context is full)
};

struct BeamResult {
    std::vector<int32_t> tokens;  // the best hypothesis's new tokens (its end-of-generation token included)
    double score = 0;             // its sum of log-probabilities / length^length_penalty
    StopReason stop_reason = StopReason::none;  // end_of_generation (the best one ended so), token_limit, context_full
    int32_t n_steps = 0;          // forward steps of all beams together
    int32_t peak_blocks = 0;      // KV blocks the beams held at most at once
    int32_t independent_blocks = 0;  // what n_beams separate caches of the longest beam would hold
    double seconds = 0;
};

// Searches from `prompt` (its K/V in `prompt_seq`, `logits` those of its last token). prompt_seq is
// consumed (released). Needs a batch-invariant backend (Backend::exact_forward_tokens() > 0).
BeamResult beam_search(Engine& engine, Sequence& prompt_seq, const std::vector<float>& logits,
                       const BeamOptions& options);

}  // namespace kvlm
