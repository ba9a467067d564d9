// The session store side of a chat (`kvlm chat --session`, `kvlm run --chat --session`): a chat session is
// a run session (transcript + K/V, session_run.h) plus its messages in chats/NAME.chat, bound to the
// transcript by hash. The current session's lock is held while it is current.
#pragma once
#include <string>

#include "chat/chat_session.h"
#include "chat/chat_state.h"
#include "cli/cli.h"
#include "engine/engine.h"
#include "session/session_run.h"
#include "session/session_store.h"
#include "util/file_lock.h"

namespace kvlm {

class ChatStore {
public:
    explicit ChatStore(const SessionFlags& flags);

    const std::string& name() const { return name_; }
    // Makes `name` current; if it exists, loads it into `chat` (transactional: on error nothing changes) and
    // returns true. A session saved by a plain `kvlm run --session` (no messages) is refused.
    bool open(const std::string& name, Engine& engine, ChatSession& chat);

    // For /load: a session that does not exist is refused (a load never starts a new one). The pool's block
    // size and KV type are fixed when the chat starts, so a session saved with others is refused, saying
    // that `kvlm chat --session NAME` (which takes its settings) continues it.
    void check_loadable(const std::string& name, Engine& engine) const;

    // Saves `chat` as `name` ("" = the current session).
    void save(Engine& engine, const ChatSession& chat, const std::string& name = "");

private:
    std::string state_path(const std::string& name) const { return store_.chat_path(name); }
    std::string next_state_path(const std::string& name) const { return state_path(name) + ".new"; }

    SessionStore store_;
    uint64_t quota_;
    std::string name_;
    FileLock lock_;
    RestoredSession restored_;
};

// The chat state file of session `name` that belongs to `transcript`: NAME.chat.new when it decodes and
// matches (a save stopped between writing the manifest and renaming .new over NAME.chat), else NAME.chat.
// False if there is none (not a chat session). The caller decodes and checks what it gets.
bool read_chat_state_file(const SessionStore& store, const std::string& name, const std::vector<int32_t>& transcript,
                          std::string* path, std::vector<uint8_t>* bytes);

// The chat template a chat command starts with: --chat-template (`flag`), else the model's; on a model
// without one, a continued chat session (`session_name`) brings the template it was saved with, so it
// continues without the flag. Throws Error as load_chat_template does when there is none of these.
LoadedChatTemplate chat_template_for_session(const Engine& engine, const std::string& flag, const SessionFlags& session);

// The state in `bytes` (the chat state file at `path` of session `name`); if it is damaged or belongs to
// another transcript, an Error naming the commands that get out of it (`kvlm session show` / `rm`).
ChatState load_chat_state(const std::string& name, const std::string& path, const std::vector<uint8_t>& bytes,
                          const std::vector<int32_t>& transcript);

// A continued chat keeps the system prompt it has; `requested` (--system, "" = none given) that differs is
// an Error, not silently ignored.
void check_continued_system_prompt(const ChatSession& chat, const std::string& requested, const std::string& name);

}  // namespace kvlm
