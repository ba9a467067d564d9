// ChatStore (chat_store.h): a chat session's K/V and transcript through session_run.h, its messages in
// chats/NAME.chat, written so that a crash leaves the previous or the new state.
#include "cli/chat_store.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "chat/chat_state.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace kvlm {

ChatStore::ChatStore(const SessionFlags& flags)
    : store_(session_store_dir(flags.dir)), quota_(session_quota_bytes(flags.quota)) {}

bool ChatStore::open(const std::string& name, Engine& engine, ChatSession& chat) {
    SessionStore::check_name(name);
    FileLock lock = name == name_ ? std::move(lock_) : store_.lock_session(name);
    Sequence seq;
    RestoredSession restored;
    try {
        restored = restore_session(engine, store_, name, seq);
        if (restored.existed) {
            std::string path;
            std::vector<uint8_t> state;
            if (!read_chat_state_file(store_, name, restored.transcript, &path, &state))
                throw_error("session '{}' is not a chat: it was saved by `kvlm run --session` without --chat, so it "
                            "has no messages ({} is missing); continue it with `kvlm run --session {}`, or use "
                            "another name",
                            name, state_path(name), name);
            load_chat_state(name, path, state, restored.transcript);  // a damaged file names the way out
            chat.adopt(seq, restored.transcript, state, path);
        }
    } catch (...) {
        engine.prefix_cache().release(seq);
        if (name == name_) lock_ = std::move(lock);
        throw;
    }
    for (const std::string& w : restored.warnings) std::fprintf(stderr, "kvlm: warning: %s\n", w.c_str());
    lock_ = std::move(lock);
    name_ = name;
    restored_ = std::move(restored);
    restored_.transcript.clear();
    return restored_.existed;
}

void ChatStore::check_loadable(const std::string& name, Engine& engine) const {
    SessionStore::check_name(name);
    if (!store_.has_session(name))
        throw_error("session '{}' does not exist in {}; the current conversation goes on (/save {} forks it under "
                    "that name)",
                    name, store_.dir(), name);
    SessionIdentity saved;
    try {
        saved = store_.load_manifest(name).identity;
    } catch (const Error&) {
        return;  // open() reports an unreadable manifest with the full explanation
    }
    std::string diff;
    if (saved.block_size != engine.pool().block_size())
        diff = fmt::format("block size {} (this chat: {})", saved.block_size, engine.pool().block_size());
    if (saved.kv_dtype != engine.kv_dtype())
        diff += fmt::format("{}KV cache {} (this chat: {})", diff.empty() ? "" : ", ", dtype_name(saved.kv_dtype),
                            dtype_name(engine.kv_dtype()));
    if (!diff.empty())
        throw_error("session '{}' was saved with {}, and this chat's KV cache was set up when it started; continue "
                    "it with `kvlm chat --session {}`, which takes the session's settings",
                    name, diff, name);
}

void ChatStore::save(Engine& engine, const ChatSession& chat, const std::string& name) {
    const std::string& target = name.empty() ? name_ : name;
    if (target.empty()) throw_error("/save: no session name (give one, or start with --session NAME)");
    SessionStore::check_name(target);
    FileLock other;
    RestoredSession fresh;
    RestoredSession& restored = target == name_ ? restored_ : fresh;
    if (target != name_) {
        other = store_.lock_session(target);
        fresh.existed = store_.has_session(target);
    }
    // The messages (chats/NAME.chat) and the manifest must describe the same transcript, but two files
    // cannot be replaced at once: the new messages go to NAME.chat.new first, the manifest second, and
    // the rename to NAME.chat last; open() takes .new when it matches the manifest. A failure before
    // the manifest is replaced leaves the previous state whole.
    std::vector<uint8_t> state = chat.encode_state();
    const std::string next = next_state_path(target);
    try {
        make_private_directories(store_.dir() + "/chats");
        write_file_atomic(next, state.data(), state.size(), next);
    } catch (const Error& e) {
        throw_error("cannot save session '{}' in {}: {}; the previous state of the session is intact and this "
                    "turn was not saved (free some disk space - `kvlm session gc --quota SIZE` shrinks the store, "
                    "`kvlm session rm NAME` drops a session - or choose another --session-dir)",
                    target, store_.dir(), e.what());
    }
    try {
        save_session(engine, store_, target, chat.sequence(), chat.transcript(), restored, quota_);
    } catch (...) {
        ::unlink(next.c_str());
        throw;
    }
    if (::rename(next.c_str(), state_path(target).c_str()) != 0)
        throw_error("session '{}': cannot rename {} to {}: {} (the session is saved; the next load uses {})",
                    target, next, state_path(target), std::strerror(errno), next);
    if (&restored == &restored_) {
        restored_.existed = true;
        restored_.bad_blocks.clear();
    }
}

