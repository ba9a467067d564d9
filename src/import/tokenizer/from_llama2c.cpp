// Tokenizer from llama2.c's tokenizer.bin: int32 max_token_length, then per token f32 score, int32 length,
// bytes. Mapped onto the spm conventions (' ' -> U+2581, <0xXX> byte tokens) so the spm encoder
// reproduces llama2.c's encode: dummy prefix, greedy best-score merges, byte fallback.
#include <cstring>

#include "import/tokenizer/common.h"
#include "import/tokenizer/tokenizer_import.h"
#include "util/error.h"

namespace kvlm {

namespace {

bool is_byte_piece(const std::string& piece) {
    auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f'); };
    return piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 && piece[5] == '>' && hex(piece[3]) && hex(piece[4]);
}

std::string trim(const std::string& s) {
    const size_t begin = s.find_first_not_of(" \n\r\t");
    if (begin == std::string::npos) return "";
    return s.substr(begin, s.find_last_not_of(" \n\r\t") - begin + 1);
}

}  // namespace

TokenizerData tokenizer_from_llama2c(const std::string& path, int32_t n_vocab) {
    const std::string bytes = tokenizer_import::read_text_file(path);
    size_t offset = 0;
    auto read = [&](void* out, size_t n, const char* what, size_t index) {
        if (bytes.size() - offset < n)
            throw_error("{}: truncated at byte {} reading the {} of token {}, expected {} more bytes (file has {})",
                        path, offset, what, index, n, bytes.size());
        std::memcpy(out, bytes.data() + offset, n);
        offset += n;
    };
    if (n_vocab < 0) throw_error("{}: vocabulary size {} is negative", path, n_vocab);
    int32_t max_token_length = 0;
    read(&max_token_length, 4, "header", 0);
    if (max_token_length <= 0 || max_token_length > (1 << 16))
        throw_error("{}: max_token_length is {}, expected 1..65536 (is this a llama2.c tokenizer.bin?)", path,
                    max_token_length);

    TokenizerData data;
    data.type = "spm";
    for (size_t index = 0; n_vocab > 0 ? index < static_cast<size_t>(n_vocab) : offset < bytes.size(); ++index) {
        float score = 0;
        int32_t length = 0;
        read(&score, 4, "score", index);
        read(&length, 4, "length", index);
        if (length < 0 || length > max_token_length)
            throw_error("{}: token {} has length {}, expected 0..{} (max_token_length)", path, index, length,
                        max_token_length);
        std::string piece(static_cast<size_t>(length), '\0');
        read(piece.data(), piece.size(), "bytes", index);

        TokenType type = TokenType::normal;
        const std::string trimmed = trim(piece);
        if (is_byte_piece(piece)) {
            type = TokenType::byte;
        } else if (trimmed == "<unk>") {
            type = TokenType::unknown;
            piece = trimmed;
        } else if (trimmed == "<s>" || trimmed == "</s>") {
            type = TokenType::control;  // llama2.c stores them as "\n<s>\n" / "\n</s>\n"
            piece = trimmed;
        } else {
            std::string escaped;
            for (char c : piece) escaped += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
            piece = escaped;
        }
        data.tokens.push_back(piece);
        data.scores.push_back(score);
        data.token_types.push_back(static_cast<int32_t>(type));
    }
    if (data.tokens.size() < 3) throw_error("{}: has {} tokens, expected at least <unk>, <s>, </s>", path, data.tokens.size());
    data.unk_id = tokenizer_import::find_token(data, "<unk>");
    data.bos_id = tokenizer_import::find_token(data, "<s>");
    data.eos_id = tokenizer_import::find_token(data, "</s>");
    if (data.bos_id < 0) data.bos_id = 1;  // llama2.c hard-codes BOS 1 and EOS 2
    if (data.eos_id < 0) data.eos_id = 2;
    data.add_bos = true;
    data.add_space_prefix = true;
    tokenizer_import::finish(data, path);
    return data;
}

}  // namespace kvlm
