// Chat state codec (src/chat/chat_state.h) in memory: round trip, version-1 states, the checksum (every
// changed byte), truncation at every byte, undo points outside the conversation or out of order, unknown
// versions and counts past the end.
#include <doctest/doctest.h>
#include <xxhash.h>

#include "chat/chat_state.h"
#include "util/binary_io.h"
#include "util/error.h"

using namespace kvlm;

namespace {

// Two exchanges after a system prompt, the second one undoable back to the first.
ChatState sample_state() {
    ChatState s;
    s.transcript_hash = chat_transcript_hash({1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
    s.n_transcript_tokens = 10;
    s.template_name = "builtin 'chatml'";
    s.template_source = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";
    s.system = "Be brief.";
    s.pending_text = "\n";
    s.messages = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Again"},
                  {"assistant", std::string("Hello\0again", 11)}};
    s.turns = {{1, 0, ""}, {3, 6, "\n"}};
    return s;
}

void check_same(const ChatState& a, const ChatState& b) {
    CHECK(a.version == b.version);
    CHECK(a.transcript_hash == b.transcript_hash);
    CHECK(a.n_transcript_tokens == b.n_transcript_tokens);
    CHECK(a.template_name == b.template_name);
    CHECK(a.template_source == b.template_source);
    CHECK(a.system == b.system);
    CHECK(a.pending_text == b.pending_text);
    REQUIRE(a.messages.size() == b.messages.size());
    for (size_t i = 0; i < a.messages.size(); i++) {
        CHECK(a.messages[i].role == b.messages[i].role);
        CHECK(a.messages[i].content == b.messages[i].content);
    }
    REQUIRE(a.turns.size() == b.turns.size());
    for (size_t i = 0; i < a.turns.size(); i++) {
        CHECK(a.turns[i].n_messages == b.turns[i].n_messages);
        CHECK(a.turns[i].n_transcript == b.turns[i].n_transcript);
        CHECK(a.turns[i].pending_text == b.turns[i].pending_text);
    }
}

std::string decode_error(const std::vector<uint8_t>& bytes, size_t size) {
    try {
        decode_chat_state(bytes.data(), size, "s.chat");
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}
std::string decode_error(const std::vector<uint8_t>& bytes) { return decode_error(bytes, bytes.size()); }

// Replaces the trailing checksum of version-3 bytes by the right one for the rest: lets a test reach the
// structural checks behind the checksum with bytes it changed on purpose.
std::vector<uint8_t> resealed(std::vector<uint8_t> body_and_checksum) {
    REQUIRE(body_and_checksum.size() >= 8);
    body_and_checksum.resize(body_and_checksum.size() - 8);
    uint64_t checksum = XXH3_64bits(body_and_checksum.data(), body_and_checksum.size());
    for (int i = 0; i < 8; i++) body_and_checksum.push_back(uint8_t(checksum >> (8 * i)));
    return body_and_checksum;
}

// The bytes of a version-3 state cut after `n_body` body bytes, with a valid checksum after them.
std::vector<uint8_t> resealed_prefix(const std::vector<uint8_t>& bytes, size_t n_body) {
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + n_body);
    prefix.resize(n_body + 8);
    return resealed(prefix);
}

// sample_state() with its turns replaced, encoded.
std::vector<uint8_t> with_turns(std::vector<ChatTurn> turns) {
    ChatState s = sample_state();
    s.turns = std::move(turns);
    return encode_chat_state(s);
}

}  // namespace

TEST_CASE("chat state: round trip with messages, undo points and the template") {
    ChatState s = sample_state();
    std::vector<uint8_t> bytes = encode_chat_state(s);
    ChatState back = decode_chat_state(bytes.data(), bytes.size(), "s.chat");
    check_same(back, s);
    CHECK(back.messages[4].content.size() == 11);  // strings are counted, not NUL-terminated
    CHECK(encode_chat_state(back) == bytes);

    ChatState empty;  // a fresh conversation: no messages, no turns, empty transcript
    empty.transcript_hash = chat_transcript_hash({});
    std::vector<uint8_t> empty_bytes = encode_chat_state(empty);
    check_same(decode_chat_state(empty_bytes.data(), empty_bytes.size(), "e.chat"), empty);

    CHECK(chat_transcript_hash({1, 2}) != chat_transcript_hash({2, 1}));
    CHECK(chat_transcript_hash({1, 2}) != chat_transcript_hash({1, 2, 0}));
}

TEST_CASE("chat state: a version-1 state (no template) decodes with empty template fields") {
    ChatState s = sample_state();
    // The version-1 layout by hand: version 2 without the two template strings.
    BufferWriter w;
    w.write_bytes("KVCH", 4);
    w.write_u32(1);
    w.write_u64(s.transcript_hash);
    w.write_u32(s.n_transcript_tokens);
    w.write_string(s.system);
    w.write_string(s.pending_text);
    w.write_u32(uint32_t(s.messages.size()));
    for (const ChatMessage& m : s.messages) {
        w.write_string(m.role);
        w.write_string(m.content);
    }
    w.write_u32(uint32_t(s.turns.size()));
    for (const ChatTurn& t : s.turns) {
        w.write_u32(uint32_t(t.n_messages));
        w.write_u32(uint32_t(t.n_transcript));
        w.write_string(t.pending_text);
    }
    const std::vector<uint8_t>& bytes = w.buffer();
    ChatState back = decode_chat_state(bytes.data(), bytes.size(), "old.chat");
    CHECK(back.version == 1);
    CHECK(back.template_name.empty());
    CHECK(back.template_source.empty());
    s.version = 1;
    s.template_name.clear();
    s.template_source.clear();
    check_same(back, s);
    CHECK(encode_chat_state(back) == bytes);  // re-encoded in its own version, byte for byte
}

TEST_CASE("chat state: every changed byte fails the checksum") {
    std::vector<uint8_t> bytes = encode_chat_state(sample_state());
    CHECK(decode_error(bytes).empty());
    for (size_t at = 8; at < bytes.size(); at++) {  // past magic and version, which have their own errors
        std::vector<uint8_t> changed = bytes;
        changed[at] ^= 0x10;
        std::string e = decode_error(changed);
        CHECK_MESSAGE(e == "s.chat: checksum mismatch (the file is damaged or was edited)", at, ": ", e);
    }
}

TEST_CASE("chat state: truncation at every byte and trailing bytes are refused") {
    for (ChatState s : {sample_state(), ChatState{}}) {
        std::vector<uint8_t> bytes = encode_chat_state(s);
        const size_t n_body = bytes.size() - 8;
        for (size_t cut = 0; cut < bytes.size(); cut++) {
            std::string e = decode_error(bytes, cut);
            CHECK_MESSAGE(e.rfind("s.chat: ", 0) == 0, cut, ": ", e);
            // Cut inside the body with a valid checksum after it: the structure check names the offset.
            if (cut >= 8 && cut < n_body) {
                e = decode_error(resealed_prefix(bytes, cut));
                CHECK_MESSAGE(e.rfind("s.chat: at offset ", 0) == 0, cut, ": ", e);
            }
        }
        std::vector<uint8_t> trailing(bytes.begin(), bytes.begin() + n_body);
        trailing.push_back(0);
        trailing.resize(trailing.size() + 8);
        CHECK(decode_error(resealed(trailing)).find("trailing bytes") != std::string::npos);
    }
}

TEST_CASE("chat state: undo points past the conversation or out of order are refused") {
    CHECK(decode_error(with_turns({{1, 0, ""}, {3, 10, ""}})).empty());  // the last message, every token: fine
    for (std::vector<ChatTurn> turns : {std::vector<ChatTurn>{{5, 0, ""}}, std::vector<ChatTurn>{{1, 11, ""}},
                                        std::vector<ChatTurn>{{1, 0, ""}, {9, 4, ""}}}) {
        std::string e = decode_error(with_turns(turns));
        CHECK_MESSAGE(e.find("s.chat: at offset ") == 0, e);
        CHECK_MESSAGE(e.find("an undo point lies past the conversation (undo point " +
                             std::to_string(turns.size()) + " of " + std::to_string(turns.size())) !=
                          std::string::npos,
                      e);
        CHECK_MESSAGE(e.find("the conversation has 5 messages and 10 tokens") != std::string::npos, e);
    }
    std::string e = decode_error(with_turns({{3, 6, ""}, {1, 0, ""}}));
    CHECK_MESSAGE(e.find("the undo points are out of order (undo point 2 of 2 is at message 1 and token 0, the one "
                         "before it at message 3 and token 6)") != std::string::npos,
                  e);
    e = decode_error(with_turns({{1, 6, ""}, {3, 5, ""}}));
    CHECK_MESSAGE(e.find("the undo points are out of order") != std::string::npos, e);
}

TEST_CASE("chat state: other versions, another magic and counts past the end are refused") {
    std::vector<uint8_t> bytes = encode_chat_state(sample_state());
    std::vector<uint8_t> future = bytes;
    future[4] = 9;
    std::string e = decode_error(future);
    CHECK_MESSAGE(e == "s.chat: at offset 8: chat state version 9, this kvlm reads versions 1 to 3", e);
    future[4] = 0;
    CHECK(decode_error(future).find("chat state version 0") != std::string::npos);

    std::vector<uint8_t> magic = bytes;
    magic[3] = 'X';
    CHECK(decode_error(magic) == "s.chat: at offset 4: not a kvlm chat state file (magic is not KVCH)");

    // A message count of 2^32-1 with a few bytes left: refused before anything is allocated.
    ChatState s = sample_state();
    s.messages.clear();
    s.turns.clear();
    std::vector<uint8_t> counts = encode_chat_state(s);
    const size_t at = counts.size() - 16;  // u32 message count, u32 turn count, u64 checksum
    for (size_t i = 0; i < 4; i++) counts[at + i] = 0xff;
    CHECK(decode_error(resealed(counts)).find("message count past the end") != std::string::npos);
    for (size_t i = 0; i < 4; i++) counts[at + i] = 0;
    counts[counts.size() - 12] = 1;  // one turn, no bytes for it
    CHECK(decode_error(resealed(counts)).find("turn count past the end") != std::string::npos);
}
