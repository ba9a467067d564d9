// The drafter of `--spec draft --draft-model SMALL.kvlm`: a second, smaller model with the same vocabulary
// proposes the next tokens greedily, and decode() verifies them with the target model in one forward. The
// draft model keeps its own KV cache: each call first brings it in line with the target's tokens (dropping
// its rejected drafts by truncation, prefilling only what it has not seen), so across turns and drafts it
// never recomputes a shared prefix.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "generate/speculative.h"

namespace kvlm {

class DraftModel final : public Drafter {
public:
    // Loads `path` with `options` (its own KV pool). Throws Error if its vocabulary differs from `target`'s,
    // naming the first difference.
    DraftModel(const std::string& path, const EngineOptions& options, const Tokenizer& target);
    ~DraftModel() override;

    std::vector<int32_t> draft(const std::vector<int32_t>& history, int32_t max_tokens) override;
    Engine& engine() { return *engine_; }

private:
    int32_t forward_greedy(const int32_t* tokens, int32_t n_tokens);

    std::unique_ptr<Engine> engine_;
    Sequence seq_;               // tokens whose K/V are in the draft model's cache
    std::vector<float> logits_;  // a step's logits, where the host picks
};

// "" when the two vocabularies are the same (size, every token's text, BOS and EOS), otherwise the first
// difference ("n_vocab: 512 in the draft model, 49152 in the target").
std::string vocabulary_difference(const Tokenizer& draft, const Tokenizer& target);

}  // namespace kvlm
