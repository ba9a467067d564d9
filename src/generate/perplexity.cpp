// Chunked perplexity over the engine's backend (see perplexity.h). A chunk is one Sequence reserved through
// the prefix cache and released, without commit, as soon as its logits are out: no block is indexed or kept.
#include "generate/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>

#include "util/error.h"
#include "util/thread_pool.h"

namespace kvlm {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

double token_nll(const float* logits, int32_t n_vocab, int32_t token) {
    double max_logit = logits[0];
    for (int32_t i = 1; i < n_vocab; i++) max_logit = std::max(max_logit, double(logits[i]));
    double sum_exp = 0;
    for (int32_t i = 0; i < n_vocab; i++) sum_exp += std::exp(double(logits[i]) - max_logit);
    return std::log(sum_exp) + max_logit - double(logits[token]);
}

int32_t perplexity_chunk_count(int64_t n_tokens, int32_t n_ctx, int32_t max_chunks) {
    const int64_t n_whole = n_ctx > 0 ? n_tokens / n_ctx : 0;
    return int32_t(max_chunks < 0 ? std::min<int64_t>(n_whole, INT32_MAX) : std::min<int64_t>(max_chunks, n_whole));
}

void check_perplexity_args(int32_t n_ctx, int32_t max_chunks) {
    if (n_ctx < kMinPerplexityContext)
        throw_error("-c: {} is too small: a chunk of n tokens scores its last n - n/2 - 1, so at least {} are needed",
                    n_ctx, kMinPerplexityContext);
    if (max_chunks == 0 || max_chunks < -1)
        throw_error("--chunks: {} is not a chunk count (1 or more, or -1 for every chunk of the text)", max_chunks);
}

PerplexityResult perplexity(Engine& engine, const std::vector<int32_t>& tokens, const PerplexityParams& params,
                            const PerplexityProgress& progress) {
    const int32_t n_ctx = params.n_ctx;
    const int32_t n_vocab = engine.model().config().n_vocab;
    const int64_t n_tokens = int64_t(tokens.size());
    check_perplexity_args(n_ctx, params.max_chunks);
    if (n_ctx > engine.n_ctx())
        throw_error("-c: {} is larger than the engine's context of {} tokens", n_ctx, engine.n_ctx());
    if (n_ctx > engine.n_pool_tokens())
        throw_error("-c: {} tokens do not fit the KV pool ({} tokens)", n_ctx, engine.n_pool_tokens());
    if (n_tokens < 2 * int64_t(n_ctx)) {
        const int64_t largest = n_tokens / 2;
        throw_error("the text is {} tokens, too short for -c {}: perplexity needs at least 2 x {} = {} tokens ({})",
                    n_tokens, n_ctx, n_ctx, 2 * int64_t(n_ctx),
                    largest >= kMinPerplexityContext
                        ? fmt::format("-c {} or less would do", largest)
                        : fmt::format("give a text of at least {} tokens", 2 * kMinPerplexityContext));
    }
    for (int32_t id : tokens)
        if (id < 0 || id >= n_vocab) throw_error("token id {} is outside the vocabulary (0..{})", id, n_vocab - 1);

    PerplexityResult result;
    result.n_ctx = n_ctx;
    result.n_chunks = perplexity_chunk_count(n_tokens, n_ctx, params.max_chunks);
    const int32_t first = n_ctx / 2;
    const int32_t n_score = perplexity_scored_per_chunk(n_ctx);
    const int32_t bos = engine.tokenizer().data().add_bos ? engine.tokenizer().bos_id() : -1;
    PrefixCache& cache = engine.prefix_cache();
    Backend& backend = engine.backend();
    // A GPU scores where the logits are (only the scores come back); otherwise every logit comes here.
    // Scoring a 512-token chunk of a 49k vocabulary is 12.5M exps: little next to a CPU forward pass, so it
    // runs on every core (the backend's own threads are idle meanwhile).
    const bool on_device = backend.scores_on_device();
    ThreadPool scorers(
        on_device ? 1 : std::min(params.n_threads > 0 ? params.n_threads : available_cores(), available_cores()));
    std::vector<int32_t> chunk(size_t(n_ctx), 0);
    std::vector<float> logits(on_device ? 0 : size_t(n_ctx) * size_t(n_vocab));  // [n_ctx, n_vocab]
    std::vector<double> nlls(size_t(n_score), 0);                // [n_score] of the current chunk
    double nll = 0, nll2 = 0;  // sums over the scored tokens of NLL and NLL^2, added in token order
    const auto start = Clock::now();
    for (int32_t c = 0; c < result.n_chunks; c++) {
        std::copy_n(tokens.begin() + int64_t(c) * n_ctx, n_ctx, chunk.begin());
        if (bos >= 0) chunk[0] = bos;  // every chunk starts as a text does (llama-perplexity overwrites, too)
        Sequence seq;
        try {
            cache.reserve(seq, n_ctx);
            // nlls[i]: the logits at position first + i predict the token at first + i + 1.
            if (on_device)
                backend.forward_nll(chunk.data(), n_ctx, 0, seq.table, first, nlls.data());
            else
                backend.forward(chunk.data(), n_ctx, 0, seq.table, logits.data(), /*all_logits=*/true);
        } catch (...) {
            cache.release(seq);
            throw;
        }
        seq.table.n_tokens = n_ctx;
        cache.release(seq);

        if (!on_device)
            scorers.parallel_for(n_score, [&](int64_t begin, int64_t end) {
                for (int64_t i = begin; i < end; i++) {
                    const int64_t pos = first + i;
                    nlls[size_t(i)] = token_nll(logits.data() + size_t(pos) * n_vocab, n_vocab, chunk[size_t(pos) + 1]);
                }
            });
        for (int32_t i = 0; i < n_score; i++) {
            const double v = nlls[size_t(i)];
            if (!std::isfinite(v))
                throw_error(
                    "the model produced non-finite logits (chunk {}, position {}): the model file or "
                    "the backend is broken",
                    c + 1, first + i);
            nll += v;
            nll2 += v * v;
        }
        result.n_scored += n_score;
        result.running_ppl.push_back(std::exp(nll / double(result.n_scored)));
        if (progress) progress(c + 1, result.n_chunks, result.running_ppl.back());
    }
    result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    result.n_evaluated = int64_t(result.n_chunks) * n_ctx;

    const double n = double(result.n_scored);
    result.mean_nll = nll / n;
    result.ppl = std::exp(result.mean_nll);
    // The NLL's sample variance over the scored tokens, as the standard error of its mean, carried through
    // exp to first order (d ppl = ppl d nll).
    const double variance = nll2 / n - result.mean_nll * result.mean_nll;
    result.ppl_error = result.n_scored > 1 && variance > 0 ? result.ppl * std::sqrt(variance / (n - 1))
                                                           : std::numeric_limits<double>::quiet_NaN();
    return result;
}

}  // namespace kvlm
