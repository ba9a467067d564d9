// `kvlm run`: one-shot generation. stdout carries only the generated text, streamed; everything
// else (device choice, stats with --verbose, errors) goes to stderr.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>

#include "chat_template.h"
#include "cli.h"
#include "engine.h"
#include "error.h"
#include "generate.h"

namespace kvlm {

namespace {

std::string read_prompt(const RunOptions& options) {
    if (options.prompt_given) return options.prompt;
    if (isatty(STDIN_FILENO))
        throw_error("no prompt: pass -p TEXT or pipe the prompt on stdin (for a conversation use `kvlm chat`)");
    std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    // `echo text | kvlm run` adds one newline that is not part of the prompt.
    if (text.size() >= 2 && text.compare(text.size() - 2, 2, "\r\n") == 0) text.resize(text.size() - 2);
    else if (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
}

std::vector<int32_t> tokenize_prompt(const Engine& engine, const RunOptions& options, const std::string& prompt) {
    const Tokenizer& tokenizer = engine.tokenizer();
    if (options.chat) {
        const std::string& source = engine.model().metadata().chat_template;
        if (source.empty())
            throw_error("{}: the model has no chat template, so --chat cannot format the prompt",
                        engine.model().path());
        std::vector<ChatMessage> messages;
        if (!options.system.empty()) messages.push_back({"system", options.system});
        messages.push_back({"user", prompt});
        auto piece_or_empty = [&](int32_t id) { return id >= 0 ? tokenizer.piece(id) : std::string(); };
        std::string text = ChatTemplate::parse(source).render(messages, true, piece_or_empty(tokenizer.bos_id()),
                                                              piece_or_empty(tokenizer.eos_id()));
        std::vector<int32_t> ids = tokenizer.encode(text, /*add_bos=*/false, /*parse_special=*/true);
        // Templates that spell out bos_token already start with it; add it only where the model wants it.
        if (tokenizer.data().add_bos && tokenizer.bos_id() >= 0 && (ids.empty() || ids[0] != tokenizer.bos_id()))
            ids.insert(ids.begin(), tokenizer.bos_id());
        return ids;
    }
    if (!options.system.empty()) throw_error("--system needs --chat");
    if (prompt.empty()) {  // -p "": start from BOS alone
        if (tokenizer.bos_id() < 0) throw_error("empty prompt, and the model has no BOS token to start from");
        return {tokenizer.bos_id()};
    }
    return tokenizer.encode(prompt, /*add_bos=*/true, /*parse_special=*/true);
}

}  // namespace

int cmd_run(const RunOptions& options) {
    auto command_start = std::chrono::steady_clock::now();
    if (options.n_predict < -1) throw_error("-n: {} is not valid (use -1 for no limit)", options.n_predict);
    if (options.verbose && options.quiet) throw_error("--verbose and --quiet cannot be combined");
    std::string prompt = read_prompt(options);

    EngineOptions engine_options;
    engine_options.device = options.device;
    engine_options.n_threads = options.n_threads;
    engine_options.n_ctx = options.n_ctx;
    engine_options.block_size = options.block_size;
    engine_options.kv_mem_bytes = options.kv_mem.empty() ? 0 : parse_byte_size(options.kv_mem, "--kv-mem");
    engine_options.quiet = options.quiet;
    Engine engine(options.model_path, engine_options);

    std::vector<int32_t> prompt_ids = tokenize_prompt(engine, options, prompt);
    Sampler sampler(options.sampling);
    BlockTable table;
    std::vector<int32_t> history;
    bool wrote_newline_last = true;
    double setup_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - command_start).count();
    GenerationResult result = generate(engine, table, history, prompt_ids, options.n_predict, sampler,
                                       [&](const std::string& text) {
                                           std::fwrite(text.data(), 1, text.size(), stdout);
                                           std::fflush(stdout);
                                           wrote_newline_last = text.back() == '\n';
                                       });
    if (!wrote_newline_last && isatty(STDOUT_FILENO)) std::fputc('\n', stdout);
    std::fflush(stdout);

    int32_t n_generated = int32_t(result.generated.size());
    if (!options.quiet && (result.stop_reason == "context full" || result.stop_reason == "KV cache full"))
        std::fprintf(stderr, "kvlm: stopped after %d tokens: %s (context %d tokens; raise it with -c or --kv-mem)\n",
                     n_generated, result.stop_reason.c_str(), engine.n_ctx());
    if (options.verbose) {
        double decode_rate = result.decode_seconds > 0 ? (n_generated - 1) / result.decode_seconds : 0;
        std::fprintf(stderr,
                     "kvlm: load %.3f s | prompt %d tokens, prefill %.3f s (%.1f tok/s) | generated %d tokens, "
                     "decode %.1f tok/s | start to first token %.3f s | stop: %s\n",
                     engine.load_seconds(), result.n_prompt, result.prefill_seconds,
                     result.prefill_seconds > 0 ? result.n_prompt / result.prefill_seconds : 0.0, n_generated,
                     decode_rate, setup_seconds + result.first_token_seconds, result.stop_reason.c_str());
        std::fprintf(stderr, "kvlm: KV blocks used %d of %d (block size %d) | logits hash %016llx\n",
                     engine.pool().n_used(), engine.pool().n_blocks(), engine.pool().block_size(),
                     (unsigned long long)result.logits_hash);
    }
    release_table(engine.pool(), table);
    return 0;
}

}  // namespace kvlm
