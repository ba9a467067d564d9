// Chat session state decoder (src/chat/chat_state.cpp, chats/NAME.chat) on arbitrary bytes. Whatever decodes
// must re-encode to exactly the input bytes (the format has one encoding per state), and its undo points
// must lie inside the conversation, in order, as ChatSession::undo and regenerate assume.
#include <cstdlib>
#include <cstring>

#include "chat/chat_state.h"
#include "fuzz/fuzz_util.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    kvlm::ChatState state;
    try {
        state = kvlm::decode_chat_state(data, size, "fuzz.chat");
    } catch (const kvlm::Error&) {
        return 0;
    }
    std::vector<uint8_t> bytes = kvlm::encode_chat_state(state);
    if (bytes.size() != size || std::memcmp(bytes.data(), data, size) != 0) std::abort();
    if (state.version == 1 && !(state.template_name.empty() && state.template_source.empty())) std::abort();
    for (size_t i = 0; i < state.turns.size(); i++) {
        const kvlm::ChatTurn& t = state.turns[i];
        if (t.n_messages >= state.messages.size() || t.n_transcript > state.n_transcript_tokens) std::abort();
        if (i > 0 && (t.n_messages <= state.turns[i - 1].n_messages ||
                      t.n_transcript < state.turns[i - 1].n_transcript))
            std::abort();
    }
    return 0;
}
