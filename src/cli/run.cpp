// `kvlm run`: one-shot generation. stdout carries only the generated text, streamed; everything
// else (device choice, stats with --verbose, errors) goes to stderr.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <optional>

#include "chat/chat_session.h"
#include "cli/cli.h"
#include "engine/engine.h"
#include "generate/beam_search.h"
#include "generate/constrained.h"
#include "generate/generate.h"
#include "util/error.h"
#include "util/interrupt.h"
#include "util/output.h"

namespace kvlm {

namespace {

std::string read_prompt(const RunOptions& options) {
    if (options.prompt_given) return options.prompt;
    return read_piped_stdin("no prompt: pass -p TEXT or pipe the prompt on stdin (for a conversation use `kvlm chat`)");
}

std::vector<int32_t> tokenize_prompt(const Engine& engine, const RunOptions& options, const std::string& prompt) {
    const Tokenizer& tokenizer = engine.tokenizer();
    if (options.chat) {
        std::vector<ChatMessage> messages;
        if (!options.system.empty()) messages.push_back({"system", options.system});
        messages.push_back({"user", prompt});
        return first_chat_turn_tokens(engine, load_chat_template(engine, options.chat_template), messages,
                                      options.no_special);
    }
    if (!options.system.empty()) throw_error("--system needs --chat");
    if (!options.chat_template.empty()) throw_error("--chat-template needs --chat");
    if (prompt.empty()) {  // -p "": start from BOS alone
        if (tokenizer.bos_id() < 0) throw_error("empty prompt, and the model has no BOS token to start from");
        return {tokenizer.bos_id()};
    }
    std::vector<int32_t> ids = tokenizer.encode(prompt, /*add_bos=*/true, /*parse_special=*/!options.no_special);
    // A raw prompt that starts with the BOS token's own text (Llama 3's "<|begin_of_text|>...") gets no second
    // BOS: a doubled one changes what the model sees (llama.cpp only warns about it).
    const int32_t bos = tokenizer.bos_id();
    if (ids.size() >= 2 && tokenizer.data().add_bos && ids[0] == bos && ids[1] == bos) {
        ids.erase(ids.begin());
        if (options.verbose)
            std::fprintf(stderr, "kvlm: the prompt starts with the BOS token %s: no second one added\n",
                         tokenizer.data().tokens[size_t(bos)].c_str());
    }
    return ids;
}

// Stats of one completion on stderr (--verbose). `label` is "" for a single run, "sample i: " otherwise.
void print_stats(const Engine& engine, const GenerationResult& result, const std::string& label,
                 double setup_seconds, bool jump_forward = false) {
    int32_t n_generated = int32_t(result.generated.size());
    double decode_rate = result.decode_seconds > 0 ? (n_generated - 1) / result.decode_seconds : 0;
    std::fprintf(stderr,
                 "kvlm: %sload %.3f s | prompt %d tokens: %d reused from the pool, %d restored from disk, %d "
                 "prefilled in %.3f s (%.1f tok/s) | generated %d tokens, decode %.1f tok/s | start to first token "
                 "%.3f s | stop: %s\n",
                 label.c_str(), engine.load_seconds(), result.n_prompt, result.n_reused, result.n_restored,
                 result.n_prefilled, result.prefill_seconds,
                 result.prefill_seconds > 0 ? result.n_prefilled / result.prefill_seconds : 0.0, n_generated,
                 decode_rate, setup_seconds + result.first_token_seconds, stop_reason_text(result.stop_reason));
    if (result.constraint.n_sampled + result.constraint.n_forced > 0)
        std::fprintf(stderr, "kvlm: %s%s\n", label.c_str(),
                     describe_constraint_report(result.constraint, result.constraint.n_jumps > 0 || jump_forward).c_str());
    if (result.n_spec_forwards > 0 || result.n_drafted > 0)
        std::fprintf(stderr,
                     "kvlm: %sspeculation: %d verify forwards, %d tokens drafted, %d accepted (%.0f%%), %.2f tokens "
                     "per forward\n",
                     label.c_str(), result.n_spec_forwards, result.n_drafted, result.n_accepted,
                     result.n_drafted > 0 ? 100.0 * result.n_accepted / result.n_drafted : 0.0,
                     n_generated > 0 ? double(n_generated) / double(n_generated - result.n_accepted) : 0.0);
    if (std::string p = describe_probabilities(result, engine.tokenizer()); !p.empty())
        std::fprintf(stderr, "kvlm: %s%s\n", label.c_str(), p.c_str());
}

// A constrained output that stopped before it was a whole match (-n, a full context, Ctrl-C): an error on
// stderr (the partial text stays on stdout). Returns whether it was.
bool report_incomplete(const RunOptions& options, const GenerationResult& result, const std::string& label) {
    if (!options.constraint.constraint || result.constraint.satisfied) return false;
    std::fprintf(stderr, "kvlm: error: %sthe output is incomplete: generation stopped (%s) before it matched the %s\n",
                 label.c_str(), stop_reason_text(result.stop_reason), options.constraint.constraint->dfa().what().c_str());
    return true;
}

void print_pool_stats(Engine& engine, uint64_t logits_hash) {
    PrefixCacheStats cache = engine.prefix_cache().stats();
    std::fprintf(stderr,
                 "kvlm: KV blocks used %d of %d (block size %d) | prefix cache %d blocks, %lld hits, %lld evictions | "
                 "logits hash %016llx\n",
                 engine.pool().n_used(), engine.pool().n_blocks(), engine.pool().block_size(), cache.n_indexed,
                 (long long)cache.n_hit_blocks, (long long)cache.n_evictions, (unsigned long long)logits_hash);
}

// Generation cut short by a full context or KV pool says so on stderr: the text is never silently truncated.
void report_cut_short(Engine& engine, const GenerationResult& result, const std::string& label) {
    int32_t n_generated = int32_t(result.generated.size());
    if (result.stop_reason == StopReason::context_full)
        std::fprintf(stderr,
                     "kvlm: %sstopped after %d tokens: context full (%d tokens; %s)\n", label.c_str(), n_generated,
                     engine.n_ctx(), larger_context_advice(engine).c_str());
    else if (result.stop_reason == StopReason::kv_cache_full)
        std::fprintf(stderr,
                     "kvlm: %sstopped after %d tokens: KV cache full (the pool holds %lld tokens; raise --kv-mem)\n",
                     label.c_str(), n_generated, (long long)engine.n_pool_tokens());
}

// The prompt is prefilled once; each of the options.n_samples completions decodes on a fork of it (the
// last one on the prompt sequence itself), with its own sampler seeded seed + i. On stdout, completion i
// (1-based, i >= 2) is preceded by the delimiter "\n--- sample i ---\n".
// Whether --samples decode side by side (decode_samples: one forward per step for all of them): on a
// batch-invariant backend, without speculation, with -n bounding the blocks each holds (cmd_run sizes the pool).
bool samples_together(Engine& engine, const RunOptions& options) {
    return options.n_samples > 1 && options.n_predict >= 0 && options.spec.mode == SpecOptions::Mode::off &&
           !options.constraint.constraint && engine.backend().exact_forward_tokens() > 0;
}

// Returns the exit status: 1 when a constrained output is incomplete.
int run_samples(Engine& engine, const RunOptions& options, const std::vector<int32_t>& prompt_ids,
                double setup_seconds) {
    // cmd_run sizes the pool for the samples unless --kv-mem fixes it: then each sample decoding beside the
    // others needs a block of its own at least (its first token, or its copy of the prompt's last block), and a
    // count past the pool's blocks is refused before a fork is made (10^8 forks took minutes and gigabytes).
    if (samples_together(engine, options) && options.n_samples > engine.pool().n_blocks())
        throw_error(
            "--samples {}: the KV pool holds {} blocks ({} tokens) and each sample decoding beside the others "
            "needs one of its own at least; lower --samples or raise --kv-mem",
            options.n_samples, engine.pool().n_blocks(), (long long)engine.n_pool_tokens());
    PrefixCache& cache = engine.prefix_cache();
    Sequence prompt_seq;
    Prefill prompt = prefill(engine, prompt_seq, prompt_ids);
    bool wrote_newline_last = true;
    int status = 0;
    auto write_text = [&](const std::string& text) {
        write_stdout(text);
        wrote_newline_last = text.back() == '\n';
    };
    auto report = [&](int32_t i, GenerationResult& result) {
        // On a terminal the answer's line ends before any note on stderr follows it.
        if (!wrote_newline_last && isatty(STDOUT_FILENO)) write_text("\n");
        result.n_prompt = prompt.n_prompt;
        result.n_reused = i == 0 ? prompt.n_reused : prompt.n_prompt;  // later samples share the prefilled prompt
        result.n_prefilled = i == 0 ? prompt.n_prefilled : 0;
        result.prefill_seconds = i == 0 ? prompt.seconds : 0;
        result.first_token_seconds += result.prefill_seconds;
        std::string label = options.n_samples > 1 ? fmt::format("sample {}: ", i + 1) : "";
        if (!options.quiet) report_cut_short(engine, result, label);
        if (options.verbose) {
            print_stats(engine, result, label, setup_seconds, options.constraint.jump_forward);
            print_pool_stats(engine, result.logits_hash);
        }
        if (report_incomplete(options, result, label)) status = 1;
    };
    if (samples_together(engine, options)) {
        const size_t n = size_t(options.n_samples);
        std::vector<Sequence> seqs;
        for (size_t i = 0; i + 1 < n; i++) seqs.push_back(cache.fork(prompt_seq));
        seqs.push_back(std::move(prompt_seq));
        std::vector<Sampler> samplers;
        for (size_t i = 0; i < n; i++) {
            SamplingParams params = options.sampling;
            params.seed += uint64_t(i);
            samplers.emplace_back(params);
        }
        std::vector<Sequence*> seq_ptrs;
        std::vector<Sampler*> sampler_ptrs;
        for (size_t i = 0; i < n; i++) seq_ptrs.push_back(&seqs[i]), sampler_ptrs.push_back(&samplers[i]);
        // Printed in order, as one after another would: sample `shown` streams, later ones wait in `held`
        // until those before them are done.
        std::vector<std::string> held(n);
        size_t shown = 0;
        auto on_text = [&](size_t i, const std::string& text) {
            if (i == shown) write_text(text);
            else held[i] += text;
        };
        std::vector<GenerationResult> results;
        try {
            results = decode_samples(engine, seq_ptrs, prompt.logits, options.n_predict, sampler_ptrs, on_text);
        } catch (...) {
            for (Sequence& seq : seqs) cache.release(seq);
            throw;
        }
        for (size_t i = 0; i < n; i++) {
            if (i > 0) write_text(fmt::format("\n--- sample {} ---\n", i + 1));
            if (i > 0 && !held[i].empty()) write_text(held[i]);
            shown = i;
            report(int32_t(i), results[i]);
            cache.release(seqs[i]);
        }
        if (options.verbose) {  // each sample's decode rate above is over the whole batch's time
            size_t n_tokens = 0;
            for (const GenerationResult& r : results) n_tokens += r.generated.size();
            const double seconds = results.empty() ? 0 : results.front().decode_seconds;
            std::fprintf(stderr,
                         "kvlm: %zu samples side by side (one forward per step for all of them): %zu tokens in "
                         "%.3f s, %.1f tok/s in all\n",
                         n, n_tokens, seconds, seconds > 0 ? double(n_tokens) / seconds : 0.0);
        }
        if (!wrote_newline_last && isatty(STDOUT_FILENO)) write_stdout("\n");
        return status;
    }
    for (int32_t i = 0; i < options.n_samples; i++) {
        if (i > 0) write_text(fmt::format("\n--- sample {} ---\n", i + 1));
        bool last = i + 1 == options.n_samples;
        Sequence seq = last ? std::move(prompt_seq) : cache.fork(prompt_seq);
        SamplingParams params = options.sampling;
        params.seed += uint64_t(i);
        Sampler sampler(params);
        sampler.report_probabilities(options.verbose);
        GenerationResult result;
        try {
            result = decode(engine, seq, prompt.logits, options.n_predict, sampler, write_text, nullptr, &options.spec,
                            &options.constraint);
        } catch (...) {
            cache.release(seq);
            if (!last) cache.release(prompt_seq);
            throw;
        }
        report(i, result);
        cache.release(seq);
    }
    if (!wrote_newline_last && isatty(STDOUT_FILENO)) write_stdout("\n");
    return status;
}

// restore, generate, save (cli/session.cpp). The turn is never lost silently: Ctrl-C, or an output that
// fails (a closed pipe, a full disk), stops generation, and what was generated is saved and said so.
int run_with_session(Engine& engine, const RunOptions& options, const std::string& prompt,
                     const std::vector<int32_t>& prompt_ids, double setup_seconds) {
    const std::string& name = options.session.name;
    InterruptScope interrupts;
    // A closed pipe must not kill kvlm mid-turn: the write then fails with EPIPE, handled below.
    struct sigaction ignore {}, previous_pipe {};
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ignore, &previous_pipe);
    std::atomic<bool>& stop = interrupt_flag();
    std::optional<OutputError> output_error;
    bool newline_last = true;
    auto write_text = [&](const std::string& text) {
        if (output_error) return;
        try {
            write_stdout(text);
            newline_last = text.back() == '\n';
        } catch (const OutputError& e) {
            output_error = e;
            stop.store(true);
        }
    };
    GenerationResult result;
    try {
        result = options.chat ? run_chat_session_turn(engine, options, prompt, write_text, &stop)
                              : run_session_turn(engine, options, prompt, prompt_ids, write_text, &stop);
    } catch (const PrefillInterrupted& e) {
        std::fprintf(stderr, "kvlm: %s: nothing was generated, and session '%s' is unchanged\n", e.what(),
                     name.c_str());
        return 130;
    }
    sigaction(SIGPIPE, &previous_pipe, nullptr);
    const size_t n_generated = result.generated.size();
    if (output_error) {
        abandon_stdout();
        std::fprintf(stderr, "kvlm: stopped after %zu %s: %s; session '%s' was saved with them\n", n_generated,
                     n_generated == 1 ? "token" : "tokens", output_error->what(), name.c_str());
        return output_error->error_number == EPIPE ? 128 + SIGPIPE : 1;
    }
    if (!newline_last && isatty(STDOUT_FILENO)) write_stdout("\n");
    if (result.stop_reason == StopReason::interrupted) {
        std::fprintf(stderr, "kvlm: interrupted after %zu %s; session '%s' was saved with them\n", n_generated,
                     n_generated == 1 ? "token" : "tokens", name.c_str());
        return 130;
    }
    if (!options.quiet) report_cut_short(engine, result, "");
    if (options.verbose) {
        print_stats(engine, result, "", setup_seconds, options.constraint.jump_forward);
        print_pool_stats(engine, result.logits_hash);
    }
    return report_incomplete(options, result, "") ? 1 : 0;
}

}  // namespace

