// A chat conversation over one Sequence: its messages, the canonical token transcript the model has seen,
// and the per-turn append. Invariant: earlier turns are never re-tokenized - a turn prefills only the text
// the template renders beyond the previous rendering, and an assistant reply enters the transcript as the
// tokens that were generated. Terminal I/O lives in cli/chat.cpp.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "chat/chat_state.h"
#include "chat/chat_template.h"
#include "engine/engine.h"
#include "generate/generate.h"
#include "generate/sampler.h"
#include "generate/speculative.h"
#include "kv/prefix_cache.h"

namespace kvlm {

// The template a chat uses: `override_name` empty -> the model's own; else a builtin name or a file.
// Throws Error when the model has none (suggesting --chat-template) or the override is unknown/unparsable.
struct LoadedChatTemplate {
    ChatTemplate chat_template;
    std::string name;     // for messages: "the model's chat template", "builtin 'chatml'", a file path
    std::string source;   // the Jinja text (a chat session saves it and continues with it)
    bool chosen = false;  // given with --chat-template, so a session saved with another one is refused
};
LoadedChatTemplate load_chat_template(const Engine& engine, const std::string& override_name);

// `messages` in the template's text (the model's BOS/EOS pieces as bos_token/eos_token); Error names the
// template.
std::string render_chat(const Engine& engine, const LoadedChatTemplate& chat_template,
                        const std::vector<ChatMessage>& messages, bool add_generation_prompt);
// Where each message's text lies in `rendered`, the rendering of `messages` (empty texts left out). Throws
// Error naming the template when it does not write each message's text once, unchanged or trimmed.
std::vector<TextRange> message_text_ranges(const Engine& engine, const LoadedChatTemplate& chat_template,
                                          const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                          const std::string& rendered);
// The tokens of a conversation's first turn: rendered with the generation prompt, BOS added where the model
// wants one and the template did not write it. `kvlm run --chat` and a chat's first turn both use it, so
// their first answers are the same. plain_message_text (--no-special): text inside the messages never
// becomes special tokens (the template's own still do).
std::vector<int32_t> first_chat_turn_tokens(const Engine& engine, const LoadedChatTemplate& chat_template,
                                            const std::vector<ChatMessage>& messages, bool plain_message_text);

class ChatSession {
public:
    ChatSession(Engine& engine, LoadedChatTemplate chat_template, std::string system);
    ~ChatSession();  // releases the sequence (its full blocks stay in the prefix cache)
    ChatSession(const ChatSession&) = delete;
    ChatSession& operator=(const ChatSession&) = delete;

    // Appends a user message and generates the reply (streamed to on_text). Prefills only the tokens the
    // sequence lacks. In the result, n_reused also counts the tokens earlier turns left in the sequence and
    // n_restored those a session restore put there (first turn after it). Throws Error with the
    // conversation unchanged (context full, template not prefix-stable, ...).
    GenerationResult send(const std::string& text, int32_t n_predict, Sampler& sampler, const TextCallback& on_text,
                          const std::atomic<bool>* cancel = nullptr);
    // Drops the last exchange, truncating the sequence so the K/V before it is reused. False if none.
    bool undo();
    // The last user message again, after undo(); throws Error if there is no exchange.
    GenerationResult regenerate(int32_t n_predict, Sampler& sampler, const TextCallback& on_text,
                                const std::atomic<bool>* cancel = nullptr);
    // --no-special: text in later messages never becomes special tokens (default: it does, as in HF).
    void set_plain_message_text(bool plain) { plain_message_text_ = plain; }
    // Speculative decoding for the answers (--spec; default off). Greedy answers are the same either way.
    void set_speculation(const SpecOptions& spec) { spec_ = spec; }
    // Every later answer follows `constraint` (its TokenConstraint must outlive the session's use of it).
    void set_constraint(const ConstraintOptions& constraint) { constraint_ = constraint; }
    // What a "context is full" Error from send() advises (default: the chat commands /undo and /reset).
    void set_context_full_advice(std::string advice) { context_full_advice_ = std::move(advice); }
    // A new conversation (same system prompt, or `system`).
    void reset();
    void reset(const std::string& system);

    const std::vector<ChatMessage>& messages() const { return messages_; }
    const std::vector<int32_t>& transcript() const { return transcript_; }
    const Sequence& sequence() const { return seq_; }
    const std::string& system() const { return system_; }
    int32_t n_exchanges() const { return int32_t(turns_.size()); }
    const std::string& template_name() const { return template_.name; }

    // Session persistence. The token transcript and K/V go through session_run.h; this is the rest
    // (messages, template text not yet in the transcript, undo points), bound to the transcript by hash:
    // a chat_state.h encoding.
    std::vector<uint8_t> encode_state() const;
    // Replaces the conversation: `seq` holds K/V for a prefix of `transcript` (restore_session); `state`
    // comes from encode_state() of that transcript. Throws Error naming `source` if it is malformed or
    // belongs to another transcript; on error nothing changes (seq is then the caller's to release). The
    // conversation continues with the template it was saved with, unless this chat's template was chosen
    // (--chat-template) and differs: that is an Error.
    void adopt(Sequence& seq, std::vector<int32_t> transcript, const std::vector<uint8_t>& state,
               const std::string& source);

private:
    using Turn = ChatTurn;  // undo point: the state before a user message
    std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
        return render_chat(engine_, template_, messages, add_generation_prompt);
    }

    Engine& engine_;
    LoadedChatTemplate template_;
    std::string system_;
    Sequence seq_;
    std::vector<ChatMessage> messages_;
    std::vector<int32_t> transcript_;  // seq_.tokens plus tokens not in the K/V yet (a pending token)
    std::string pending_text_;         // rendered template text after the last reply, not yet tokenized
    std::vector<Turn> turns_;
    int32_t n_restored_ = 0;           // K/V tokens from disk not yet reported in a turn's result
    std::string context_full_advice_;  // set by the constructor: a larger -c only where the model allows it
    bool plain_message_text_ = false;
    SpecOptions spec_;
    ConstraintOptions constraint_;
};

}  // namespace kvlm
