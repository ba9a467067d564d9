// Decoding under an output constraint (--json, --json-schema, --regex): each step samples only among the
// tokens the constraint allows, and text the constraint forces is appended as the tokenizer's tokens of it
// without sampling. Jump-forward runs those forced tokens through the model in one forward with the token
// before them (a prefill on the KV cache) instead of one forward each; the tokens, logits and output are the
// same either way (needs a backend whose multi-token forward gives the bits of one-token steps: the CPU).
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "generate/generate.h"

namespace kvlm {

// decode() under `options.constraint`, from its start state (the output begins after seq's tokens). Stops
// with "end of generation" (only where the output is a whole match), "constraint complete" (a whole match
// that nothing may follow), or decode()'s other reasons, after which report.satisfied says whether the output
// is whole. With jump_forward on a backend whose multi-token forward is not exact, jump-forward is off
// (report it: the caller checks can_jump_forward first).
GenerationResult decode_constrained(Engine& engine, Sequence& seq, std::vector<float> logits, int32_t n_predict,
                                    Sampler& sampler, const TextCallback& on_text, const ConstraintOptions& options,
                                    ConstraintReport& report, const std::atomic<bool>* cancel = nullptr);

// Whether jump-forward keeps the output exact on this engine's backend.
bool can_jump_forward(Engine& engine);

// One line for -v: "constraint: 41 tokens sampled, 23 forced in 9 jumps, masks 12.3 ms for 57 states".
std::string describe_constraint_report(const ConstraintReport& report, bool jump_forward);

}  // namespace kvlm
