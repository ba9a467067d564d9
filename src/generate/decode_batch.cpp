// decode_samples: decode() for several sequences side by side, one forward_sequences per step.
#include <xxhash.h>

#include <chrono>
#include <memory>

#include "generate/generate.h"
#include "util/error.h"

namespace kvlm {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// One sequence's decode state: what decode() keeps in its locals.
struct Lane {
    Sequence* seq = nullptr;
    Sampler* sampler = nullptr;
    GenerationResult result;
    std::unique_ptr<TokenTextStream> text;
    std::vector<float> logits;
    SampleRequest request;
    SampleOutcome outcome;  // the step's token when the backend picked it where the logits are
    int32_t token = -1;
    bool running = true;
};

}  // namespace

std::vector<GenerationResult> decode_samples(Engine& engine, const std::vector<Sequence*>& seqs,
                                             const std::vector<float>& logits, int32_t n_predict,
                                             const std::vector<Sampler*>& samplers, const SampleTextCallback& on_text,
                                             const std::atomic<bool>* cancel) {
    PrefixCache& cache = engine.prefix_cache();
    const Tokenizer& tokenizer = engine.tokenizer();
    Backend& backend = engine.backend();
    const int32_t n_vocab = engine.model().config().n_vocab;
    const int32_t n_ctx = engine.n_ctx();
    KVLM_ASSERT(int32_t(logits.size()) == n_vocab, "decode_samples needs the prompt's last logits");
    KVLM_ASSERT(seqs.size() == samplers.size() && !seqs.empty(), "one sampler per sequence");
    KVLM_ASSERT(backend.exact_forward_tokens() > 0, "decode_samples needs a batch-invariant backend");
    const auto decode_start = Clock::now();

    const StopRule stop_rule(tokenizer, n_predict, n_ctx, cancel);
    std::vector<Lane> lanes(seqs.size());
    for (size_t i = 0; i < lanes.size(); i++) {
        Lane& lane = lanes[i];
        KVLM_ASSERT(!seqs[i]->tokens.empty(), "decode_samples needs prefilled sequences");
        lane.seq = seqs[i];
        lane.sampler = samplers[i];
        lane.text = std::make_unique<TokenTextStream>(tokenizer);
        lane.logits = logits;
        if (stop_rule.emits_nothing()) {
            lane.result.stop_reason = StopReason::token_limit;
            lane.running = false;
            continue;
        }
        lane.result.logits_hash =
            XXH3_64bits_withSeed(lane.logits.data(), lane.logits.size() * sizeof(float), lane.result.logits_hash);
        lane.token = lane.sampler->sample(lane.logits.data(), n_vocab, lane.seq->tokens);
    }
    std::vector<Backend::SequenceInput> inputs;
    std::vector<Lane*> stepping;
    for (int32_t step = 0;; step++) {
        // As decode(): emit each running sequence's token, then stop it or queue its next step.
        inputs.clear();
        stepping.clear();
        for (size_t i = 0; i < lanes.size(); i++) {
            Lane& lane = lanes[i];
            if (!lane.running) continue;
            GenerationResult& result = lane.result;
            Sequence& seq = *lane.seq;
            if (step == 0) result.first_token_seconds = seconds_since(decode_start);
            result.generated.push_back(lane.token);
            result.has_pending_token = true;
            if (std::string text = lane.text->push(lane.token, seq.tokens.back()); !text.empty()) on_text(i, text);
            result.stop_reason = stop_rule.after_token(lane.token, step + 1, seq.table.n_tokens);
            if (result.stop_reason == StopReason::none) {
                try {
                    cache.reserve(seq, seq.table.n_tokens + 1);
                } catch (const Error&) {
                    result.stop_reason = StopReason::kv_cache_full;
                }
            }
            if (result.stop_reason != StopReason::none) {
                lane.running = false;
                continue;
            }
            seq.tokens.push_back(lane.token);
            lane.request = lane.sampler->device_request(seq.tokens, n_vocab);
            Backend::SequenceInput in;
            in.tokens = &seq.tokens.back();
            in.n_tokens = 1;
            in.pos = seq.table.n_tokens;
            in.table = &seq.table;
            in.logits = lane.logits.data();
            in.sample = &lane.request;
            in.outcome = &lane.outcome;
            inputs.push_back(in);
            stepping.push_back(&lane);
        }
        if (inputs.empty()) break;
        try {
            backend.forward_sequences(inputs.data(), inputs.size());
        } catch (...) {
            for (Lane* lane : stepping) lane->seq->tokens.pop_back();
            throw;
        }
        for (Lane* lane : stepping) {
            Sequence& seq = *lane->seq;
            seq.table.n_tokens += 1;
            lane->result.has_pending_token = false;
            cache.commit(seq);
            lane->token = token_after_step(lane->outcome, *lane->sampler, lane->logits, lane->request,
                                           seq.tokens.size(), lane->result);
        }
    }
    std::vector<GenerationResult> results;
    for (size_t i = 0; i < lanes.size(); i++) {
        Lane& lane = lanes[i];
        if (std::string tail = lane.text->flush(); !tail.empty()) on_text(i, tail);
        lane.result.decode_seconds = seconds_since(decode_start);
        lane.result.transcript = lane.seq->tokens;
        if (lane.result.has_pending_token) lane.result.transcript.push_back(lane.result.generated.back());
        results.push_back(std::move(lane.result));
    }
    return results;
}

}  // namespace kvlm
