// The prefill + decode loop shared by run and chat.
#include "generate.h"

#include <xxhash.h>

#include <chrono>

#include "error.h"

namespace kvlm {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

GenerationResult generate(Engine& engine, BlockTable& table, std::vector<int32_t>& history,
                          const std::vector<int32_t>& prompt, int32_t n_predict, Sampler& sampler,
                          const TextCallback& on_text) {
    const Tokenizer& tokenizer = engine.tokenizer();
    const int32_t n_vocab = engine.model().config().n_vocab;
    const int32_t n_ctx = engine.n_ctx();
    GenerationResult result;
    auto start = Clock::now();

    if (prompt.empty()) throw_error("the prompt is empty and the model has no BOS token to start from");
    if (int64_t(table.n_tokens) + int64_t(prompt.size()) > n_ctx)
        throw_error("the prompt is {} tokens{}, more than the context of {} tokens (raise it with -c, up to the "
                    "model's {}, or shorten the prompt)",
                    prompt.size(), table.n_tokens ? fmt::format(" on top of {} already in context", table.n_tokens) : "",
                    n_ctx, engine.model().config().n_ctx);
    for (int32_t id : prompt)
        if (id < 0 || id >= n_vocab) throw_error("prompt token id {} is outside the vocabulary (0..{})", id, n_vocab - 1);

    std::vector<float> logits(static_cast<size_t>(n_vocab));
    reserve_tokens(engine.pool(), table, table.n_tokens + int32_t(prompt.size()));
    engine.backend().forward(prompt.data(), int32_t(prompt.size()), table.n_tokens, table, logits.data());
    table.n_tokens += int32_t(prompt.size());
    history.insert(history.end(), prompt.begin(), prompt.end());
    result.n_prompt = int32_t(prompt.size());
    result.prefill_seconds = seconds_since(start);

    // SentencePiece's dummy prefix puts a space before the first word; llama.cpp and llama2.c drop it
    // when the text starts right after BOS.
    const bool strip_space_after_bos = tokenizer.data().type == "spm" && tokenizer.data().add_space_prefix;
    Utf8StreamDecoder decoder;
    auto decode_start = Clock::now();
    if (n_predict == 0) result.stop_reason = "token limit";
    for (int32_t step = 0; n_predict != 0; step++) {
        result.logits_hash = XXH3_64bits_withSeed(logits.data(), logits.size() * sizeof(float), result.logits_hash);
        int32_t token = sampler.sample(logits.data(), n_vocab, history);
        if (step == 0) result.first_token_seconds = seconds_since(start);
        result.generated.push_back(token);
        if (tokenizer.is_end_of_generation(token)) {
            result.stop_reason = "end of generation";
            break;
        }
        std::string bytes = tokenizer.decode_token(token);
        if (strip_space_after_bos && history.back() == tokenizer.bos_id() && !bytes.empty() && bytes[0] == ' ')
            bytes.erase(0, 1);
        history.push_back(token);
        if (std::string text = decoder.push(bytes); !text.empty()) on_text(text);

        if (n_predict > 0 && step + 1 >= n_predict) {
            result.stop_reason = "token limit";
            break;
        }
        if (table.n_tokens >= n_ctx) {
            result.stop_reason = "context full";
            break;
        }
        try {
            reserve_tokens(engine.pool(), table, table.n_tokens + 1);
        } catch (const Error&) {
            result.stop_reason = "KV cache full";
            break;
        }
        engine.backend().forward(&token, 1, table.n_tokens, table, logits.data());
        table.n_tokens += 1;
    }
    if (std::string tail = decoder.flush(); !tail.empty()) on_text(tail);
    result.decode_seconds = seconds_since(decode_start);
    return result;
}

}  // namespace kvlm