// --beams refuses what it cannot honour, naming it, before the model loads.
void check_beam_options(const RunOptions& options, const SpecOptions& spec) {
    if (options.n_beams < 1) throw_error("--beams: {} is not valid (need at least 1)", options.n_beams);
    if (options.n_beams == 1) {
        if (options.length_penalty != 1.0f) throw_error("--length-penalty is only used with --beams 2 or more");
        return;
    }
    if (options.n_predict < 0)
        throw_error("--beams needs -n N: the token limit bounds the KV memory the {} beams hold at once",
                    options.n_beams);
    if (!std::isfinite(options.length_penalty))
        throw_error("--length-penalty: {} is not a finite number", options.length_penalty);
    const char* other = !options.session.name.empty() ? "--session"
                        : options.chat                ? "--chat"
                        : options.n_samples > 1       ? "--samples"
                        : spec.mode != SpecOptions::Mode::off ? "--spec"
                        : options.constraint_flags.given()    ? "--json, --json-schema or --regex"
                                                              : nullptr;
    if (other) throw_error("--beams cannot be combined with {} (not supported yet)", other);
    SamplingSettings sampling = options.sampling_flags;
    if (sampling.temperature && *sampling.temperature == 0) sampling.temperature.reset();  // greedy beams anyway
    if (!sampling.empty())
        throw_error("--beams is deterministic (the likeliest hypotheses, as Hugging Face's num_beams without "
                    "sampling): drop the sampling flags ({})",
                    sampling.to_string());
}

