// `kvlm session ls | show | rm | verify | gc | pin | unpin` and the session side of `kvlm run --session`:
// lock, restore, prefill only what the pool lacks, generate, save (with --chat: through a ChatSession).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>

#include "chat/chat_session.h"
#include "chat/chat_state.h"
#include "cli/chat_store.h"
#include "cli/cli.h"
#include "engine/engine.h"
#include "format/model_file.h"
#include "generate/generate.h"
#include "session/session_run.h"
#include "session/session_store.h"
#include "tokenizer/tokenizer.h"
#include "util/byte_size.h"
#include "util/error.h"

namespace kvlm {

namespace {

std::string time_text(int64_t unix_seconds) {
    std::time_t t = std::time_t(unix_seconds);
    std::tm tm{};
    localtime_r(&t, &tm);
    char buffer[32];
    std::strftime(buffer, sizeof(buffer), "%Y-%m-%d %H:%M:%S", &tm);
    return buffer;
}

int session_ls(SessionStore& store) {
    std::vector<SessionInfo> sessions = store.list();
    if (sessions.empty()) {
        bool exists = ::access(store.dir().c_str(), F_OK) == 0;
        std::printf("no sessions in %s%s\n", store.dir().c_str(), exists ? "" : " (the directory does not exist yet)");
        return 0;
    }
    std::printf("%-24s %8s %8s %10s  %-19s %s\n", "NAME", "TOKENS", "IN KV", "SIZE", "LAST USED", "");
    for (const SessionInfo& s : sessions) {
        if (!s.readable) {
            std::printf("%-24s unreadable: %s\n", s.name.c_str(), s.problem.c_str());
            continue;
        }
        const SessionManifest& m = s.manifest;
        std::string notes = store.has_chat_messages(s.name) ? "chat" : "";
        if (m.pinned) notes += notes.empty() ? "pinned" : ", pinned";
        if (s.n_blocks_present < int32_t(m.blocks.size()))
            notes += fmt::format("{}{} of {} blocks missing", notes.empty() ? "" : ", ",
                                 m.blocks.size() - size_t(s.n_blocks_present), m.blocks.size());
        std::printf("%-24s %8zu %8d %10s  %-19s %s\n", s.name.c_str(), m.tokens.size(), m.n_kv_tokens,
                    byte_size_display(s.bytes, 1).c_str(), time_text(m.last_used_unix).c_str(), notes.c_str());
    }
    std::printf("total %s in %s\n", byte_size_display(store.total_bytes(), 1).c_str(), store.dir().c_str());
    return 0;
}

// A chat session's template and messages (the state file read_chat_state_file picks for the manifest's
// transcript), one message per line with continuation lines indented.
void print_chat_state(const SessionStore& store, const std::string& name, const SessionManifest& manifest) {
    std::string path;
    std::vector<uint8_t> bytes;
    if (!read_chat_state_file(store, name, manifest.tokens, &path, &bytes)) return;
    ChatState state;
    try {
        state = decode_chat_state_of(bytes, path, manifest.tokens);
    } catch (const Error& e) {
        std::printf("chat:      unreadable: %s\n", e.what());
        return;
    }
    std::printf("chat:      %zu messages, template %s\n", state.messages.size(),
                state.template_name.empty() ? "not recorded (saved by an older kvlm)" : state.template_name.c_str());
    std::printf("messages:\n");
    for (const ChatMessage& m : state.messages) {
        std::string text = m.content;
        for (size_t at = text.find('\n'); at != std::string::npos; at = text.find('\n', at + 5))
            text.replace(at, 1, "\n    ");
        std::printf("  %s: %s\n", m.role.c_str(), text.c_str());
    }
}

int session_show(SessionStore& store, const SessionOptions& options) {
    SessionManifest m = store.load_manifest(options.name);
    const SessionIdentity& id = m.identity;
    // The model first: one that cannot be opened is an error before anything is printed.
    std::unique_ptr<ModelFile> model = options.model_path.empty() ? nullptr : ModelFile::open(options.model_path);
    std::unique_ptr<Tokenizer> tokenizer = model ? std::make_unique<Tokenizer>(model->metadata().tokenizer) : nullptr;
    std::printf("session:   %s\n", options.name.c_str());
    std::printf("model:     %s\n", model_text(id).c_str());
    std::printf("KV:        %s, %d layers x %d KV heads x head_dim %d, block size %d\n", dtype_name(id.kv_dtype),
                id.n_layers, id.n_kv_heads, id.head_dim, id.block_size);
    std::printf("RoPE:      theta %g, scaling %s (factor %g)\n", id.rope_theta, id.rope_scaling.type.c_str(),
                id.rope_scaling.factor);
    std::printf("tokens:    %zu (%d with K/V in %zu blocks)\n", m.tokens.size(), m.n_kv_tokens, m.blocks.size());
    std::printf("created:   %s\nlast used: %s\npinned:    %s\n", time_text(m.created_unix).c_str(),
                time_text(m.last_used_unix).c_str(), m.pinned ? "yes" : "no");
    std::string ids;
    for (size_t i = 0; i < m.tokens.size(); i++) ids += (i ? " " : "") + std::to_string(m.tokens[i]);
    print_chat_state(store, options.name, m);
    std::printf("token ids: %s\n", ids.c_str());
    if (!model) {
        std::printf("(pass -m MODEL to see the text)\n");
        return 0;
    }
    if (model->fingerprint() != id.model_fingerprint)
        std::fprintf(stderr, "kvlm: warning: %s is not the model this session was saved with\n",
                     options.model_path.c_str());
    std::string text;
    for (int32_t t : m.tokens)
        if (t >= 0 && t < tokenizer->n_vocab()) text += tokenizer->decode_token(t);
    std::printf("text:\n%s\n", text.c_str());
    return 0;
}

// The chat messages of every chat session verify checks (the store below knows nothing of chats).
void verify_chat_states(const SessionStore& store, const std::string& only, VerifyReport* report) {
    for (const std::string& name : only.empty() ? store.session_names() : std::vector<std::string>{only}) {
        if (!store.has_chat_messages(name)) continue;
        SessionManifest manifest;
        try {
            manifest = store.load_manifest(name);
        } catch (const Error&) {
            continue;  // the block check reports an unreadable manifest
        }
        std::string path;
        std::vector<uint8_t> bytes;
        if (!read_chat_state_file(store, name, manifest.tokens, &path, &bytes)) continue;
        try {
            decode_chat_state_of(bytes, path, manifest.tokens);
        } catch (const Error& e) {
            report->problems.push_back(fmt::format("{}: chat messages: {} (`kvlm session rm {}` deletes the session)",
                                                   name, e.what(), name));
        }
    }
}

int session_verify(SessionStore& store, const std::string& name) {
    VerifyReport report = store.verify(name);
    verify_chat_states(store, name, &report);
    for (const std::string& p : report.problems) std::printf("%s\n", p.c_str());
    for (const std::string& note : report.notes) std::printf("%s\n", note.c_str());
    std::string verdict = report.problems.empty() ? "no damage" : fmt::format("{} problem(s)", report.problems.size());
    if (!report.notes.empty()) verdict += fmt::format(", {} session(s) with evicted blocks", report.notes.size());
    std::printf("%d session(s), %d block(s) checked: %s\n", report.n_sessions, report.n_blocks_checked,
                report.problems.empty() && report.notes.empty() ? "all ok" : verdict.c_str());
    return report.problems.empty() ? 0 : 1;  // evicted blocks are not damage
}

}  // namespace

int cmd_session(const SessionOptions& options) {
    SessionStore store(session_store_dir(options.dir));
    const std::string& a = options.action;
    bool needs_name = a == "show" || a == "rm" || a == "pin" || a == "unpin";
    if (needs_name && options.name.empty()) throw_error("kvlm session {}: NAME is required", a);
    if (!options.name.empty()) SessionStore::check_name(options.name, SessionStore::NameUse::existing);
    if (a == "ls") return session_ls(store);
    if (a == "show") return session_show(store, options);
    if (a == "verify") return session_verify(store, options.name);
    if (a == "rm") {
        RemoveReport r = store.remove(options.name);
        std::string what;
        for (const std::string& f : r.files) what += (what.empty() ? "" : ", ") + f.substr(store.dir().size() + 1);
        what += fmt::format("{}{} block file(s) no other session uses", what.empty() ? "" : " and ",
                            r.n_blocks_removed);
        std::fprintf(stderr, "removed session '%s' from %s: %s; freed %s\n", options.name.c_str(), store.dir().c_str(),
                     what.c_str(), byte_size_display(r.bytes_freed, 1).c_str());
        return 0;
    }
    if (a == "pin" || a == "unpin") {
        FileLock lock = store.lock_session(options.name);
        SessionManifest m = store.load_manifest(options.name);
        m.pinned = a == "pin";
        store.write_manifest(options.name, m);
        return 0;
    }
    if (a == "gc") {
        uint64_t quota = options.quota.empty() ? 0 : parse_byte_size(options.quota, "--quota");
        GcReport r = store.collect(nullptr, quota);
        std::printf("removed %d unreferenced file(s), evicted %d block(s) for the quota, freed %s; store is now %s\n",
                    r.n_removed, r.n_evicted, byte_size_display(r.bytes_freed, 1).c_str(), byte_size_display(r.bytes_after, 1).c_str());
        return 0;
    }
    throw_error("kvlm session: unknown action '{}'", a);
}

GenerationResult run_session_turn(Engine& engine, const RunOptions& options, const std::string& prompt,
                                  const std::vector<int32_t>& fresh_prompt_ids, const TextCallback& on_text,
                                  const std::atomic<bool>* cancel) {
    if (options.n_samples != 1) throw_error("--samples with --session is not supported");
    using Clock = std::chrono::steady_clock;
    auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
    const auto turn_start = Clock::now();  // "start to first token" counts the lock and the restore too
    const std::string& name = options.session.name;
    SessionStore store(session_store_dir(options.session.dir));
    if (store.has_chat_messages(name))
        throw_error("session '{}' is a chat (saved by `kvlm chat` or `kvlm run --chat`): continue it with --chat, "
                    "so the prompt is its next message; text appended as-is would not match its messages",
                    name);
    uint64_t quota = session_quota_bytes(options.session.quota);
    FileLock lock = store.lock_session(name);  // held until the save is done

    Sequence seq;
    auto restore_start = Clock::now();
    RestoredSession restored = restore_session(engine, store, name, seq);
    double restore_seconds = seconds_since(restore_start);
    for (const std::string& w : restored.warnings) std::fprintf(stderr, "kvlm: warning: %s\n", w.c_str());
    PrefixCache& cache = engine.prefix_cache();
    GenerationResult result;
    try {
        // A continuation appends the new text as-is (no BOS); the first turn tokenizes like a plain run.
        std::vector<int32_t> new_ids =
            restored.existed ? engine.tokenizer().encode(prompt, /*add_bos=*/false, /*parse_special=*/!options.no_special)
                             : fresh_prompt_ids;
        if (restored.existed) check_session_fits(engine, name, restored.transcript.size(), new_ids.size());
        std::vector<int32_t> prompt_ids = tokens_to_prefill(engine, seq, restored, new_ids);
        int32_t n_restored = seq.table.n_tokens;
        Sampler sampler(options.sampling);
        sampler.report_probabilities(options.verbose);
        const double before_generate = seconds_since(turn_start);
        result = generate(engine, seq, prompt_ids, options.n_predict, sampler, on_text, cancel, &options.spec,
                          &options.constraint);
        result.first_token_seconds += before_generate;
        result.n_restored = n_restored;
        result.n_prompt += n_restored;
        auto save_start = Clock::now();
        const SavedBlocks saved = save_session(engine, store, name, seq, result.transcript, restored, quota);
        if (options.verbose) {  // the figures bench/sessions.sh reports
            // The KV read from disk: a partial block's file holds its tokens' rows only.
            const double restored_mib = double(n_restored) *
                                        double(kv_bytes_per_token(engine.model().config(), engine.kv_dtype())) /
                                        (1024.0 * 1024.0);
            std::fprintf(stderr,
                         "kvlm: session %s: restored %d tokens (%.2f MiB of KV) in %.4f s (%.2f GB/s; %zu block files "
                         "read); saved %d new block files (%.2f MiB) in %.4f s\n",
                         name.c_str(), n_restored, restored_mib, restore_seconds,
                         restore_seconds > 0 ? restored_mib * 1048576.0 / 1e9 / restore_seconds : 0.0,
                         restored.n_blocks_read, saved.n_files,
                         double(saved.n_bytes) / (1024.0 * 1024.0), seconds_since(save_start));
        }
    } catch (...) {
        cache.release(seq);
        throw;
    }
    cache.release(seq);
    return result;
}

GenerationResult run_chat_session_turn(Engine& engine, const RunOptions& options, const std::string& message,
                                       const TextCallback& on_text, const std::atomic<bool>* cancel) {
    if (options.n_samples != 1) throw_error("--samples with --session is not supported");
    const auto turn_start = std::chrono::steady_clock::now();  // "start to first token" counts the restore too
    const std::string& name = options.session.name;
    ChatSession chat(engine, chat_template_for_session(engine, options.chat_template, options.session),
                     options.system);
    chat.set_context_full_advice(
        engine.n_ctx() < engine.model().config().n_ctx
            ? fmt::format("the session is unchanged: continue it with a larger -c (up to the model's {}), or start "
                          "a new conversation under another --session name",
                          engine.model().config().n_ctx)
            : "the session is unchanged and holds the model's whole context: start a new conversation under another "
              "--session name");
    chat.set_plain_message_text(options.no_special);
    chat.set_speculation(options.spec);
    chat.set_constraint(options.constraint);
    ChatStore store(options.session);
    if (store.open(name, engine, chat)) check_continued_system_prompt(chat, options.system, name);
    Sampler sampler(options.sampling);
    sampler.report_probabilities(options.verbose);
    const double before_send =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - turn_start).count();
    GenerationResult result = chat.send(message, options.n_predict, sampler, on_text, cancel);
    result.first_token_seconds += before_send;
    store.save(engine, chat);
    return result;
}

}  // namespace kvlm