LoadedChatTemplate chat_template_for_session(const Engine& engine, const std::string& flag, const SessionFlags& session) {
    if (!flag.empty() || !engine.model().metadata().chat_template.empty() || session.name.empty())
        return load_chat_template(engine, flag);
    SessionStore store(session_store_dir(session.dir));
    SessionStore::check_name(session.name);
    if (!store.has_session(session.name) || !store.has_chat_messages(session.name)) return load_chat_template(engine, flag);
    // Read without the session lock: open() reads (and checks) the state again under it.
    SessionManifest manifest = store.load_manifest(session.name);
    std::string path;
    std::vector<uint8_t> bytes;
    if (!read_chat_state_file(store, session.name, manifest.tokens, &path, &bytes)) return load_chat_template(engine, flag);
    ChatState state = load_chat_state(session.name, path, bytes, manifest.tokens);
    if (state.template_source.empty()) return load_chat_template(engine, flag);  // saved by an older kvlm
    try {
        return {ChatTemplate::parse(state.template_source), state.template_name, state.template_source, false};
    } catch (const Error& e) {
        throw_error("{}: its chat template ({}) does not parse: {}", path, state.template_name, e.what());
    }
}

ChatState load_chat_state(const std::string& name, const std::string& path, const std::vector<uint8_t>& bytes,
                          const std::vector<int32_t>& transcript) {
    try {
        return decode_chat_state_of(bytes, path, transcript);
    } catch (const Error& e) {
        // Nothing in the file can be trusted, so no flag continues the conversation; removing it always works.
        throw_error("session '{}' cannot be continued: its messages are damaged ({}); `kvlm session show {}` prints "
                    "its transcript, and `kvlm session rm {}` deletes it so that the name starts a new conversation",
                    name, e.what(), name, name);
    }
}

bool read_chat_state_file(const SessionStore& store, const std::string& name, const std::vector<int32_t>& transcript,
                          std::string* path, std::vector<uint8_t>* bytes) {
    // save() writes NAME.chat.new before the manifest and renames it over NAME.chat after: if it stopped in
    // between, .new is the state that matches the manifest (else it is stale).
    *path = store.chat_path(name) + ".new";
    if (read_whole_file(*path, bytes)) {
        try {
            decode_chat_state_of(*bytes, *path, transcript);
            return true;
        } catch (const Error&) {
        }
    }
    *path = store.chat_path(name);
    return read_whole_file(*path, bytes);
}

void check_continued_system_prompt(const ChatSession& chat, const std::string& requested, const std::string& name) {
    if (requested.empty() || requested == chat.system()) return;
    auto shown = [](const std::string& text) {
        if (text.empty()) return std::string("none");
        if (text.size() <= 60) return fmt::format("\"{}\"", text);
        size_t cut = 57;
        while (cut > 0 && (uint8_t(text[cut]) & 0xC0) == 0x80) cut--;  // not inside a UTF-8 character
        return fmt::format("\"{}...\"", text.substr(0, cut));
    };
    throw_error("session '{}' continues with its own system prompt ({}), and --system gives another ({}); drop "
                "--system to continue it, or start a new conversation under another --session name",
                name, shown(chat.system()), shown(requested));
}

}  // namespace kvlm