// Beam search over the prompt; prints the best hypothesis's text at the end (a beam's lead can change until
// then), and with -v the steps and what the shared KV blocks saved.
int run_beams(Engine& engine, const RunOptions& options, const std::vector<int32_t>& prompt_ids) {
    if (engine.backend().exact_forward_tokens() < 1)
        throw_error("--beams needs a batch-invariant forward of several sequences, which {} does not have with this "
                    "model (use --device cpu)",
                    engine.backend().name());
    Sequence seq;
    Prefill prompt = prefill(engine, seq, prompt_ids);
    BeamOptions beam_options;
    beam_options.n_beams = options.n_beams;
    beam_options.length_penalty = options.length_penalty;
    beam_options.n_predict = options.n_predict;
    BeamResult beams = beam_search(engine, seq, prompt.logits, beam_options);
    const Tokenizer& tokenizer = engine.tokenizer();
    TokenTextStream text_stream(tokenizer);
    std::string text;
    int32_t previous = prompt_ids.empty() ? -1 : prompt_ids.back();
    for (int32_t token : beams.tokens) {
        text += text_stream.push(token, previous);
        previous = token;
    }
    text += text_stream.flush();
    if (!text.empty()) write_stdout(text);
    if (!text.empty() && text.back() != '\n' && isatty(STDOUT_FILENO)) write_stdout("\n");
    if (options.verbose)
        std::fprintf(stderr,
                     "kvlm: beam search: %d beams, %d steps in %.3f s (%.1f beam tokens/s) | best hypothesis %zu "
                     "tokens, score %.4f | KV blocks: %d at most, %d for %d separate caches | stop: %s\n",
                     options.n_beams, beams.n_steps, beams.seconds,
                     beams.seconds > 0 ? double(beams.n_steps) * options.n_beams / beams.seconds : 0.0,
                     beams.tokens.size(), beams.score, beams.peak_blocks, beams.independent_blocks, options.n_beams,
                     stop_reason_text(beams.stop_reason));
    else if (!options.quiet && beams.stop_reason == StopReason::context_full)
        std::fprintf(stderr, "kvlm: beam search stopped at the context's end (%d tokens)\n", engine.n_ctx());
    return 0;
}

