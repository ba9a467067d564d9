// One generation request over a Sequence in the pool: reuse what the prefix cache holds of the prompt,
// prefill the rest, then sample and decode token by token, streaming complete UTF-8 text to a callback.
// Never truncates: a prompt that does not fit the context is an Error; generation stops at
// end-of-generation, the token limit, or a full context / KV pool, and says which in the result.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "constrain/token_constraint.h"
#include "engine/engine.h"
#include "generate/sampler.h"
#include "generate/speculative.h"
#include "generate/stop_rule.h"
#include "kv/prefix_cache.h"
#include "util/error.h"

namespace kvlm {

// An output constraint for decode (generate/constrained.h): --json, --json-schema, --regex.
struct ConstraintOptions {
    TokenConstraint* constraint = nullptr;
    bool jump_forward = true;
};

// What constrained decoding adds to a GenerationResult's story (-v, /stats).
struct ConstraintReport {
    int32_t n_sampled = 0;        // tokens chosen by the sampler under the mask
    int32_t n_forced = 0;         // tokens appended without sampling (forced text)
    int32_t n_jumps = 0;          // forwards that took forced tokens along (jump-forward)
    double mask_seconds = 0;      // computing masks (cached per automaton state)
    int32_t n_masks = 0;          // automaton states whose masks were computed
    bool satisfied = false;       // the output is a whole match of the constraint
};

struct GenerationResult {
    std::vector<int32_t> generated;  // sampled tokens, the end-of-generation token included if hit
    // Prompt tokens of this request: n_prompt = n_reused + n_restored + n_prefilled.
    int32_t n_prompt = 0;
    int32_t n_reused = 0;     // K/V taken from the pool (prefix cache, or a fork of a prefilled prompt)
    int32_t n_restored = 0;   // K/V restored from disk (set by the session code, which does the restoring)
    int32_t n_prefilled = 0;  // computed by this request's prefill
    // Everything the sequence has seen: seq.tokens plus the last sampled token, which was printed but not
    // forwarded (not in the KV) when generation stopped. A session stores this and prefills the pending
    // token on its next turn.
    std::vector<int32_t> transcript;
    bool has_pending_token = false;  // transcript.back() is not in the sequence's KV
    double prefill_seconds = 0;
    double decode_seconds = 0;       // all decode steps (forward + sampling)
    double first_token_seconds = 0;  // from the call until the first sampled token
    StopReason stop_reason = StopReason::none;  // stop_reason_text(...) for its words
    uint64_t logits_hash = 0;        // XXH3 chain over every logits vector, for A/B comparisons
    // Speculation (SpecOptions): forwards that verified a draft, tokens drafted, and drafted tokens the sampler
    // then picked (their K/V and logits were already computed).
    int32_t n_spec_forwards = 0;
    int32_t n_drafted = 0;
    int32_t n_accepted = 0;
    ConstraintReport constraint;  // with a ConstraintOptions
    // With Sampler::report_probabilities (-v): the model's probability for each generated token, in order
    // (token_probability, generate/sampler.h; from the device where it samples). Empty otherwise.
    std::vector<float> probabilities;
};

// "token probability: mean 0.742, lowest 0.081 (token 17: ' dragon')" for -v; "" without probabilities.
std::string describe_probabilities(const GenerationResult& result, const Tokenizer& tokenizer);

using TextCallback = std::function<void(const std::string& text)>;

// A decode's text as its tokens come: complete UTF-8 characters only, none for the end-of-generation token,
// and SentencePiece's dummy-prefix space dropped from a token right after BOS (as llama.cpp and llama2.c do).
class TokenTextStream {
public:
    explicit TokenTextStream(const Tokenizer& tokenizer);
    // The text `token` completes; `previous` is the token before it in the sequence.
    std::string push(int32_t token, int32_t previous);
    std::string flush() { return decoder_.flush(); }  // an incomplete tail as U+FFFD

private:
    const Tokenizer& tokenizer_;
    bool strip_space_after_bos_;
    Utf8StreamDecoder decoder_;
};

// The prompt in the pool, and the logits of its last token.
struct Prefill {
    std::vector<float> logits;  // [n_vocab]
    int32_t n_prompt = 0;
    int32_t n_reused = 0;
    int32_t n_prefilled = 0;
    double seconds = 0;
};

// Thrown by prefill when `cancel` was set while it ran (Ctrl-C during a long paste); seq is unchanged.
class PrefillInterrupted : public Error {
public:
    using Error::Error;
};

// Tokens per forward call of an interruptible prefill: `cancel` is polled between chunks, so Ctrl-C
// during a 6,000-token prompt is honoured within one chunk's time, not when the whole prompt is done.
constexpr int32_t kPrefillChunkTokens = 512;

// Appends `prompt` to `seq` (which may already hold tokens: a continuation, or blocks a session restored)
// and runs what the pool does not hold through the model, committing completed blocks to the prefix
// cache. A fresh seq first maps the cached prefix of the prompt (PrefixCache::attach_prefix). Throws
// Error (prompt empty, past the context, bad ids, KV cache full) with seq unchanged. With `cancel`, the
// prompt goes through in chunks of kPrefillChunkTokens and a set flag throws PrefillInterrupted.
Prefill prefill(Engine& engine, Sequence& seq, const std::vector<int32_t>& prompt,
                const std::atomic<bool>* cancel = nullptr);

// Samples from `logits` (the last token of seq) and decodes on top of seq. history for the sampler
// (repetition penalty, BOS handling) is seq.tokens. n_predict < 0: until end of generation or a full
// context. Fills every field except the prompt counts and prefill_seconds. `cancel` (may be null) is
// polled after each token: once set, generation stops with the last sampled token pending. With `spec`
// (lookup, or draft with its drafter; the CPU backend), a step may run a draft with its token and keep what
// the sampler confirms: the same tokens as without it, and no K/V of an unconfirmed token ever reaches the
// prefix cache or seq.
// With `constraint` (its constraint set), decode_constrained (generate/constrained.h) runs instead; speculation
// with a constraint is refused.
// Throws Error, naming the backend, where speculation could change the output (a multi-token forward that
// does not give the bits of one-token steps).
void check_speculation_backend(Engine& engine);

GenerationResult decode(Engine& engine, Sequence& seq, std::vector<float> logits, int32_t n_predict, Sampler& sampler,
                        const TextCallback& on_text, const std::atomic<bool>* cancel = nullptr,
                        const SpecOptions* spec = nullptr, const ConstraintOptions* constraint = nullptr);

// decode() of several sequences side by side (--samples: forks of one prompt, one sampler each), without
// speculation: each step runs every sequence still going through one Backend::forward_sequences, so the
// weights are streamed once per step for all of them. Sequence i gets exactly decode()'s tokens, logits
// hash and stop with samplers[i] (needs backend.exact_forward_tokens() > 0). on_text
// gets the sequence's index. The pool must hold all of them at once (a full pool stops a sequence with
// "KV cache full", as in decode()).
// A decode step's next token: the backend's pick (`outcome` kToken; its logits digest chained into
// logits_hash; kBadLogit throws) or, for kNeedsHost, the host sampler's over `logits` with the request's draw
// (their bytes chained first).
int32_t picked_token(const SampleOutcome& outcome, Sampler& sampler, std::vector<float>& logits,
                     const SampleRequest& request, size_t n_history, uint64_t& logits_hash);
// picked_token for decode() and decode_samples(); with Sampler::report_probabilities, the token's
// probability also goes into result.probabilities.
int32_t token_after_step(const SampleOutcome& outcome, Sampler& sampler, std::vector<float>& logits,
                         const SampleRequest& request, size_t n_history, GenerationResult& result);

using SampleTextCallback = std::function<void(size_t sequence, const std::string& text)>;
std::vector<GenerationResult> decode_samples(Engine& engine, const std::vector<Sequence*>& seqs,
                                             const std::vector<float>& logits, int32_t n_predict,
                                             const std::vector<Sampler*>& samplers, const SampleTextCallback& on_text,
                                             const std::atomic<bool>* cancel = nullptr);

// prefill + decode. The caller releases seq (engine.prefix_cache().release(seq)) when done with it.
GenerationResult generate(Engine& engine, Sequence& seq, const std::vector<int32_t>& prompt, int32_t n_predict,
                          Sampler& sampler, const TextCallback& on_text, const std::atomic<bool>* cancel = nullptr,
                          const SpecOptions* spec = nullptr, const ConstraintOptions* constraint = nullptr);

}  // namespace kvlm
