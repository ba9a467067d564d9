// `kvlm chat`: a conversation in the terminal (libedit prompt, Ctrl-C stops an answer) or over piped stdin
// (one message per line, or all of it with --single; no prompts or escape codes). Answers stream to stdout;
// everything else goes to stderr. The conversation logic is ChatSession; this file is I/O, slash
// commands and the --session store (chat_store.h).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <random>

#include "chat/chat_session.h"
#include "cli/chat_store.h"
#include "cli/cli.h"
#include "cli/line_editor.h"
#include "engine/engine.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/interrupt.h"
#include "util/output.h"

namespace kvlm {

namespace {

std::atomic<bool>& g_interrupt = interrupt_flag();

const char* kHelp =
    "/help               this list\n"
    "/stats              tokens and timings of the last answer and of the whole chat, KV blocks\n"
    "/reset              start a new conversation (same system prompt)\n"
    "/undo               drop the last exchange (the K/V before it is kept)\n"
    "/regenerate         answer the last message again\n"
    "/system TEXT        start a new conversation with this system prompt\n"
    "/save [NAME]        save the conversation as session NAME (default: the current --session)\n"
    "/load NAME          continue session NAME (it becomes the current session)\n"
    "/exit               quit (also Ctrl-D; Ctrl-C stops an answer)\n"
    "A line ending in \\ continues on the next line.\n";

struct Totals {
    int32_t n_answers = 0;
    int64_t n_reused = 0, n_restored = 0, n_prefilled = 0, n_generated = 0;
    int64_t n_drafted = 0, n_accepted = 0;  // --spec
    double prefill_seconds = 0, decode_seconds = 0;
};

std::string stats_text(Engine& engine, const GenerationResult& r) {
    int32_t n_generated = int32_t(r.generated.size());
    double rate = r.decode_seconds > 0 && n_generated > 1 ? (n_generated - 1) / r.decode_seconds : 0;
    return fmt::format(
        "prompt {} tokens: {} reused from the pool, {} restored from disk, {} prefilled ({:.1f} tok/s) | generated "
        "{} tokens, {:.1f} tok/s | first token {:.3f} s | KV blocks {} used, {} free{} | stop: {}",
        r.n_prompt, r.n_reused, r.n_restored, r.n_prefilled,
        r.prefill_seconds > 0 ? r.n_prefilled / r.prefill_seconds : 0.0, n_generated, rate, r.first_token_seconds,
        engine.pool().n_used(), engine.pool().n_blocks() - engine.pool().n_used(),
        r.probabilities.empty() ? "" : " | " + describe_probabilities(r, engine.tokenizer()), stop_reason_text(r.stop_reason)) +
           (r.n_spec_forwards > 0 || r.n_drafted > 0
                ? fmt::format(" | speculation: {} tokens drafted, {} accepted", r.n_drafted, r.n_accepted)
                : "") +
           (r.constraint.n_sampled + r.constraint.n_forced > 0
                ? fmt::format(" | constraint: {} tokens sampled, {} forced ({} jumps), masks {:.1f} ms{}",
                              r.constraint.n_sampled, r.constraint.n_forced, r.constraint.n_jumps,
                              r.constraint.mask_seconds * 1e3, r.constraint.satisfied ? "" : ", output incomplete")
                : "");
}

class ChatCli {
public:
    ChatCli(const ChatOptions& options, Engine& engine, ChatSession& chat, ChatStore* store)
        : options_(options),
          engine_(engine),
          chat_(chat),
          store_(store),
          interactive_(isatty(STDIN_FILENO)),
          answer_seeds_(options.sampling.seed) {}

