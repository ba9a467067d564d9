// Why a decode loop stopped, and the one rule every decode loop (decode, decode_constrained, decode_samples,
// beam_search) applies after each token it emits, so that they all stop at the same token for the same reason.
#pragma once
#include <atomic>
#include <cstdint>

#include "tokenizer/tokenizer.h"

namespace kvlm {

enum class StopReason {
    none,                 // still going
    end_of_generation,    // the model's end-of-generation token (or beam search's best hypothesis ended so)
    constraint_complete,  // the output is a whole match of the constraint and nothing may follow it
    token_limit,          // -n tokens emitted
    interrupted,          // the cancel flag was set
    context_full,         // the next token would not fit the context
    kv_cache_full,        // the next token's KV block could not be reserved
};

// "end of generation", "constraint complete", "token limit", "interrupted", "context full", "KV cache full"
// ("" for none): the words -v, /stats and the messages print.
const char* stop_reason_text(StopReason reason);

class StopRule {
public:
    // n_predict < 0: no token limit; cancel may be null.
    StopRule(const Tokenizer& tokenizer, int32_t n_predict, int32_t n_ctx, const std::atomic<bool>* cancel)
        : tokenizer_(tokenizer), n_predict_(n_predict), n_ctx_(n_ctx), cancel_(cancel) {}

    // Whether a decode emits any token at all (-n 0 stops with token_limit before the first).
    bool emits_nothing() const { return n_predict_ == 0; }
    // After the n_emitted-th token of the output (`token`, its text already emitted unless it is the
    // end-of-generation token), with n_in_context tokens in the sequence's KV (the token itself not yet among
    // them): end of generation, a complete constraint, the token limit, an interrupt, a full context, in that
    // order; none when the loop goes on to forward the token.
    StopReason after_token(int32_t token, int32_t n_emitted, int32_t n_in_context,
                           bool constraint_complete = false) const;
    // The token limit alone, for a loop that knows its tokens' end otherwise (beam search's hypotheses).
    bool at_token_limit(int32_t n_emitted) const { return n_predict_ >= 0 && n_emitted >= n_predict_; }
    bool context_full(int32_t n_in_context) const { return n_in_context >= n_ctx_; }

private:
    const Tokenizer& tokenizer_;
    int32_t n_predict_;
    int32_t n_ctx_;
    const std::atomic<bool>* cancel_;
};

}  // namespace kvlm
