// Speculative decoding. A draft of the next few tokens comes from the sequence itself ("prompt lookup": what
// followed the latest earlier occurrence of its last few tokens - text that repeats its input, an edit, a
// quote, code, is then mostly verified, not decoded token by token) or from a second, smaller model
// (draft_model.h). decode() (generate.h) runs the pending token and the draft through the model in one
// forward and keeps, of the draft, the K/V and logits of the tokens the sampler picks anyway: the output is
// the same, token for token and seed for seed, as without speculation.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kvlm {

// Proposes up to max_tokens tokens to follow `history` (the sequence's tokens, the pending one last).
class Drafter {
public:
    virtual ~Drafter() = default;
    virtual std::vector<int32_t> draft(const std::vector<int32_t>& history, int32_t max_tokens) = 0;
};

struct SpecOptions {
    enum class Mode { off, lookup, draft };
    Mode mode = Mode::off;
    int32_t max_drafted = 8;      // --spec-max: draft tokens per verify forward
    Drafter* drafter = nullptr;   // Mode::draft: the draft model (not owned)
};

// The value of --spec ("off", "lookup", "draft") into options; throws Error naming the flag otherwise.
void parse_spec_mode(const std::string& name, SpecOptions* options);

// Up to max_tokens tokens that followed the latest earlier occurrence of history's last n tokens, for n = 3,
// then 2 (a single token repeats too often by chance to be worth a verify forward); empty when none occurs.
std::vector<int32_t> lookup_draft(const std::vector<int32_t>& history, int32_t max_tokens);

}  // namespace kvlm