    int run() {
        if (!interactive_) return run_piped();
        LineEditor editor(g_interrupt, options_.no_history ? "" : default_history_path());
        std::fprintf(stderr, "kvlm chat: /help for commands, Ctrl-D to exit\n");
        bool interrupted_last = false;
        for (;;) {
            std::string message, line;
            LineStatus status = editor.read_line("> ", &line);
            while (status == LineStatus::line && !line.empty() && line.back() == '\\') {
                line.pop_back();
                message += line + "\n";
                status = editor.read_line("... ", &line);
            }
            if (status == LineStatus::end_of_input) break;
            if (status == LineStatus::interrupted) {
                if (interrupted_last && message.empty()) break;
                interrupted_last = true;
                std::fprintf(stderr, "(Ctrl-C again or Ctrl-D to exit)\n");
                continue;
            }
            interrupted_last = false;
            message += line;
            if (message.empty()) continue;
            editor.add_history(message);
            if (!handle(message)) break;
        }
        finish();
        return 0;
    }

private:
    int run_piped() {
        if (options_.single) {
            std::string text;
            read_bounded(std::cin, &text, false, "the message on stdin");
            if (!text.empty() && text.back() == '\n') text.pop_back();
            if (!text.empty() && text.back() == '\r') text.pop_back();
            if (!text.empty()) handle(text);
        } else {
            std::string line, message;
            while (read_bounded(std::cin, &line, true, "a line on stdin")) {
                if (!line.empty() && line.back() == '\r') line.pop_back();
                if (!line.empty() && line.back() == '\\') {
                    line.pop_back();
                    message += line + "\n";
                    continue;
                }
                message += line;
                if (message.size() > kMaxPromptBytes)
                    throw_error("a message on stdin is larger than {} MiB, more text than any context holds",
                                kMaxPromptBytes >> 20);
                if (message.empty()) continue;
                bool go_on = handle(message);
                message.clear();
                if (!go_on) break;
            }
            if (!message.empty()) handle(message);
        }
        finish();
        return n_errors_ ? 1 : 0;
    }

    // Saves the conversation unless save_quietly already tried this very state of it (after an answer or
    // /undo): it is saved then, or its failure was reported, and a second try would only repeat the error.
    // What is left is state no save was tried for (/reset, /system, a restore that recomputed blocks).
    void finish() {
        if (store_ && !store_->name().empty() &&
            !(store_->name() == last_save_.name && chat_.encode_state() == last_save_.state))
            save_quietly();
        std::fflush(stdout);
    }

    void save_quietly() {
        last_save_ = {store_->name(), chat_.encode_state()};
        try {
            store_->save(engine_, chat_);
        } catch (const Error& e) {
            report(e.what());
        }
    }

    void report(const std::string& problem) {
        n_errors_++;
        std::fprintf(stderr, "kvlm: error: %s\n", problem.c_str());
    }

    void info(const std::string& text) { std::fprintf(stderr, "%s\n", text.c_str()); }

    // Returns false to exit.
    bool handle(const std::string& message) {
        if (message[0] != '/') {
            warn_dropped_bytes(engine_.tokenizer(), message, "the message");
            answer([&](Sampler& sampler, const TextCallback& on_text) {
                return chat_.send(message, options_.n_predict, sampler, on_text, &g_interrupt);
            });
            return true;
        }
        size_t space = message.find(' ');
        std::string command = message.substr(0, space);
        std::string argument = space == std::string::npos ? "" : message.substr(space + 1);
        try {
            if (command == "/exit" || command == "/quit") return false;
            if (command == "/help") {
                std::fputs(kHelp, stderr);
            } else if (command == "/stats") {
                print_stats();
            } else if (command == "/reset") {
                chat_.reset();
                info("(new conversation)");
            } else if (command == "/system") {
                warn_dropped_bytes(engine_.tokenizer(), argument, "the system prompt");
                chat_.reset(argument);
                info(argument.empty() ? "(new conversation without a system prompt)"
                                      : "(new conversation with this system prompt)");
            } else if (command == "/undo") {
                info(chat_.undo() ? "(dropped the last exchange)" : "(nothing to undo)");
                if (store_ && !store_->name().empty()) save_quietly();
            } else if (command == "/regenerate") {
                if (chat_.n_exchanges() == 0) throw_error("/regenerate: there is no answer to regenerate yet");
                if (options_.sampling.temperature <= 0)  // the model's default may be greedy (kvlm inspect)
                    info("(greedy decoding gives the same answer again: start kvlm chat with --temp 0.7 for "
                         "varied ones)");
                answer([&](Sampler& sampler, const TextCallback& on_text) {
                    return chat_.regenerate(options_.n_predict, sampler, on_text, &g_interrupt);
                });
            } else if (command == "/save") {
                if (!store_) throw_error("/save: sessions are not available");
                store_->save(engine_, chat_, argument);
                info(fmt::format("(saved session '{}')", argument.empty() ? store_->name() : argument));
            } else if (command == "/load") {
                if (argument.empty()) throw_error("/load needs a session name");
                store_->check_loadable(argument, engine_);
                store_->open(argument, engine_, chat_);
                info(fmt::format("(continuing session '{}': {} messages, {} tokens)", argument,
                                 chat_.messages().size(), chat_.transcript().size()));
            } else {
                throw_error("unknown command {} (/help lists them)", command);
            }
        } catch (const Error& e) {
            report(e.what());
        }
        return true;
    }

