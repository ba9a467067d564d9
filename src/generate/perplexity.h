// Perplexity of a token stream, llama.cpp's llama-perplexity method: the text's tokens are cut into
// chunks of n_ctx; each chunk runs through the model from position 0 (a fresh block table, its first token
// replaced by BOS when the model adds one) in one forward pass with every position's logits, and only its
// second half is scored: the logits at positions n_ctx/2 .. n_ctx-2 predict tokens n_ctx/2+1 .. n_ctx-1, so
// every scored token sees at least n_ctx/2 tokens of context. Log-softmax is taken in double.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/engine.h"

namespace kvlm {

// Smallest chunk that scores a token: n_ctx - n_ctx/2 - 1 >= 1.
constexpr int32_t kMinPerplexityContext = 3;

struct PerplexityResult {
    double ppl = 0;                   // exp(mean NLL) over every scored token
    double ppl_error = 0;             // llama-perplexity's +/-: ppl * sqrt(var(NLL) / (n - 1)); NaN when undefined
    double mean_nll = 0;              // natural log
    int32_t n_ctx = 0;                // chunk length
    int32_t n_chunks = 0;             // chunks evaluated
    int64_t n_scored = 0;             // n_chunks * perplexity_scored_per_chunk(n_ctx)
    int64_t n_evaluated = 0;          // tokens through the model: n_chunks * n_ctx
    std::vector<double> running_ppl;  // [n_chunks]: the estimate after each chunk
    double seconds = 0;               // forward passes and scoring, all chunks
};

// Tokens each chunk scores (the last n_ctx - n_ctx/2 - 1 of its positions).
inline int32_t perplexity_scored_per_chunk(int32_t n_ctx) { return n_ctx - n_ctx / 2 - 1; }

// Chunks a text of n_tokens is cut into: every whole chunk of n_ctx, at most max_chunks (-1: no limit).
int32_t perplexity_chunk_count(int64_t n_tokens, int32_t n_ctx, int32_t max_chunks);

// The checks perplexity() makes on its arguments alone (n_ctx at least kMinPerplexityContext, max_chunks 1
// or more, or -1), so a command can make them before loading a model; throws Error naming -c or --chunks.
void check_perplexity_args(int32_t n_ctx, int32_t max_chunks);

// Called after each chunk: chunks done (1-based), chunks planned, the running estimate.
using PerplexityProgress = std::function<void(int32_t n_done, int32_t n_chunks, double running_ppl)>;

struct PerplexityParams {
    int32_t n_ctx = 0;        // chunk length, at least kMinPerplexityContext
    int32_t max_chunks = -1;  // at most this many chunks (-1: every whole chunk of the text)
    int32_t n_threads = 0;    // threads scoring the logits between forward passes (0: every available core)
};

// Perplexity of `tokens` (the whole text, tokenized as a prompt: BOS first when the model adds one) in
// chunks of params.n_ctx. Throws Error, before any forward pass, for bad params (check_perplexity_args), an
// n_ctx above the engine's context or KV pool, a text of fewer than 2 * n_ctx tokens (llama-perplexity's rule;
// the message says which -c would do) or a token outside the vocabulary; and when the model produces
// non-finite logits. The figures do not depend on n_threads. The engine's pool ends as it started: each
// chunk's blocks are released, and nothing enters the prefix cache.
PerplexityResult perplexity(Engine& engine, const std::vector<int32_t>& tokens, const PerplexityParams& params,
                            const PerplexityProgress& progress = {});

// -log softmax(logits)[token] in double: log(sum exp(l - max)) + max - logits[token].
double token_nll(const float* logits, int32_t n_vocab, int32_t token);  // logits: [n_vocab]

}  // namespace kvlm
