// `kvlm perplexity -m MODEL -f FILE`: the model's perplexity on a text, llama-perplexity's way
// (generate/perplexity.h). stdout carries only the result ("PPL = X +/- Y", or JSON with --json); stderr the
// running estimate after each chunk ("[1]12.3456,[2]..."), a progress bar on a terminal, and the stats line.
#include "generate/perplexity.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "engine/engine.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/output.h"
#include "util/progress.h"

namespace kvlm {

namespace {

std::string read_text(const std::string& path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) throw_error("-f {}: is a directory, not a text file", path);
    std::vector<uint8_t> bytes;
    try {
        if (!read_whole_file(path, &bytes)) throw_error("-f {}: no such file", path);
    } catch (const Error& e) {
        throw_error("-f {}", e.what());  // "-f FILE: cannot open: Permission denied"
    }
    if (bytes.empty()) throw_error("-f {}: the file is empty", path);
    return std::string(bytes.begin(), bytes.end());
}

// "[1]12.3456,[2]11.9870," - llama-perplexity's running estimate, one entry per chunk.
std::string running_entry(int32_t chunk, double ppl) { return fmt::format("[{}]{:.4f},", chunk, ppl); }

}  // namespace

int cmd_perplexity(const PerplexityOptions& options) {
    const int32_t asked_ctx = options.n_ctx_given ? options.engine.n_ctx : kDefaultPerplexityContext;
    check_perplexity_args(asked_ctx, options.n_chunks);
    const std::string text = read_text(options.text_path);

    // The default chunk fits a model with a shorter context; an explicit -c beyond it is refused.
    const int32_t model_ctx = ModelFile::open(options.engine.model_path)->config().n_ctx;
    if (options.n_ctx_given && asked_ctx > model_ctx)
        throw_error("-c: {} is larger than the model's context of {} tokens", asked_ctx, model_ctx);
    const int32_t n_ctx = options.n_ctx_given ? asked_ctx : std::min(asked_ctx, model_ctx);
    check_perplexity_args(n_ctx, options.n_chunks);

    EngineOptions engine_options = to_engine_options(options.engine);
    engine_options.n_ctx = n_ctx;  // the pool holds exactly one chunk: each is released before the next
    engine_options.quiet = options.quiet;
    Engine engine(options.engine.model_path, engine_options);

    // As llama-perplexity: BOS when the model adds one, special-token text in the file stays plain text.
    const std::vector<int32_t> tokens = engine.tokenizer().encode(text, /*add_bos=*/true, /*parse_special=*/false);
    if (!options.quiet) warn_dropped_bytes(engine.tokenizer(), text, "the text");
    const int32_t n_chunks = perplexity_chunk_count(int64_t(tokens.size()), n_ctx, options.n_chunks);
    if (!options.quiet && int64_t(tokens.size()) >= 2 * int64_t(n_ctx))
        std::fprintf(stderr, "kvlm: perplexity of %s: %zu tokens, %d chunks of %d (the last %d of each scored)\n",
                     options.text_path.c_str(), tokens.size(), n_chunks, n_ctx, perplexity_scored_per_chunk(n_ctx));

    // On a terminal the bar carries the running estimate and the full list is printed at the end; elsewhere
    // (pipes, logs) each chunk's entry is written as it completes, as llama-perplexity does.
    const bool on_terminal = !options.quiet && isatty(STDERR_FILENO);
    auto bar = std::make_unique<ProgressBar>("perplexity", uint64_t(n_chunks), on_terminal, "chunks");
    PerplexityProgress progress = [&](int32_t n_done, int32_t, double running_ppl) {
        if (options.quiet) return;
        if (on_terminal) {
            bar->update(uint64_t(n_done), fmt::format("PPL {:.4f}", running_ppl));
        } else {
            std::fputs(running_entry(n_done, running_ppl).c_str(), stderr);
            std::fflush(stderr);
        }
    };
    PerplexityParams params;
    params.n_ctx = n_ctx;
    params.max_chunks = options.n_chunks;
    params.n_threads = options.engine.n_threads;
    const PerplexityResult result = perplexity(engine, tokens, params, progress);
    bar.reset();  // clears the bar's line

    const double tokens_per_second = result.seconds > 0 ? double(result.n_evaluated) / result.seconds : 0;
    if (!options.quiet) {
        std::string line;
        if (on_terminal)
            for (int32_t i = 0; i < result.n_chunks; i++) line += running_entry(i + 1, result.running_ppl[size_t(i)]);
        std::fprintf(stderr, "%s\n", line.c_str());
        std::fprintf(stderr, "kvlm: %lld tokens evaluated in %.2f s (%.1f tok/s, %s), %lld scored\n",
                     (long long)result.n_evaluated, result.seconds, tokens_per_second, engine.device_name().c_str(),
                     (long long)result.n_scored);
    }

    if (options.json) {
        nlohmann::json out = {{"ppl", result.ppl},         {"ppl_error", nullptr},
                              {"chunks", result.n_chunks}, {"tokens_scored", result.n_scored},
                              {"n_ctx", result.n_ctx},     {"tokens_evaluated", result.n_evaluated},
                              {"seconds", result.seconds}, {"tokens_per_second", tokens_per_second}};
        if (std::isfinite(result.ppl_error)) out["ppl_error"] = result.ppl_error;  // else null: too few tokens
        write_stdout(out.dump() + "\n");
    } else {
        write_stdout(fmt::format("PPL = {:.4f} +/- {:.5f}\n", result.ppl, result.ppl_error));
    }
    return 0;
}

}  // namespace kvlm