    template <typename Generate>
    void answer(const Generate& generate_reply) {
        bool newline_last = true;
        auto write_text = [&](const std::string& text) {
            write_stdout(text);
            newline_last = text.back() == '\n';
        };
        // Every answer (a /regenerate too) draws its own seed from the chat's stream, so sampled answers
        // differ from each other, and the same --seed replays the whole conversation.
        SamplingParams sampling = options_.sampling;
        sampling.seed = answer_seeds_();
        Sampler sampler(sampling);
        sampler.report_probabilities(options_.verbose);
        g_interrupt.store(false);
        GenerationResult result;
        try {
            result = generate_reply(sampler, write_text);
        } catch (const PrefillInterrupted&) {  // Ctrl-C before the first token: the conversation is as before
            g_interrupt.store(false);
            info("(stopped before the answer: the message was dropped)");
            return;
        } catch (const Error& e) {
            if (!newline_last) std::fputc('\n', stdout);
            report(e.what());
            return;
        }
        g_interrupt.store(false);
        if (!newline_last || interactive_) write_stdout("\n");
        last_ = result;
        totals_.n_answers++;
        totals_.n_reused += result.n_reused;
        totals_.n_restored += result.n_restored;
        totals_.n_prefilled += result.n_prefilled;
        totals_.n_generated += int64_t(result.generated.size());
        totals_.n_drafted += result.n_drafted;
        totals_.n_accepted += result.n_accepted;
        totals_.prefill_seconds += result.prefill_seconds;
        totals_.decode_seconds += result.decode_seconds;
        if (result.stop_reason == StopReason::interrupted) info("(stopped)");
        if (result.constraint.n_sampled + result.constraint.n_forced > 0 && !result.constraint.satisfied)
            info(fmt::format("kvlm: the answer stopped ({}) before it matched the constraint: it is incomplete",
                             stop_reason_text(result.stop_reason)));
        if (result.stop_reason == StopReason::context_full || result.stop_reason == StopReason::kv_cache_full)
            info(fmt::format("kvlm: the {} ({} tokens): the answer was cut off; /undo drops the last exchange, /reset "
                             "starts a new conversation",
                             result.stop_reason == StopReason::context_full ? "context is full" : "KV cache is full",
                             result.stop_reason == StopReason::context_full ? int64_t(engine_.n_ctx()) : engine_.n_pool_tokens()));
        if (options_.verbose) std::fprintf(stderr, "kvlm: %s\n", stats_text(engine_, result).c_str());
        if (store_ && !store_->name().empty()) save_quietly();
    }

    void print_stats() {
        if (totals_.n_answers == 0) {
            info("(no answers yet)");
        } else {
            info("last answer: " + stats_text(engine_, last_));
            info(fmt::format("chat: {} answers | prompt tokens: {} reused from the pool, {} restored from disk, {} "
                             "prefilled | generated {} tokens, {:.1f} tok/s",
                             totals_.n_answers, totals_.n_reused, totals_.n_restored, totals_.n_prefilled,
                             totals_.n_generated,
                             totals_.decode_seconds > 0 ? totals_.n_generated / totals_.decode_seconds : 0.0) +
                 (options_.spec.mode != SpecOptions::Mode::off
                      ? fmt::format(" | speculation: {} tokens drafted, {} accepted ({:.0f}%)", totals_.n_drafted,
                                    totals_.n_accepted,
                                    totals_.n_drafted > 0 ? 100.0 * double(totals_.n_accepted) / double(totals_.n_drafted)
                                                          : 0.0)
                      : ""));
        }
        info(fmt::format("conversation: {} messages, {} tokens of a {}-token context | KV blocks {} used, {} free "
                         "(block size {})",
                         chat_.messages().size(), chat_.transcript().size(), engine_.n_ctx(), engine_.pool().n_used(),
                         engine_.pool().n_blocks() - engine_.pool().n_used(), engine_.pool().block_size()));
    }

