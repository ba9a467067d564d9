// The real tokenizers (src/tokenizer/tokenizer.h) on arbitrary text: SmolLM2 (byte-level BPE from tokenizer.json),
// Llama 2 (SentencePiece tokenizer.model), Llama 3 (tiktoken) and Qwen2 (vocab.json + merges.txt), loaded
// once. Byte 0 picks the tokenizer (bits 0-1), add_bos (bit 2) and parse_special (bit 3); the rest is the
// text, invalid UTF-8 included. Checked: every id is inside the vocabulary; decoding never fails; the
// streaming decoder's output is valid UTF-8 and equals the sanitized concatenation of the tokens' bytes;
// and where it truly holds, decode(encode(text)) == text: byte-level BPE without special-token parsing on
// text whose every byte has a token (SmolLM2's vocabulary lacks 21 of the 256), SentencePiece (byte
// fallback) likewise on valid UTF-8 without U+2581 (which decodes as ' ').
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "import/tokenizer/tokenizer_import.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace {

struct Loaded {
    const char* name;
    std::unique_ptr<kvlm::Tokenizer> tokenizer;
    std::array<bool, 256> has_byte{};  // the byte alone encodes to one token that decodes back to it
};

void find_byte_tokens(Loaded& loaded) {
    for (int b = 0; b < 256; ++b) {
        const std::string byte(1, char(b));
        const std::vector<int32_t> ids = loaded.tokenizer->encode(byte, false, false);
        loaded.has_byte[b] = ids.size() == 1 && loaded.tokenizer->decode_token(ids[0]) == byte;
    }
}

std::vector<Loaded>& tokenizers() {
    static std::vector<Loaded> loaded = [] {
        std::vector<Loaded> all;
        const char* sources[4][2] = {{"smollm2", "tokenizers/smollm2"},
                                     {"llama2", "tokenizers/llama2/tokenizer.model"},
                                     {"llama3", "tokenizers/llama3/tokenizer.model"},
                                     {"qwen2", "tokenizers/qwen2"}};
        for (const auto& [name, path] : sources) {
            all.push_back(
                {name, std::make_unique<kvlm::Tokenizer>(kvlm::load_tokenizer_source(kvlm::fuzz::test_data(path)))});
            find_byte_tokens(all.back());
        }
        return all;
    }();
    return loaded;
}

[[noreturn]] void finding(const char* tokenizer, const char* what) {
    std::fprintf(stderr, "fuzz_tokenize: %s: %s\n", tokenizer, what);
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    tokenizers();  // load before the first input, so no input pays for it
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const Loaded& loaded = tokenizers()[data[0] & 3];
    const kvlm::Tokenizer& tokenizer = *loaded.tokenizer;
    const bool add_bos = data[0] & 4, parse_special = data[0] & 8;
    const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);

    const std::vector<int32_t> ids = tokenizer.encode(text, add_bos, parse_special);
    std::string raw;
    kvlm::Utf8StreamDecoder stream;
    std::string streamed;
    for (int32_t id : ids) {
        if (id < 0 || id >= tokenizer.n_vocab()) finding(loaded.name, "token id outside the vocabulary");
        const std::string bytes = tokenizer.decode_token(id);
        raw += bytes;
        streamed += stream.push(bytes);
    }
    streamed += stream.flush();
    if (!kvlm::is_valid_utf8(streamed)) finding(loaded.name, "streamed text is not valid UTF-8");
    if (streamed != kvlm::sanitize_utf8(raw)) finding(loaded.name, "streamed text differs from the sanitized bytes");

    const std::string decoded = tokenizer.decode(ids);
    if (parse_special) return 0;
    const bool round_trips =
        tokenizer.data().type == "spm"
            ? kvlm::is_valid_utf8(text) && text.find("\xE2\x96\x81") == std::string_view::npos
            : std::all_of(text.begin(), text.end(), [&](char c) { return loaded.has_byte[uint8_t(c)]; });
    if (round_trips && decoded != text) finding(loaded.name, "decode(encode(text)) != text");
    return 0;
}
