// The per-turn append of a chat. A turn's new text is the suffix that rendering the conversation with the
// new user message adds to rendering it without (plus template text left over after the last reply, such
// as ChatML's "\n" after <|im_end|>); a template whose old rendering is not a prefix of the new one is an
// Error rather than a silent re-tokenization of history.
#include "chat/chat_session.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "util/atomic_file.h"
#include "util/error.h"

namespace kvlm {

namespace {

bool starts_with(const std::string& s, const std::string& prefix) {
    return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

std::string builtin_list() {
    std::string names;
    for (const std::string& name : ChatTemplate::builtin_names()) names += (names.empty() ? "" : ", ") + name;
    return names;
}

std::string trim(const std::string& s) {
    const char* ws = " \t\r\n";
    size_t b = s.find_first_not_of(ws);
    if (b == std::string::npos) return "";
    return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// A LoadedChatTemplate::name in a sentence: "the model's chat template" as it is, "builtin 'chatml'" as
// "the chat template builtin 'chatml'".
std::string template_phrase(const std::string& name) {
    return name.rfind("the ", 0) == 0 ? name : "the chat template " + name;
}

}  // namespace

LoadedChatTemplate load_chat_template(const Engine& engine, const std::string& override_name) {
    if (override_name.empty()) {
        const std::string& source = engine.model().metadata().chat_template;
        if (source.empty())
            throw_error("{}: the model has no chat template; choose one with --chat-template NAME (builtin: {}) or "
                        "--chat-template FILE (a Jinja chat template)",
                        engine.model().path(), builtin_list());
        return {ChatTemplate::parse(source), "the model's chat template", source, false};
    }
    for (const std::string& name : ChatTemplate::builtin_names())
        if (name == override_name)
            return {ChatTemplate::parse(ChatTemplate::builtin_source(name)), fmt::format("builtin '{}'", name),
                    ChatTemplate::builtin_source(name), true};
    std::error_code ec;
    if (!std::filesystem::is_regular_file(override_name, ec))
        throw_error("--chat-template: '{}' is neither a builtin template ({}) nor a file", override_name,
                    builtin_list());
    std::vector<uint8_t> bytes;
    read_whole_file(override_name, &bytes);
    std::string source(bytes.begin(), bytes.end());
    try {
        return {ChatTemplate::parse(source), override_name, source, true};
    } catch (const Error& e) {
        throw_error("{}: {}", override_name, e.what());
    }
}

ChatSession::ChatSession(Engine& engine, LoadedChatTemplate chat_template, std::string system)
    : engine_(engine), template_(std::move(chat_template)) {
    context_full_advice_ = "/undo drops the last exchange, /reset starts a new conversation";
    if (engine.n_ctx() < engine.model().config().n_ctx) context_full_advice_ += " (or restart with a larger -c)";
    reset(system);
}

ChatSession::~ChatSession() { engine_.prefix_cache().release(seq_); }

void ChatSession::reset() { reset(std::string(system_)); }

void ChatSession::reset(const std::string& system) {
    if (!system.empty() && system != system_) {
        // Checked before anything changes: a system prompt that leaves no room for a message would make every
        // later message fail (and /reset would keep it).
        const std::vector<int32_t> first =
            first_chat_turn_tokens(engine_, template_, {{"system", system}, {"user", ""}}, plain_message_text_);
        if (int64_t(first.size()) >= engine_.n_ctx())
            throw_error("the system prompt takes {} tokens with the chat template, and the context is {} tokens: no "
                        "message would fit; give a shorter one{}",
                        first.size(), engine_.n_ctx(),
                        engine_.n_ctx() < engine_.model().config().n_ctx ? " or a larger -c" : "");
    }
    engine_.prefix_cache().release(seq_);
    system_ = system;
    messages_.clear();
    if (!system_.empty()) messages_.push_back({"system", system_});
    transcript_.clear();
    pending_text_.clear();
    turns_.clear();
    n_restored_ = 0;
}

std::string render_chat(const Engine& engine, const LoadedChatTemplate& chat_template,
                        const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
    const Tokenizer& tokenizer = engine.tokenizer();
    auto piece_or_empty = [&](int32_t id) { return id >= 0 ? tokenizer.piece(id) : std::string(); };
    try {
        return chat_template.chat_template.render(messages, add_generation_prompt, piece_or_empty(tokenizer.bos_id()),
                                                  piece_or_empty(tokenizer.eos_id()));
    } catch (const Error& e) {
        throw_error("{} ({}): {}", chat_template.name, "rendering the conversation", e.what());
    }
}

std::vector<TextRange> message_text_ranges(const Engine& engine, const LoadedChatTemplate& chat_template,
                                          const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                          const std::string& rendered) {
    // Each message's text becomes a marker no template writes itself; the template's own text is what lies
    // between the markers, and the real rendering must be that text with each message's text (or, for
    // templates that trim, its trimmed text) in the markers' places.
    std::vector<ChatMessage> marked = messages;
    for (size_t i = 0; i < marked.size(); i++) marked[i].content = fmt::format("\x1fkvlm-message-{}\x1f", i);
    const std::string with_markers = render_chat(engine, chat_template, marked, add_generation_prompt);
    auto refuse = [&](size_t i, const char* what) {
        throw_error("--no-special: {} {} the text of message {} ({}), so kvlm cannot keep the messages apart from "
                    "the template's special tokens; leave out --no-special or use --chat-template chatml",
                    template_phrase(chat_template.name), what, i + 1, messages[i].role);
    };
    std::vector<TextRange> ranges;
    size_t marked_pos = 0, pos = 0;
    for (size_t i = 0; i < marked.size(); i++) {
        const size_t at = with_markers.find(marked[i].content, marked_pos);
        if (at == std::string::npos) refuse(i, "does not write");
        if (with_markers.find(marked[i].content, at + 1) != std::string::npos) refuse(i, "writes more than once");
        const std::string_view before(with_markers.data() + marked_pos, at - marked_pos);
        if (rendered.compare(pos, before.size(), before) != 0) refuse(i, "changes the text around");
        pos += before.size();
        marked_pos = at + marked[i].content.size();
        const std::string& text = messages[i].content;
        const std::string trimmed = trim(text);
        const size_t length = rendered.compare(pos, text.size(), text) == 0         ? text.size()
                              : rendered.compare(pos, trimmed.size(), trimmed) == 0 ? trimmed.size()
                                                                                      : std::string::npos;
        if (length == std::string::npos) refuse(i, "changes");
        if (length > 0) ranges.push_back({pos, pos + length});
        pos += length;
    }
    if (rendered.compare(pos, std::string::npos, with_markers, marked_pos, std::string::npos) != 0)
        refuse(marked.size() - 1, "changes the text after");
    return ranges;
}

std::vector<int32_t> first_chat_turn_tokens(const Engine& engine, const LoadedChatTemplate& chat_template,
                                            const std::vector<ChatMessage>& messages, bool plain_message_text) {
    const Tokenizer& tokenizer = engine.tokenizer();
    std::string text = render_chat(engine, chat_template, messages, true);
    std::vector<TextRange> plain;
    if (plain_message_text) plain = message_text_ranges(engine, chat_template, messages, true, text);
    std::vector<int32_t> ids = tokenizer.encode(text, /*add_bos=*/false, /*parse_special=*/true, plain);
    // Templates that spell out bos_token already start with it.
    if (tokenizer.data().add_bos && tokenizer.bos_id() >= 0 && (ids.empty() || ids[0] != tokenizer.bos_id()))
        ids.insert(ids.begin(), tokenizer.bos_id());
    return ids;
}

GenerationResult ChatSession::send(const std::string& text, int32_t n_predict, Sampler& sampler,
                                   const TextCallback& on_text, const std::atomic<bool>* cancel) {
    const Tokenizer& tokenizer = engine_.tokenizer();
    std::vector<ChatMessage> with_user = messages_;
    with_user.push_back({"user", text});
    std::string prompt_text = render(with_user, true);
    std::vector<int32_t> new_ids;
    if (transcript_.empty()) {
        new_ids = first_chat_turn_tokens(engine_, template_, with_user, plain_message_text_);
    } else {
        std::string old_text = render(messages_, false);
        if (!starts_with(prompt_text, old_text))
            throw_error("{}: rendering the conversation with the new message changes the text of earlier turns, "
                        "so it cannot be extended by appending tokens (try --chat-template chatml)",
                        template_.name);
        // The new text starts with pending_text_ and continues at old_text.size() of prompt_text.
        std::vector<TextRange> plain;
        if (plain_message_text_)
            for (TextRange r : message_text_ranges(engine_, template_, with_user, true, prompt_text))
                if (r.begin >= old_text.size())
                    plain.push_back({r.begin - old_text.size() + pending_text_.size(),
                                     r.end - old_text.size() + pending_text_.size()});
        new_ids = tokenizer.encode(pending_text_ + prompt_text.substr(old_text.size()), /*add_bos=*/false,
                                   /*parse_special=*/true, plain);
    }

    Turn turn{messages_.size(), transcript_.size(), pending_text_};
    const int32_t n_in_seq = seq_.table.n_tokens;
    std::vector<int32_t> prompt(transcript_.begin() + n_in_seq, transcript_.end());
    prompt.insert(prompt.end(), new_ids.begin(), new_ids.end());
    const int32_t n_ctx = engine_.n_ctx();
    if (int64_t(n_in_seq) + int64_t(prompt.size()) >= n_ctx)
        throw_error("the context is full: the conversation holds {} tokens, this message needs {} more and the "
                    "context is {} tokens; {}",
                    transcript_.size(), new_ids.size(), n_ctx, context_full_advice_);
    std::string reply;
    GenerationResult result = generate(engine_, seq_, prompt, n_predict, sampler, [&](const std::string& piece) {
        reply += piece;
        on_text(piece);
    }, cancel, &spec_, &constraint_);
    // Tokens the sequence already held count as reused (from this process) or restored (from disk).
    const int32_t n_restored = std::min(n_restored_, n_in_seq);
    result.n_restored = n_restored;
    result.n_reused += n_in_seq - n_restored;
    result.n_prompt += n_in_seq;
    n_restored_ = 0;

    // The template's rendering of the reply must start with the reply as generated; what follows it (the
    // end-of-turn marker, minus the end-of-generation token the model already produced) is left pending
    // for the next turn.
    std::vector<ChatMessage> with_reply = with_user;
    with_reply.push_back({"assistant", reply});
    std::string full = render(with_reply, false);
    std::string rest;
    bool ok = starts_with(full, prompt_text);
    if (ok) {
        std::string after = full.substr(prompt_text.size());
        if (starts_with(after, reply)) rest = after.substr(reply.size());
        else if (starts_with(after, trim(reply))) rest = after.substr(trim(reply).size());  // templates that trim
        else ok = false;
    }
    if (!ok) {
        engine_.prefix_cache().truncate(seq_, std::min<int32_t>(seq_.table.n_tokens, int32_t(turn.n_transcript)));
        throw_error("{}: the template does not render the assistant's reply as generated after the generation "
                    "prompt, so the conversation cannot continue without re-tokenizing it (try --chat-template "
                    "chatml); the exchange was dropped",
                    template_.name);
    }
    if (result.stop_reason == StopReason::end_of_generation) {
        std::string marker = tokenizer.piece(result.generated.back());
        if (starts_with(rest, marker)) rest = rest.substr(marker.size());
    }
    turns_.push_back(std::move(turn));
    messages_ = std::move(with_reply);
    transcript_ = result.transcript;
    pending_text_ = rest;
    return result;
}

bool ChatSession::undo() {
    if (turns_.empty()) return false;
    Turn turn = std::move(turns_.back());
    turns_.pop_back();
    engine_.prefix_cache().truncate(seq_, std::min<int32_t>(seq_.table.n_tokens, int32_t(turn.n_transcript)));
    n_restored_ = std::min<int32_t>(n_restored_, seq_.table.n_tokens);
    messages_.resize(turn.n_messages);
    transcript_.resize(turn.n_transcript);
    pending_text_ = std::move(turn.pending_text);
    return true;
}

GenerationResult ChatSession::regenerate(int32_t n_predict, Sampler& sampler, const TextCallback& on_text,
                                         const std::atomic<bool>* cancel) {
    if (turns_.empty()) throw_error("/regenerate: there is no answer to regenerate yet");
    std::string user = messages_[turns_.back().n_messages].content;
    undo();
    return send(user, n_predict, sampler, on_text, cancel);
}

std::vector<uint8_t> ChatSession::encode_state() const {
    ChatState state;
    state.transcript_hash = chat_transcript_hash(transcript_);
    state.n_transcript_tokens = uint32_t(transcript_.size());
    state.template_name = template_.name;
    state.template_source = template_.source;
    state.system = system_;
    state.pending_text = pending_text_;
    state.messages = messages_;
    state.turns = turns_;
    return encode_chat_state(state);
}

void ChatSession::adopt(Sequence& seq, std::vector<int32_t> transcript, const std::vector<uint8_t>& state,
                        const std::string& source) {
    ChatState decoded = decode_chat_state_of(state, source, transcript);
    LoadedChatTemplate chat_template = template_;
    if (decoded.version >= 2 && decoded.template_source != template_.source) {
        if (template_.chosen)
            throw_error("{}: the conversation was saved with {}, and --chat-template gives {}; drop "
                        "--chat-template to continue it with its own",
                        source, template_phrase(decoded.template_name), template_.name);
        try {
            chat_template = {ChatTemplate::parse(decoded.template_source), decoded.template_name,
                             decoded.template_source, false};
        } catch (const Error& e) {
            throw_error("{}: its chat template ({}) does not parse: {}", source, decoded.template_name, e.what());
        }
    }
    KVLM_ASSERT(size_t(seq.table.n_tokens) <= transcript.size(), "restored more tokens than the transcript holds");

    engine_.prefix_cache().release(seq_);
    seq_ = std::move(seq);
    seq = Sequence{};
    n_restored_ = seq_.table.n_tokens;
    template_ = std::move(chat_template);
    transcript_ = std::move(transcript);
    system_ = std::move(decoded.system);
    pending_text_ = std::move(decoded.pending_text);
    messages_ = std::move(decoded.messages);
    turns_ = std::move(decoded.turns);
}

}  // namespace kvlm