    const ChatOptions& options_;
    Engine& engine_;
    ChatSession& chat_;
    ChatStore* store_;
    bool interactive_;
    int32_t n_errors_ = 0;
    struct {
        std::string name;            // the session save_quietly last tried to save, "" = none yet
        std::vector<uint8_t> state;  // the conversation it tried to save (ChatSession::encode_state)
    } last_save_;
    GenerationResult last_;
    Totals totals_;
    std::mt19937_64 answer_seeds_;  // seeds of the answers, in order
};

}  // namespace

int cmd_chat(const ChatOptions& options) {
    if (options.n_predict < -1) throw_error("-n: {} is not valid (use -1 for no limit)", options.n_predict);
    check_sampling_settings(options.sampling_flags);
    if (!options.system.empty() && !options.system_file.empty())
        throw_error("--system and --system-file cannot be combined");
    ChatOptions parsed = options;
    parse_spec_mode(options.spec_mode, &parsed.spec);
    check_constraint_combinations(options.constraint_flags, parsed.spec);
    std::string system = options.system;
    if (!options.system_file.empty()) {
        std::vector<uint8_t> bytes;
        if (!read_whole_file(options.system_file, &bytes)) throw_error("--system-file: {} does not exist", options.system_file);
        system.assign(bytes.begin(), bytes.end());
        while (!system.empty() && (system.back() == '\n' || system.back() == '\r')) system.pop_back();
    }

    EngineOptions engine_options = to_engine_options(options.engine, &options.session);
    // Room to copy-on-write a shared last block after /undo or /load.
    engine_options.n_spare_blocks = 1;
    engine_options.quiet = !options.verbose;
    engine_options.verbose = options.verbose;
    Engine engine(options.engine.model_path, engine_options);
    ChatOptions resolved = parsed;
    resolved.sampling = resolve_run_sampling(engine, options.sampling_flags, options.sampling.seed, options.verbose);
    ChatSession chat(engine, chat_template_for_session(engine, options.chat_template, options.session), system);
    chat.set_plain_message_text(options.no_special);
    if (resolved.spec.mode != SpecOptions::Mode::off) check_speculation_backend(engine);  // before the first answer
    const std::unique_ptr<DraftModel> draft_model =
        load_draft_model(options.draft_model, &resolved.spec, engine, engine_options);
    chat.set_speculation(resolved.spec);
    const std::unique_ptr<TokenConstraint> constraint = load_constraint(options.constraint_flags, engine, options.verbose);
    if (constraint)
        chat.set_constraint({constraint.get(), use_jump_forward(options.constraint_flags, engine, !options.verbose)});
    warn_dropped_bytes(engine.tokenizer(), system, "the system prompt");

    ChatStore store(options.session);
    if (!options.session.name.empty()) {
        if (store.open(options.session.name, engine, chat))
            check_continued_system_prompt(chat, system, options.session.name);
        if (!chat.transcript().empty())
            std::fprintf(stderr, "kvlm: continuing session '%s': %zu messages, %zu tokens\n",
                         options.session.name.c_str(), chat.messages().size(), chat.transcript().size());
    }

    // On a terminal Ctrl-C stops an answer (or the prompt's prefill) and the chat goes on; piped, it ends kvlm.
    std::optional<InterruptScope> interrupts;
    if (isatty(STDIN_FILENO)) interrupts.emplace();
    ChatCli cli(resolved, engine, chat, &store);
    return cli.run();
}

}  // namespace kvlm
