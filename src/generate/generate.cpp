// The prefill + decode loop shared by run and chat, over the prefix cache.
#include "generate/generate.h"

#include <xxhash.h>

#include <chrono>

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

GenerationResult decode(Engine& engine, Sequence& seq, std::vector<float> logits, int32_t n_predict, Sampler& sampler,
                        const TextCallback& on_text, const std::atomic<bool>* cancel) {
    PrefixCache& cache = engine.prefix_cache();
    const Tokenizer& tokenizer = engine.tokenizer();
    const int32_t n_vocab = engine.model().config().n_vocab;
    const int32_t n_ctx = engine.n_ctx();
    KVLM_ASSERT(int32_t(logits.size()) == n_vocab, "decode needs the last token's logits");
    KVLM_ASSERT(!seq.tokens.empty(), "decode needs a prefilled sequence");
    GenerationResult result;

    // SentencePiece's dummy prefix puts a space before the first word; llama.cpp and llama2.c drop it
    // when the text starts right after BOS.
    const bool strip_space_after_bos = tokenizer.data().type == "spm" && tokenizer.data().add_space_prefix;
    Utf8StreamDecoder decoder;
    auto decode_start = Clock::now();
    Backend& backend = engine.backend();
    // Chains the step's logits into the -v hash (before the sampler penalizes them in place).
    auto hash_logits = [&] {
        result.logits_hash = XXH3_64bits_withSeed(logits.data(), logits.size() * sizeof(float), result.logits_hash);
    };
    // The first token comes from the prompt's logits (on the host); each later one from a decode step, which
    // a backend that samples on the device (CUDA) ends by picking the token there: only its id comes back,
    // and the hash chains the device's digest of the logits instead of their bytes.
    int32_t token = -1;
    if (n_predict != 0) hash_logits(), token = sampler.sample(logits.data(), n_vocab, seq.tokens);
    if (n_predict == 0) result.stop_reason = "token limit";
    for (int32_t step = 0; n_predict != 0; step++) {
        if (step == 0) result.first_token_seconds = seconds_since(decode_start);
        result.generated.push_back(token);
        result.has_pending_token = true;
        if (tokenizer.is_end_of_generation(token)) {
            result.stop_reason = "end of generation";
            break;
        }
        std::string bytes = tokenizer.decode_token(token);
        if (strip_space_after_bos && seq.tokens.back() == tokenizer.bos_id() && !bytes.empty() && bytes[0] == ' ')
            bytes.erase(0, 1);
        if (std::string text = decoder.push(bytes); !text.empty()) on_text(text);

        if (n_predict > 0 && step + 1 >= n_predict) {
            result.stop_reason = "token limit";
            break;
        }
        if (cancel && cancel->load()) {
            result.stop_reason = "interrupted";
            break;
        }
        if (seq.table.n_tokens >= n_ctx) {
            result.stop_reason = "context full";
            break;
        }
        try {
            cache.reserve(seq, seq.table.n_tokens + 1);
        } catch (const Error&) {
            result.stop_reason = "KV cache full";
            break;
        }
        const int32_t pos = seq.table.n_tokens;
        seq.tokens.push_back(token);  // the next step's penalty window includes it
        SampleRequest request;
        SampleOutcome next;
        try {
            request = sampler.device_request(seq.tokens, n_vocab);
            next = backend.decode_sample(token, pos, seq.table, request, logits.data());
        } catch (...) {
            seq.tokens.pop_back();
            throw;
        }
        seq.table.n_tokens += 1;
        result.has_pending_token = false;
        cache.commit(seq);
        // The next token (a bad logit throws with this token committed, wherever it was found).
        if (next.status == SampleOutcome::kNeedsHost) {
            hash_logits();
            token = sampler.sample(logits.data(), n_vocab, request, seq.tokens.size());
        } else {
            result.logits_hash =
                XXH3_64bits_withSeed(&next.logits_digest, sizeof(next.logits_digest), result.logits_hash);
            if (next.status == SampleOutcome::kBadLogit)
                throw_bad_logit(next.bad_is_nan, next.bad_index, seq.tokens.size());
            token = next.token;
        }
    }
    if (std::string tail = decoder.flush(); !tail.empty()) on_text(tail);
    result.decode_seconds = seconds_since(decode_start);
    result.transcript = seq.tokens;
    if (result.has_pending_token) result.transcript.push_back(result.generated.back());
    return result;
}

GenerationResult generate(Engine& engine, Sequence& seq, const std::vector<int32_t>& prompt, int32_t n_predict,
                          Sampler& sampler, const TextCallback& on_text, const std::atomic<bool>* cancel) {
    Prefill p = prefill(engine, seq, prompt, cancel);
    GenerationResult result = decode(engine, seq, std::move(p.logits), n_predict, sampler, on_text, cancel);
    result.n_prompt = p.n_prompt;
    result.n_reused = p.n_reused;
    result.n_prefilled = p.n_prefilled;
    result.prefill_seconds = p.seconds;
    result.first_token_seconds += p.seconds;
    return result;
}

}  // namespace kvlm
