// The prefill + decode loop shared by run and chat, over the prefix cache.
#include "generate/generate.h"

#include <xxhash.h>

#include <algorithm>
#include <chrono>

#include "generate/constrained.h"
#include "generate/draft_verify.h"
#include "generate/steps_ahead.h"
#include "util/byte_size.h"
#include "util/error.h"

namespace kvlm {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

Prefill prefill(Engine& engine, Sequence& seq, const std::vector<int32_t>& prompt, const std::atomic<bool>* cancel) {
    PrefixCache& cache = engine.prefix_cache();
    const int32_t n_vocab = engine.model().config().n_vocab;
    const int32_t n_ctx = engine.n_ctx();
    const int32_t n_before = seq.table.n_tokens;
    auto start = Clock::now();

    if (prompt.empty()) throw_error("the prompt is empty and the model has no BOS token to start from");
    if (int64_t(n_before) + int64_t(prompt.size()) > n_ctx)
        throw_error("the prompt is {} tokens{}, more than the context of {} tokens (raise it with -c, up to the "
                    "model's {}, or shorten the prompt)",
                    prompt.size(), n_before ? fmt::format(" on top of {} already in context", n_before) : "", n_ctx,
                    engine.model().config().n_ctx);
    if (int64_t(n_before) + int64_t(prompt.size()) > engine.n_pool_tokens())
        throw_error("the prompt is {} tokens{}, more than the KV pool holds ({} tokens in {} blocks of {}; raise "
                    "--kv-mem to {} or more, or shorten the prompt)",
                    prompt.size(), n_before ? fmt::format(" on top of {} already in context", n_before) : "",
                    engine.n_pool_tokens(), engine.pool().n_blocks(), engine.pool().block_size(),
                    byte_size_text(engine.kv_mem_for_tokens(int64_t(n_before) + int64_t(prompt.size()))));
    for (int32_t id : prompt)
        if (id < 0 || id >= n_vocab) throw_error("prompt token id {} is outside the vocabulary (0..{})", id, n_vocab - 1);

    Prefill result;
    result.n_prompt = int32_t(prompt.size());
    result.logits.resize(size_t(n_vocab));
    if (n_before == 0) result.n_reused = cache.attach_prefix(seq, prompt);
    const int32_t n_rest = result.n_prompt - result.n_reused;
    try {
        cache.reserve(seq, seq.table.n_tokens + n_rest);
        const int32_t chunk = cancel ? kPrefillChunkTokens : std::max(n_rest, 1);
        for (int32_t done = 0; done < n_rest; done += chunk) {
            if (cancel && cancel->load())
                throw PrefillInterrupted(fmt::format("interrupted while reading the prompt ({} of {} tokens done)",
                                                     done, n_rest));
            const int32_t n = std::min(chunk, n_rest - done);
            engine.backend().forward(prompt.data() + result.n_reused + done, n, seq.table.n_tokens, seq.table,
                                     result.logits.data());
            seq.table.n_tokens += n;
        }
    } catch (...) {
        cache.truncate(seq, n_before);  // undoes attach_prefix and releases what reserve added
        throw;
    }
    seq.tokens.insert(seq.tokens.end(), prompt.begin() + result.n_reused, prompt.end());
    cache.commit(seq);
    result.n_prefilled = n_rest;
    result.seconds = seconds_since(start);
    return result;
}

void check_speculation_backend(Engine& engine) {
    if (engine.backend().exact_forward_tokens() < 2)
        throw_error("--spec needs a forward of several tokens that gives the bits of its one-token steps, which {} "
                    "does not have with this model, so speculation could change the output (use --device cpu)",
                    engine.backend().name());
}

GenerationResult decode(Engine& engine, Sequence& seq, std::vector<float> logits, int32_t n_predict, Sampler& sampler,
                        const TextCallback& on_text, const std::atomic<bool>* cancel, const SpecOptions* spec,
                        const ConstraintOptions* constraint) {
    if (constraint && constraint->constraint) {
        KVLM_ASSERT(!spec || spec->mode == SpecOptions::Mode::off,
                    "speculation with a constraint (check_decoding_flags refuses it)");
        ConstraintReport report;
        GenerationResult result =
            decode_constrained(engine, seq, std::move(logits), n_predict, sampler, on_text, *constraint, report, cancel);
        result.constraint = report;
        return result;
    }
    PrefixCache& cache = engine.prefix_cache();
    const Tokenizer& tokenizer = engine.tokenizer();
    const int32_t n_vocab = engine.model().config().n_vocab;
    const int32_t n_ctx = engine.n_ctx();
    KVLM_ASSERT(int32_t(logits.size()) == n_vocab, "decode needs the last token's logits");
    KVLM_ASSERT(!seq.tokens.empty(), "decode needs a prefilled sequence");
    GenerationResult result;

    TokenTextStream text_stream(tokenizer);
    auto decode_start = Clock::now();
    Backend& backend = engine.backend();
    // The first token comes from the prompt's logits (on the host; the -v hash chains their bytes before the
    // sampler penalizes them in place); each later one from a decode step or a verification's row, which a
    // backend that samples on the device (CUDA) ends by picking the token there: only its id comes back, and
    // the hash chains the device's digest of the logits instead of their bytes (token_after_step).
    const StopRule stop_rule(tokenizer, n_predict, n_ctx, cancel);
    int32_t token = -1;
    if (!stop_rule.emits_nothing()) {
        result.logits_hash = XXH3_64bits_withSeed(logits.data(), logits.size() * sizeof(float), result.logits_hash);
        token = sampler.sample(logits.data(), n_vocab, seq.tokens);
        if (sampler.reports_probabilities()) result.probabilities.push_back(sampler.last_probability());
    }
    // Speculation: the draft of the last verify forward, whose K/V lie past the sequence's end, and the
    // tokens picked after its rows.
    const bool speculate = spec && spec->mode != SpecOptions::Mode::off;
    KVLM_ASSERT(!speculate || spec->mode != SpecOptions::Mode::draft || spec->drafter, "--spec draft needs a drafter");
    if (speculate) check_speculation_backend(engine);
    DraftVerification verification(sampler);
    // A draft that fails costs a forward of several tokens for one (on a 2-core CPU about six one-token steps): after
    // a draft of which fewer than kMinUseful tokens were picked, no drafting for `backoff` steps, doubling up to
    // kMaxBackoff while drafts keep failing; a useful one resets it. Drafts shorter than kMinDraft are not
    // worth their forward.
    constexpr int32_t kMinUseful = 2, kMinDraft = 3, kFirstBackoff = 16, kMaxBackoff = 128;
    int32_t backoff = 0, no_draft_until = 0;
    StepsAhead steps_ahead(backend, cache, seq, sampler);
    if (stop_rule.emits_nothing()) result.stop_reason = StopReason::token_limit;
    for (int32_t step = 0; !stop_rule.emits_nothing(); step++) {
        if (step == 0) result.first_token_seconds = seconds_since(decode_start);
        result.generated.push_back(token);
        result.has_pending_token = true;
        if (std::string text = text_stream.push(token, seq.tokens.back()); !text.empty()) on_text(text);
        result.stop_reason = stop_rule.after_token(token, step + 1, seq.table.n_tokens);
        if (result.stop_reason != StopReason::none) break;
        const bool drafted_next = verification.expects(token);
        if (verification.active() && !drafted_next) {  // the rest of the draft is wrong: its K/V and blocks go
            if (verification.n_accepted() < kMinUseful) {
                backoff = backoff == 0 ? kFirstBackoff : std::min(2 * backoff, kMaxBackoff);
                no_draft_until = step + backoff;
            } else {
                backoff = 0;
            }
            verification.end();
            cache.truncate(seq, seq.table.n_tokens);
        }
        try {
            cache.reserve(seq, seq.table.n_tokens + 1);
        } catch (const Error&) {
            result.stop_reason = StopReason::kv_cache_full;
            break;
        }
        const int32_t pos = seq.table.n_tokens;
        if (speculate) {
            if (drafted_next) {
                // Drafted, and now picked: its K/V and the pick after it are there already.
                result.n_accepted++;
                seq.tokens.push_back(token);
                seq.table.n_tokens += 1;
                result.has_pending_token = false;
                cache.commit(seq);
                token = verification.take(logits, seq.tokens.size(), result);
                continue;
            }
            seq.tokens.push_back(token);
            // Drafts whose every token could still be emitted (and its successor sampled) within -n and the context.
            // ... and that one forward verifies exactly (a backend's exact batch holds the token and its drafts).
            int32_t room = std::min({spec->max_drafted, n_ctx - pos - 1, backend.exact_forward_tokens() - 1});
            if (n_predict > 0) room = std::min(room, n_predict - step - 2);
            std::vector<int32_t> drafts;
            if (step >= no_draft_until)
                drafts = spec->mode == SpecOptions::Mode::lookup ? lookup_draft(seq.tokens, room)
                                                                 : spec->drafter->draft(seq.tokens, room);
            if (int32_t(drafts.size()) < kMinDraft) drafts.clear();
            if (!drafts.empty()) {
                try {
                    cache.reserve(seq, pos + 1 + int32_t(drafts.size()));
                } catch (const Error&) {
                    drafts.clear();  // no room for a draft: a plain step
                }
            }
            if (!drafts.empty()) {
                const int32_t n_drafted = int32_t(drafts.size());
                try {
                    verification.run(backend, seq, std::move(drafts), pos, n_vocab);
                } catch (...) {
                    seq.tokens.pop_back();
                    cache.truncate(seq, seq.table.n_tokens);
                    throw;
                }
                seq.table.n_tokens += 1;
                result.has_pending_token = false;
                cache.commit(seq);
                result.n_spec_forwards++;
                result.n_drafted += n_drafted;
                token = verification.take(logits, seq.tokens.size(), result);
                continue;
            }
            seq.tokens.pop_back();  // a plain step below
        }
        seq.tokens.push_back(token);  // the next step's penalty window includes it
        SampleRequest request;
        SampleOutcome next;
        try {
            // The step after this one is queued behind it when its token may be wanted: within -n and the
            // context, no interrupt asked for, no speculation.
            const bool queue_next = !speculate && (n_predict < 0 || step + 2 < n_predict) && pos + 1 < n_ctx &&
                                    !(cancel && cancel->load());
            next = steps_ahead.step(pos, n_vocab, queue_next, logits.data(), request);
        } catch (...) {
            seq.tokens.pop_back();
            throw;
        }
        seq.table.n_tokens += 1;
        result.has_pending_token = false;
        cache.commit(seq);
        // The next token (a bad logit throws with this token committed, wherever it was found).
        token = token_after_step(next, sampler, logits, request, seq.tokens.size(), result);
    }
    steps_ahead.drop();
    if (verification.active()) {  // drafts never confirmed: their blocks and draws go
        verification.end();
        cache.truncate(seq, seq.table.n_tokens);
    }
    if (std::string tail = text_stream.flush(); !tail.empty()) on_text(tail);
    result.decode_seconds = seconds_since(decode_start);
    result.transcript = seq.tokens;
    if (result.has_pending_token) result.transcript.push_back(result.generated.back());
    return result;
}

TokenTextStream::TokenTextStream(const Tokenizer& tokenizer)
    : tokenizer_(tokenizer),
      strip_space_after_bos_(tokenizer.data().type == "spm" && tokenizer.data().add_space_prefix) {}

std::string TokenTextStream::push(int32_t token, int32_t previous) {
    if (tokenizer_.is_end_of_generation(token)) return "";
    std::string bytes = tokenizer_.decode_token(token);
    // SentencePiece's dummy prefix puts a space before the first word; llama.cpp and llama2.c drop it when
    // the text starts right after BOS.
    if (strip_space_after_bos_ && previous == tokenizer_.bos_id() && !bytes.empty() && bytes[0] == ' ')
        bytes.erase(0, 1);
    return decoder_.push(bytes);
}

int32_t picked_token(const SampleOutcome& outcome, Sampler& sampler, std::vector<float>& logits,
                     const SampleRequest& request, size_t n_history, uint64_t& logits_hash) {
    if (outcome.status == SampleOutcome::kNeedsHost) {
        logits_hash = XXH3_64bits_withSeed(logits.data(), logits.size() * sizeof(float), logits_hash);
        return sampler.sample(logits.data(), int32_t(logits.size()), request, n_history);
    }
    logits_hash = XXH3_64bits_withSeed(&outcome.logits_digest, sizeof(outcome.logits_digest), logits_hash);
    if (outcome.status == SampleOutcome::kBadLogit) throw_bad_logit(outcome.bad_is_nan, outcome.bad_index, n_history);
    return outcome.token;
}

int32_t token_after_step(const SampleOutcome& outcome, Sampler& sampler, std::vector<float>& logits,
                         const SampleRequest& request, size_t n_history, GenerationResult& result) {
    const int32_t token = picked_token(outcome, sampler, logits, request, n_history, result.logits_hash);
    if (sampler.reports_probabilities())
        result.probabilities.push_back(outcome.status == SampleOutcome::kNeedsHost ? sampler.last_probability()
                                                                                   : outcome.probability);
    return token;
}

namespace {
// A token's text on one line: newlines, tabs and other control bytes escaped.
std::string printable(const std::string& text) {
    std::string out;
    for (unsigned char c : text) {
        if (c == '\n') out += "\\n";
        else if (c == '\t') out += "\\t";
        else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
        else out += char(c);
    }
    return out;
}
}  // namespace

std::string describe_probabilities(const GenerationResult& result, const Tokenizer& tokenizer) {
    const std::vector<float>& p = result.probabilities;
    if (p.empty() || p.size() > result.generated.size()) return "";
    double sum = 0;
    for (float v : p) sum += v;
    const size_t lowest = size_t(std::min_element(p.begin(), p.end()) - p.begin());
    return fmt::format("token probability: mean {:.3f}, lowest {:.3f} (token {}: '{}')", sum / double(p.size()),
                       p[lowest], lowest + 1, printable(tokenizer.decode_token(result.generated[lowest])));
}

GenerationResult generate(Engine& engine, Sequence& seq, const std::vector<int32_t>& prompt, int32_t n_predict,
                          Sampler& sampler, const TextCallback& on_text, const std::atomic<bool>* cancel,
                          const SpecOptions* spec, const ConstraintOptions* constraint) {
    Prefill p = prefill(engine, seq, prompt, cancel);
    GenerationResult result =
        decode(engine, seq, std::move(p.logits), n_predict, sampler, on_text, cancel, spec, constraint);
    result.n_prompt = p.n_prompt;
    result.n_reused = p.n_reused;
    result.n_prefilled = p.n_prefilled;
    result.prefill_seconds = p.seconds;
    result.first_token_seconds += p.seconds;
    return result;
}

}  // namespace kvlm