std::unique_ptr<DraftModel> load_draft_model(const std::string& path, SpecOptions* spec, const Engine& target,
                                             const EngineOptions& target_options) {
    const bool draft_mode = spec->mode == SpecOptions::Mode::draft;
    if (draft_mode && path.empty())
        throw_error("--spec draft needs --draft-model SMALL.kvlm (a smaller model with the same vocabulary)");
    if (!draft_mode && !path.empty()) throw_error("--draft-model {} is only used with --spec draft", path);
    if (!draft_mode) return nullptr;
    EngineOptions options;
    // The draft model runs where the target does: a draft step on the CPU would cost more than the GPU
    // forwards it saves.
    options.device = target.device_name().rfind("cuda", 0) == 0 ? "cuda" : "cpu";
    options.n_threads = target_options.n_threads;
    options.n_ctx = target.n_ctx();
    options.kv_dtype_auto = true;
    options.quiet = true;
    auto draft = std::make_unique<DraftModel>(path, options, target.tokenizer());
    spec->drafter = draft.get();
    return draft;
}

int cmd_run(const RunOptions& options) {
    auto command_start = std::chrono::steady_clock::now();
    if (options.n_predict < -1) throw_error("-n: {} is not valid (use -1 for no limit)", options.n_predict);
    if (options.verbose && options.quiet) throw_error("--verbose and --quiet cannot be combined");
    if (options.n_samples < 1) throw_error("--samples: {} is not valid (need at least 1)", options.n_samples);
    SpecOptions spec = options.spec;
    parse_spec_mode(options.spec_mode, &spec);
    check_beam_options(options, spec);
    check_constraint_combinations(options.constraint_flags, spec);
    check_sampling_settings(options.sampling_flags);
    std::string prompt = read_prompt(options);

    EngineOptions engine_options = to_engine_options(options.engine, &options.session);
    // A fork writing past the prompt copies the prompt's shared last block: one block beyond the context. Samples
    // decoded together (samples_together: with -n) and beams hold their blocks at once: each past the first
    // needs room for its -n tokens and its copy of that block (the engine caps -n by the context).
    engine_options.n_spare_blocks = options.n_samples > 1 || options.n_beams > 1 ? 1 : 0;
    if (options.n_beams > 1) {
        engine_options.n_parallel_extra = options.n_beams - 1;
        engine_options.parallel_new_tokens = options.n_predict;
        engine_options.parallel_flag = fmt::format("--beams {}", options.n_beams);
    } else if (options.n_samples > 1 && options.n_predict >= 0) {
        engine_options.n_parallel_extra = options.n_samples - 1;
        engine_options.parallel_new_tokens = options.n_predict;
        engine_options.parallel_flag = fmt::format("--samples {}", options.n_samples);
    }
    engine_options.quiet = options.quiet;
    engine_options.verbose = options.verbose;
    Engine engine(options.engine.model_path, engine_options);
    RunOptions resolved = options;
    resolved.sampling = resolve_run_sampling(engine, options.sampling_flags, options.sampling.seed, options.verbose);
    const std::unique_ptr<DraftModel> draft_model = load_draft_model(options.draft_model, &spec, engine, engine_options);
    resolved.spec = spec;
    const std::unique_ptr<TokenConstraint> constraint = load_constraint(options.constraint_flags, engine, options.verbose);
    if (constraint)
        resolved.constraint = {constraint.get(), use_jump_forward(options.constraint_flags, engine, options.quiet)};

    // A chat session's turn is rendered against its saved messages (cli/session.cpp), not tokenized here.
    bool chat_session = options.chat && !options.session.name.empty();
    std::vector<int32_t> prompt_ids = chat_session ? std::vector<int32_t>{} : tokenize_prompt(engine, options, prompt);
    if (!options.quiet) {
        warn_dropped_bytes(engine.tokenizer(), prompt, "the prompt");
        warn_dropped_bytes(engine.tokenizer(), options.system, "--system");
    }
    double setup_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - command_start).count();
    if (!options.session.name.empty()) return run_with_session(engine, resolved, prompt, prompt_ids, setup_seconds);
    if (options.n_beams > 1) return run_beams(engine, resolved, prompt_ids);
    return run_samples(engine, resolved, prompt_ids, setup_seconds);
}

}  // namespace kvlm
