// The constrained decode loop. Its shape is decode()'s (generate.cpp): a token is chosen, emitted, then run
// through the model; forced tokens come from a queue instead of the sampler, and jump-forward lets one
// forward take the queued tokens along, bounded so that it stops exactly where one-token steps would.
#include "generate/constrained.h"

#include <algorithm>
#include <chrono>
#include <deque>

#include "util/error.h"

namespace kvlm {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

bool can_jump_forward(Engine& engine) { return engine.backend().exact_forward_tokens() >= 2; }

GenerationResult decode_constrained(Engine& engine, Sequence& seq, std::vector<float> logits, int32_t n_predict,
                                    Sampler& sampler, const TextCallback& on_text, const ConstraintOptions& options,
                                    ConstraintReport& report, const std::atomic<bool>* cancel) {
    KVLM_ASSERT(options.constraint, "constrained decoding needs a constraint");
    TokenConstraint& constraint = *options.constraint;
    PrefixCache& cache = engine.prefix_cache();
    const Tokenizer& tokenizer = engine.tokenizer();
    Backend& backend = engine.backend();
    const int32_t n_vocab = engine.model().config().n_vocab;
    const int32_t n_ctx = engine.n_ctx();
    KVLM_ASSERT(int32_t(logits.size()) == n_vocab, "decode needs the last token's logits");
    KVLM_ASSERT(!seq.tokens.empty(), "decode needs a prefilled sequence");
    const bool jump = options.jump_forward && can_jump_forward(engine);
    const double mask_seconds_before = constraint.mask_seconds();
    const size_t n_masks_before = constraint.n_masks();

    GenerationResult result;
    report = ConstraintReport{};
    Utf8StreamDecoder decoder;
    const auto decode_start = Clock::now();
    int32_t state = constraint.start();
    std::deque<int32_t> queue;  // forced tokens not yet emitted

    // The next token: the queue's first, else sampled among the allowed ones - by the backend where the logits
    // are (`outcome`, on a GPU only the token comes back) or here from `logits` with the request's draw,
    // hashed as decode() hashes them. (No -v probabilities: forced tokens have none.)
    SampleRequest request;
    SampleOutcome outcome;  // kNeedsHost: the host samples `logits`
    auto pick = [&] {
        if (!queue.empty()) {
            const int32_t t = queue.front();
            queue.pop_front();
            report.n_forced++;
            return t;
        }
        report.n_sampled++;
        return picked_token(outcome, sampler, logits, request, seq.tokens.size(), result.logits_hash);
    };
    // Appends `token` to the output: the constraint's state, the text.
    auto emit = [&](int32_t token) {
        result.generated.push_back(token);
        result.has_pending_token = true;
        const int32_t next = constraint.advance(state, token);
        KVLM_ASSERT(next != TokenConstraint::kDead, "a token the constraint allowed led nowhere");
        state = next;
        if (tokenizer.is_end_of_generation(token)) return;
        if (std::string text = decoder.push(tokenizer.decode_token(token)); !text.empty()) on_text(text);
    };

    const StopRule stop_rule(tokenizer, n_predict, n_ctx, cancel);
    if (!stop_rule.emits_nothing() && queue.empty())
        request = sampler.allowed_request(seq.tokens, n_vocab, constraint.allowed(state));
    int32_t token = !stop_rule.emits_nothing() ? pick() : -1;
    if (stop_rule.emits_nothing()) result.stop_reason = StopReason::token_limit;
    for (int32_t step = 0; !stop_rule.emits_nothing(); step++) {
        if (step == 0) result.first_token_seconds = seconds_since(decode_start);
        emit(token);
        result.stop_reason = stop_rule.after_token(token, step + 1, seq.table.n_tokens, constraint.complete(state));
        if (result.stop_reason != StopReason::none) break;
        if (queue.empty()) {
            const std::vector<int32_t>& forced = constraint.forced_tokens(state);
            queue.assign(forced.begin(), forced.end());
        }
        const int32_t pos = seq.table.n_tokens;
        // Queued tokens this forward takes along: all but the last (the next pick), and none that one-token
        // steps would not reach (the -n limit, a full context).
        int32_t n_along = 0;
        if (jump && queue.size() >= 2) {
            n_along = std::min(int32_t(queue.size()) - 1, backend.exact_forward_tokens() - 1);  // one exact forward
            if (n_predict > 0) n_along = std::min(n_along, n_predict - step - 2);
            n_along = std::max(0, std::min(n_along, n_ctx - pos - 1));
        }
        try {
            cache.reserve(seq, pos + 1 + n_along);
        } catch (const Error&) {
            n_along = 0;
            try {
                cache.reserve(seq, pos + 1);
            } catch (const Error&) {
                result.stop_reason = StopReason::kv_cache_full;
                break;
            }
        }
        std::vector<int32_t> batch{token};
        batch.insert(batch.end(), queue.begin(), queue.begin() + n_along);
        // After the batch the queue's next token follows (no logits wanted), or a pick among what the state after
        // the batch allows, requested with the forward.
        const bool samples_next = int32_t(queue.size()) == n_along;
        int32_t pick_state = state;
        for (int32_t i = 0; i < n_along; i++) pick_state = constraint.advance(pick_state, queue[size_t(i)]);
        const size_t n_before = seq.tokens.size();
        seq.tokens.insert(seq.tokens.end(), batch.begin(), batch.end());  // the request's penalty window has them
        try {
            Backend::SequenceInput input;
            input.tokens = batch.data(), input.n_tokens = int32_t(batch.size()), input.pos = pos;
            input.table = &seq.table;
            outcome = SampleOutcome{};
            if (samples_next) {
                request = sampler.allowed_request(seq.tokens, n_vocab, constraint.allowed(pick_state));
                input.logits = logits.data(), input.sample = &request, input.outcome = &outcome;
            }
            if (batch.size() == 1 && samples_next)
                outcome = backend.decode_sample(token, pos, seq.table, request, logits.data());
            else
                backend.forward_sequences(&input, 1);
        } catch (...) {
            seq.tokens.resize(n_before);
            throw;
        }
        seq.table.n_tokens += int32_t(batch.size());
        result.has_pending_token = false;
        cache.commit(seq);
        if (n_along > 0) {
            report.n_jumps++;
            for (int32_t i = 0; i < n_along; i++, step++) {
                const int32_t forced = queue.front();
                queue.pop_front();
                report.n_forced++;
                emit(forced);
                result.has_pending_token = false;  // forwarded in the batch
            }
        }
        token = pick();
    }
    if (std::string tail = decoder.flush(); !tail.empty()) on_text(tail);
    result.decode_seconds = seconds_since(decode_start);
    result.transcript = seq.tokens;
    if (result.has_pending_token) result.transcript.push_back(result.generated.back());
    report.satisfied = constraint.accepting(state);
    report.mask_seconds = constraint.mask_seconds() - mask_seconds_before;
    report.n_masks = int32_t(constraint.n_masks() - n_masks_before);
    return result;
}

std::string describe_constraint_report(const ConstraintReport& r, bool jump_forward) {
    const int32_t n = r.n_sampled + r.n_forced;
    return fmt::format(
        "constraint: {} tokens sampled, {} forced{}, masks {:.1f} ms for {} new states ({:.3f} ms per "
        "token), output {}",
        r.n_sampled, r.n_forced,
        jump_forward ? fmt::format(" ({} jump-forward forwards)", r.n_jumps) : " (jump-forward off)",
        r.mask_seconds * 1e3, r.n_masks, n > 0 ? r.mask_seconds * 1e3 / n : 0.0,
        r.satisfied ? "complete" : "incomplete");
}

}  // namespace kvlm
