// Chat state codec (chat_state.h). Every count is checked against the bytes left before anything is
// allocated, so a hostile file costs at most a small multiple of its own size.
#include "chat/chat_state.h"

#include <xxhash.h>

#include <cstring>

#include "util/binary_io.h"
#include "util/error.h"

namespace kvlm {

namespace {

const char kMagic[4] = {'K', 'V', 'C', 'H'};
// The fewest bytes an element can take: two empty strings per message; two u32 and a string per turn.
constexpr uint64_t kMinMessageBytes = 8;
constexpr uint64_t kMinTurnBytes = 12;

}  // namespace

uint64_t chat_transcript_hash(const std::vector<int32_t>& tokens) {
    return XXH3_64bits(tokens.data(), tokens.size() * sizeof(int32_t));
}

std::vector<uint8_t> encode_chat_state(const ChatState& state) {
    KVLM_ASSERT(state.version >= 1 && state.version <= kChatStateVersion, "unknown chat state version");
    BufferWriter w;
    w.write_bytes(kMagic, 4);
    w.write_u32(state.version);
    w.write_u64(state.transcript_hash);
    w.write_u32(state.n_transcript_tokens);
    if (state.version >= 2) {
        w.write_string(state.template_name);
        w.write_string(state.template_source);
    }
    w.write_string(state.system);
    w.write_string(state.pending_text);
    w.write_u32(uint32_t(state.messages.size()));
    for (const ChatMessage& m : state.messages) {
        w.write_string(m.role);
        w.write_string(m.content);
    }
    w.write_u32(uint32_t(state.turns.size()));
    for (const ChatTurn& t : state.turns) {
        w.write_u32(uint32_t(t.n_messages));
        w.write_u32(uint32_t(t.n_transcript));
        w.write_string(t.pending_text);
    }
    if (state.version >= 3) w.write_u64(XXH3_64bits(w.buffer().data(), w.buffer().size()));
    return w.buffer();
}

ChatState decode_chat_state(const uint8_t* data, size_t size, const std::string& source) {
    Reader r(data, size, source);
    ChatState s;
    const uint8_t* magic = r.read_bytes(4, "magic");
    if (std::memcmp(magic, kMagic, 4) != 0) r.fail("not a kvlm chat state file (magic is not KVCH)");
    s.version = r.read_u32("version");
    if (s.version < 1 || s.version > kChatStateVersion)
        r.fail(fmt::format("chat state version {}, this kvlm reads versions 1 to {}", s.version, kChatStateVersion));
    if (s.version >= 3) {
        // The checksum first: no field of a changed file is believed.
        if (size < 16) r.fail("truncated (no room for the checksum)");
        uint64_t stored = Reader(data + size - 8, 8, source, size - 8).read_u64("checksum");
        if (XXH3_64bits(data, size - 8) != stored)
            throw_error("{}: checksum mismatch (the file is damaged or was edited)", source);
        r = Reader(data, size - 8, source);
        r.read_bytes(8, "magic and version");
    }
    s.transcript_hash = r.read_u64("transcript hash");
    s.n_transcript_tokens = r.read_u32("transcript length");
    if (s.version >= 2) {
        s.template_name = r.read_string("template name");
        s.template_source = r.read_string("template source");
    }
    s.system = r.read_string("system prompt");
    s.pending_text = r.read_string("pending text");

    uint32_t n_messages = r.read_u32("message count");
    if (n_messages * kMinMessageBytes > r.remaining()) r.fail("message count past the end");
    s.messages.resize(n_messages);
    for (ChatMessage& m : s.messages) {
        m.role = r.read_string("role");
        m.content = r.read_string("content");
    }
    uint32_t n_turns = r.read_u32("turn count");
    if (n_turns * kMinTurnBytes > r.remaining()) r.fail("turn count past the end");
    s.turns.resize(n_turns);
    for (size_t i = 0; i < s.turns.size(); i++) {
        ChatTurn& t = s.turns[i];
        t.n_messages = r.read_u32("turn message count");
        t.n_transcript = r.read_u32("turn transcript length");
        t.pending_text = r.read_string("turn pending text");
        // regenerate() reads messages[n_messages], so it must exist.
        if (t.n_messages >= s.messages.size() || t.n_transcript > s.n_transcript_tokens)
            r.fail(fmt::format("an undo point lies past the conversation (undo point {} of {} is at message {} and "
                               "token {}; the conversation has {} messages and {} tokens)",
                               i + 1, s.turns.size(), t.n_messages, t.n_transcript, s.messages.size(),
                               s.n_transcript_tokens));
        // undo() shrinks the conversation to the last point, so every earlier one must lie inside that.
        const ChatTurn* before = i > 0 ? &s.turns[i - 1] : nullptr;
        if (before && (t.n_messages <= before->n_messages || t.n_transcript < before->n_transcript))
            r.fail(fmt::format("the undo points are out of order (undo point {} of {} is at message {} and token {}, "
                               "the one before it at message {} and token {})",
                               i + 1, s.turns.size(), t.n_messages, t.n_transcript, before->n_messages,
                               before->n_transcript));
    }
    if (!r.at_end()) r.fail("trailing bytes");
    return s;
}

ChatState decode_chat_state_of(const std::vector<uint8_t>& bytes, const std::string& source,
                               const std::vector<int32_t>& transcript) {
    ChatState state = decode_chat_state(bytes.data(), bytes.size(), source);
    if (state.transcript_hash != chat_transcript_hash(transcript) || state.n_transcript_tokens != transcript.size())
        throw_error("{}: belongs to another transcript ({} tokens) than the session's ({} tokens)", source,
                    state.n_transcript_tokens, transcript.size());
    return state;
}

}  // namespace kvlm
