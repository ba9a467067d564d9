// One generation request over a sequence's block table: prefill the prompt tokens, then sample and
// decode token by token, streaming complete UTF-8 text to a callback. Never truncates: a prompt that
// does not fit the context is an Error; generation stops at end-of-generation, the token limit, or a
// full context / KV pool, and says which in the result.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine.h"
#include "sampler.h"

namespace kvlm {

struct GenerationResult {
    std::vector<int32_t> generated;  // sampled tokens, the end-of-generation token included if hit
    int32_t n_prompt = 0;            // tokens prefilled by this request
    double prefill_seconds = 0;
    double decode_seconds = 0;       // all decode steps (forward + sampling)
    double first_token_seconds = 0;  // from the call until the first sampled token
    std::string stop_reason;         // "end of generation", "token limit", "context full", "KV cache full"
    uint64_t logits_hash = 0;        // XXH3 chain over every logits vector, for A/B comparisons
};

using TextCallback = std::function<void(const std::string& text)>;

// `table` holds the sequence's existing tokens (0 for a fresh one); `history` are their ids (for the
// repetition penalty and BOS handling). n_predict < 0: until end of generation or a full context.
GenerationResult generate(Engine& engine, BlockTable& table, std::vector<int32_t>& history,
                          const std::vector<int32_t>& prompt, int32_t n_predict, Sampler& sampler,
                          const TextCallback& on_text);

}  // namespace kvlm
