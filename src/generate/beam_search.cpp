#include "generate/beam_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "generate/beam_candidates.h"
#include "util/error.h"

namespace kvlm {

namespace {

struct Hypothesis {
    double score;
    std::vector<int32_t> tokens;  // new tokens, its end-of-generation token (if any) last
    bool ended;
};

// BeamHypotheses: the n best finished hypotheses and the worst score among them.
class Hypotheses {
public:
    Hypotheses(int32_t n_beams, float length_penalty) : n_beams_(n_beams), length_penalty_(length_penalty) {}
    void add(std::vector<int32_t> tokens, double sum_logprobs, int32_t generated_len, bool ended) {
        const double score = sum_logprobs / std::pow(double(generated_len), double(length_penalty_));
        if (int32_t(kept_.size()) < n_beams_ || score > worst_) {
            kept_.push_back({score, std::move(tokens), ended});
            if (int32_t(kept_.size()) > n_beams_) {
                auto worst = std::min_element(kept_.begin(), kept_.end(),
                                              [](const Hypothesis& a, const Hypothesis& b) { return a.score < b.score; });
                kept_.erase(worst);
            }
            worst_ = std::min_element(kept_.begin(), kept_.end(), [](const Hypothesis& a, const Hypothesis& b) {
                         return a.score < b.score;
                     })->score;
        }
    }
    // early_stopping=False: done once no running beam, at its best, could beat the worst kept hypothesis.
    bool done(double best_sum_logprobs, int32_t cur_len) const {
        if (int32_t(kept_.size()) < n_beams_) return false;
        return worst_ >= best_sum_logprobs / std::pow(double(cur_len), double(length_penalty_));
    }
    const Hypothesis& best() const {
        return *std::max_element(kept_.begin(), kept_.end(),
                                 [](const Hypothesis& a, const Hypothesis& b) { return a.score < b.score; });
    }

private:
    int32_t n_beams_;
    float length_penalty_;
    std::vector<Hypothesis> kept_;
    double worst_ = 1e9;
};

struct Beam {
    Sequence seq;                 // prompt + new tokens, all with K/V
    std::vector<int32_t> tokens;  // the new tokens
    float score = 0;              // sum of log-probabilities (float, as HF keeps beam_scores)
};

}  // namespace

BeamResult beam_search(Engine& engine, Sequence& prompt_seq, const std::vector<float>& logits,
                       const BeamOptions& options) {
    const auto start = std::chrono::steady_clock::now();
    PrefixCache& cache = engine.prefix_cache();
    Backend& backend = engine.backend();
    const Tokenizer& tokenizer = engine.tokenizer();
    const int32_t n_vocab = engine.model().config().n_vocab, n_beams = options.n_beams;
    const int32_t block_size = engine.pool().block_size();
    KVLM_ASSERT(n_beams >= 1 && int32_t(logits.size()) == n_vocab, "beam search arguments");
    KVLM_ASSERT(backend.exact_forward_tokens() > 0, "beam search needs a batch-invariant backend");
    const int32_t prompt_len = int32_t(prompt_seq.tokens.size());
    // The hypotheses say when the search is done; the limits are decode()'s (no interrupt: a search prints only
    // at its end).
    const StopRule stop_rule(tokenizer, options.n_predict, engine.n_ctx(), nullptr);

    BeamResult result;
    if (stop_rule.emits_nothing()) {
        cache.release(prompt_seq);
        result.stop_reason = StopReason::token_limit;
        return result;
    }
    Hypotheses hypotheses(n_beams, options.length_penalty);
    // As HF: every beam starts as the prompt, all but the first at -1e9 so the first step draws from one.
    std::vector<Beam> beams(static_cast<size_t>(n_beams));
    for (int32_t b = 0; b < n_beams; b++) {
        beams[size_t(b)].seq = b + 1 < n_beams ? cache.fork(prompt_seq) : std::move(prompt_seq);
        beams[size_t(b)].score = b == 0 ? 0.0f : -1e9f;
    }
    std::vector<std::vector<float>> beam_logits(size_t(n_beams), logits);
    const int32_t n_keep = 2 * n_beams;
    // Each beam's own 2N best tokens (scored with its beam's sum): the step's 2N best are among them. The
    // first step's from the prompt's logits, the others' from forward_sequences (on the GPU, where the
    // logits are: only 2N scores per beam come back).
    std::vector<std::vector<TokenScore>> beam_best(size_t(n_beams), std::vector<TokenScore>(size_t(n_keep), {0, -1}));
    for (int32_t b = 0; b < n_beams; b++)
        best_tokens_cpu(logits.data(), n_vocab, beams[size_t(b)].score, n_keep, beam_best[size_t(b)].data());
    bool done = false;
    auto release_all = [&](std::vector<Beam>& list) {
        for (Beam& beam : list) cache.release(beam.seq);
    };
    try {
        for (int32_t step = 0; !done; step++) {
            const int32_t cur_len = step + 1;  // new tokens once this step's is appended (HF: cur_len - prompt)
            // The 2N best (beam, token) pairs, best first; equal scores in (beam, token) order.
            const std::vector<BeamCandidate> best = merge_beam_candidates(beam_best, n_keep);
            std::vector<Beam> next;
            std::vector<int32_t> next_tokens;
            for (int32_t rank = 0; rank < int32_t(best.size()) && int32_t(next.size()) < n_beams; rank++) {
                const int32_t token = best[size_t(rank)].token;
                const float score = best[size_t(rank)].score;
                const Beam& from = beams[size_t(best[size_t(rank)].beam)];
                if (tokenizer.is_end_of_generation(token)) {
                    if (rank >= n_beams) continue;  // not among the top N: not a hypothesis
                    std::vector<int32_t> tokens = from.tokens;
                    tokens.push_back(token);
                    hypotheses.add(std::move(tokens), score, cur_len, true);
                    continue;
                }
                Beam child;
                child.seq = cache.fork(from.seq);
                child.tokens = from.tokens;
                child.tokens.push_back(token);
                child.score = score;
                next.push_back(std::move(child));
                next_tokens.push_back(token);
            }
            KVLM_ASSERT(int32_t(next.size()) == n_beams, "beam search: fewer candidates than beams");
            done = hypotheses.done(best[0].score, cur_len);
            release_all(beams);
            beams = std::move(next);
            if (done) break;
            if (stop_rule.at_token_limit(cur_len)) {
                result.stop_reason = StopReason::token_limit;
                break;
            }
            if (stop_rule.context_full(beams[0].seq.table.n_tokens)) {
                result.stop_reason = StopReason::context_full;
                break;
            }
            // Every beam's new token through the model in one call; a shared last block is copied first.
            std::vector<Backend::SequenceInput> inputs(static_cast<size_t>(n_beams));
            for (int32_t b = 0; b < n_beams; b++) {
                Beam& beam = beams[size_t(b)];
                cache.reserve(beam.seq, beam.seq.table.n_tokens + 1);
                beam.seq.tokens.push_back(next_tokens[size_t(b)]);
                Backend::SequenceInput& in = inputs[size_t(b)];
                in.tokens = &beam.seq.tokens.back();
                in.n_tokens = 1;
                in.pos = beam.seq.table.n_tokens;
                in.table = &beam.seq.table;
                in.logits = beam_logits[size_t(b)].data();
                in.n_best = n_keep, in.best_base = beam.score, in.best = beam_best[size_t(b)].data();
            }
            result.peak_blocks = std::max(result.peak_blocks, engine.pool().n_used());
            backend.forward_sequences(inputs.data(), inputs.size());
            result.n_steps++;
            for (Beam& beam : beams) {
                beam.seq.table.n_tokens += 1;
                cache.commit(beam.seq);
            }
        }
    } catch (...) {
        release_all(beams);
        throw;
    }
    // Running beams become hypotheses too unless the search ended by the rule above.
    if (!done)
        for (Beam& beam : beams)
            hypotheses.add(beam.tokens, beam.score, int32_t(beam.tokens.size()), false);
    const int32_t longest = prompt_len + int32_t(beams[0].tokens.size());
    result.independent_blocks = n_beams * ((longest + block_size - 1) / block_size);
    release_all(beams);
    const Hypothesis& best = hypotheses.best();
    result.tokens = best.tokens;
    result.score = best.score;
    if (best.ended) result.stop_reason = StopReason::end_of_generation;
    else if (result.stop_reason == StopReason::none) result.stop_reason = StopReason::token_limit;
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
}

}  // namespace kvlm
