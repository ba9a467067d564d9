#include "generate/draft_verify.h"

#include <algorithm>

#include "util/error.h"

namespace kvlm {

void DraftVerification::run(Backend& backend, const Sequence& seq, std::vector<int32_t> drafts, int32_t pos,
                            int32_t n_vocab) {
    KVLM_ASSERT(!drafts.empty() && !seq.tokens.empty(), "a verification needs a pending token and a draft");
    end();
    const size_t n_rows = drafts.size() + 1;
    n_vocab_ = n_vocab;
    tokens_.assign(1, seq.tokens.back());
    tokens_.insert(tokens_.end(), drafts.begin(), drafts.end());
    // Each row's request as its one-token step would make it: the window of the history up to its input.
    history_ = seq.tokens;
    requests_.resize(n_rows), windows_.resize(n_rows), generators_.resize(n_rows + 1);
    for (size_t r = 0; r < n_rows; r++) {
        if (r > 0) history_.push_back(drafts[r - 1]);
        generators_[r] = sampler_.generator();
        requests_[r] = sampler_.device_request(history_, n_vocab);
        windows_[r].assign(requests_[r].penalty_tokens, requests_[r].penalty_tokens + requests_[r].n_penalty);
    }
    generators_[n_rows] = sampler_.generator();
    for (size_t r = 0; r < n_rows; r++) requests_[r].penalty_tokens = windows_[r].data();
    outcomes_.assign(n_rows, SampleOutcome{});
    logits_.resize(n_rows * size_t(n_vocab));

    Backend::SequenceInput input;
    input.tokens = tokens_.data(), input.n_tokens = int32_t(n_rows), input.pos = pos, input.table = &seq.table;
    input.logits = logits_.data(), input.all_logits = true;
    input.sample = requests_.data(), input.outcome = outcomes_.data();
    try {
        backend.forward_sequences(&input, 1);
    } catch (...) {
        sampler_.restore_generator(generators_[0]);
        throw;
    }
    drafts_ = std::move(drafts);
    taken_ = 0;
}

int32_t DraftVerification::take(std::vector<float>& logits, size_t n_history, GenerationResult& result) {
    KVLM_ASSERT(taken_ <= drafts_.size(), "every row of the verification is taken");
    const size_t row = taken_++;
    const SampleOutcome& outcome = outcomes_[row];
    if (outcome.status == SampleOutcome::kNeedsHost)
        std::copy_n(logits_.begin() + std::ptrdiff_t(row * size_t(n_vocab_)), n_vocab_, logits.begin());
    return token_after_step(outcome, sampler_, logits, requests_[row], n_history, result);
}

void DraftVerification::end() {
    if (drafts_.empty()) return;
    sampler_.restore_generator(generators_[taken_]);
    drafts_.clear();
    taken_ = 0;
}

}  // namespace kvlm
