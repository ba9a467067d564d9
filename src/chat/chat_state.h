// The bytes of a chat session's state (chats/NAME.chat): its messages, the template text not yet in the
// transcript and the undo points, bound to the token transcript by hash. A pure codec (no Engine), so the
// parser of these untrusted files has its own fuzz target. Invariant: decode(encode(s)) == s, and
// encode(decode(b)) == b for every b that decodes.
//
// Layout, little-endian; a string is a u32 length and its bytes:
//   "KVCH", u32 version (1, 2 or 3), u64 transcript hash (chat_transcript_hash), u32 transcript length,
//   version 2 and later: string template name, string template source,
//   string system prompt, string pending text,
//   u32 message count, per message: string role, string content,
//   u32 turn count, per turn: u32 message count, u32 transcript length, string pending text,
//   version 3 and later: u64 XXH3-64 of every byte before it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "chat/chat_template.h"

namespace kvlm {

// Version 2 added the template (name and source); version 1 states continue with the current template.
// Version 3 added the checksum (a changed byte in a message or the template is refused, not used).
constexpr uint32_t kChatStateVersion = 3;

struct ChatTurn {             // undo point: the conversation before a user message
    size_t n_messages = 0;    // messages before it (the user message is messages[n_messages])
    size_t n_transcript = 0;  // transcript tokens before it
    std::string pending_text;  // ChatState::pending_text at that point
};

struct ChatState {
    uint32_t version = kChatStateVersion;  // as read; encode writes this version's layout (1: no template)
    uint64_t transcript_hash = 0;          // chat_transcript_hash of the transcript the state belongs to
    uint32_t n_transcript_tokens = 0;
    std::string template_name;    // empty in a version-1 state
    std::string template_source;  // the Jinja text; empty in a version-1 state
    std::string system;
    std::string pending_text;  // rendered template text after the last reply, not yet tokenized
    std::vector<ChatMessage> messages;
    std::vector<ChatTurn> turns;  // oldest first
};

// XXH3-64 over the tokens as int32 (the bytes of the transcript in memory order).
uint64_t chat_transcript_hash(const std::vector<int32_t>& tokens);

std::vector<uint8_t> encode_chat_state(const ChatState& state);

// Throws Error naming `source` and the offset for anything malformed: magic, version, checksum, truncation, counts
// past the end, trailing bytes, and undo points outside the conversation (a message index past the
// messages, a transcript length past n_transcript_tokens) or out of order. It cannot check the transcript
// itself: the caller compares transcript_hash and n_transcript_tokens with it.
ChatState decode_chat_state(const uint8_t* data, size_t size, const std::string& source);

// decode_chat_state, then the binding: an Error naming `source` unless the state's transcript hash and
// length are those of `transcript`.
ChatState decode_chat_state_of(const std::vector<uint8_t>& bytes, const std::string& source,
                               const std::vector<int32_t>& transcript);

}  // namespace kvlm
