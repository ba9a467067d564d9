// Speculative verification: the pending token and its draft in one forward (Backend::forward_sequences with
// every row's logits), each row's next token picked as that row's own one-token step would pick it - with the
// draw and penalty window that step would take - on the device where the backend samples there (only the
// token comes back, not n_vocab logits a row), else on the host from the row's logits. Rows are taken in
// order while the picks follow the draft; the draws of rows never taken go back to the sampler, so the
// generator ends where decoding without speculation leaves it.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "compute/backend.h"
#include "generate/generate.h"
#include "generate/sampler.h"
#include "kv/prefix_cache.h"

namespace kvlm {

class DraftVerification {
public:
    explicit DraftVerification(Sampler& sampler) : sampler_(sampler) {}

    // Runs seq.tokens.back() (the pending token, at `pos`) and `drafts` after it through the backend; the
    // table must already hold pos + 1 + drafts.size() tokens. Row 0 follows the pending token, row i draft
    // i - 1. Every row's draw is taken from the sampler now (and given back if the forward throws).
    void run(Backend& backend, const Sequence& seq, std::vector<int32_t> drafts, int32_t pos, int32_t n_vocab);
    bool active() const { return !drafts_.empty(); }
    const std::vector<int32_t>& drafts() const { return drafts_; }
    // Draft tokens picked so far (their K/V were in the verify forward).
    int32_t n_accepted() const { return taken_ > 0 ? int32_t(taken_) - 1 : 0; }
    // Whether `token`, just picked from the last row taken, is the draft's next token (whose row is ready).
    bool expects(int32_t token) const { return taken_ > 0 && taken_ <= drafts_.size() && drafts_[taken_ - 1] == token; }
    // The token picked after the next row (the first call after run: row 0): its outcome from the device, or
    // the host's sample of its logits (copied into `logits`), as token_after_step does for a decode step.
    // n_history: the tokens before the pick, the row's input included.
    int32_t take(std::vector<float>& logits, size_t n_history, GenerationResult& result);
    // Ends the verification: the draws of the rows not taken go back to the sampler.
    void end();

private:
    Sampler& sampler_;
    std::vector<int32_t> drafts_, tokens_, history_;
    std::vector<float> logits_;  // [rows][n_vocab], written for rows the host samples
    std::vector<SampleRequest> requests_;
    std::vector<std::vector<int32_t>> windows_;  // each request's penalty tokens
    std::vector<SampleOutcome> outcomes_;
    std::vector<std::mt19937_64> generators_;  // [rows + 1]: the sampler's generator before row r's draw
    size_t taken_ = 0;                         // rows taken
    int32_t n_vocab_ = 0;
};

}  // namespace kvlm
