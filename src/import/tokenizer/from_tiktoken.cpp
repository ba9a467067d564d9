// Tokenizer from Meta's tiktoken tokenizer.model (Llama 3): "base64(token bytes) rank" per line, rank = id.
// tiktoken has no merge list: its BPE merges, at each step, the adjacent pair whose concatenation is the
// lowest-ranked token. The equivalent merge list (as HF's tiktoken converter builds it) has, for every token,
// each split into two tokens, ordered by the rank of the result (then of the left and right parts).
#include <algorithm>

#include "import/tokenizer/common.h"
#include "import/tokenizer/tokenizer_import.h"
#include "tokenizer/piece_map.h"
#include "tokenizer/unicode.h"
#include "util/error.h"

namespace kvlm {

namespace {

int base64_value(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

// Returns false on characters outside the alphabet or a bad length.
bool base64_decode(std::string_view text, std::string& out) {
    out.clear();
    if (text.empty() || text.size() % 4 != 0) return false;
    uint32_t buffer = 0;
    int bits = 0;
    size_t padding = 0;
    for (size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '=') {
            if (i + 2 < text.size()) return false;  // '=' only in the last two positions
            ++padding;
            continue;
        }
        if (padding) return false;
        const int v = base64_value(text[i]);
        if (v < 0) return false;
        buffer = (buffer << 6) | static_cast<uint32_t>(v);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out += static_cast<char>((buffer >> bits) & 0xFF);
        }
    }
    return true;
}

}  // namespace

TokenizerData tokenizer_from_tiktoken(const std::string& path, const std::string& config_path) {
    const std::string text = tokenizer_import::read_text_file(path);
    std::vector<std::string> token_bytes;  // by rank
    std::string decoded;
    size_t line_no = 0;
    for (size_t pos = 0; pos < text.size();) {
        size_t end = text.find('\n', pos);
        if (end == std::string::npos) end = text.size();
        std::string_view line(text.data() + pos, end - pos);
        pos = end + 1;
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.empty()) continue;
        const size_t space = line.find(' ');
        if (space == std::string_view::npos)
            throw_error("{}:{}: expected 'base64 rank', found no rank in '{}'", path, line_no, line.substr(0, 80));
        const std::string_view rank_text = line.substr(space + 1);
        int64_t rank = 0;
        if (rank_text.empty() || rank_text.size() > 9) rank = -1;
        for (char c : rank_text) rank = c >= '0' && c <= '9' && rank >= 0 ? rank * 10 + (c - '0') : -1;
        if (rank < 0) throw_error("{}:{}: rank is '{}', expected a non-negative integer", path, line_no, rank_text);
        if (!base64_decode(line.substr(0, space), decoded))
            throw_error("{}:{}: token '{}' is not valid base64", path, line_no, line.substr(0, space));
        if (rank != static_cast<int64_t>(token_bytes.size()))
            throw_error("{}:{}: rank is {}, expected {} (ranks must count up from 0)", path, line_no, rank,
                        token_bytes.size());
        token_bytes.push_back(decoded);
    }
    PieceMap ranks(token_bytes.size());  // views into token_bytes, which no longer grows
    for (size_t rank = 0; rank < token_bytes.size(); ++rank) {
        ranks.insert(token_bytes[rank], static_cast<int32_t>(rank));
        if (ranks.size() != rank + 1) throw_error("{}: token with rank {} repeats an earlier token", path, rank);
    }
    if (token_bytes.size() < 256) throw_error("{}: has {} tokens, expected at least the 256 single bytes", path, token_bytes.size());

    TokenizerData data;
    data.type = "bpe";
    data.pre = "llama3";
    data.tokens.reserve(token_bytes.size() + 256);
    for (const std::string& bytes : token_bytes) data.tokens.push_back(byte_level_encode(bytes));
    data.token_types.assign(data.tokens.size(), static_cast<int32_t>(TokenType::normal));
    struct Split {
        int32_t left, right;
    };
    std::vector<Split> splits;
    for (size_t rank = 0; rank < token_bytes.size(); ++rank) {
        const std::string_view bytes = token_bytes[rank];
        splits.clear();
        for (size_t cut = 1; cut < bytes.size(); ++cut) {
            const int32_t left = ranks.find(bytes.substr(0, cut));
            if (left < 0) continue;
            const int32_t right = ranks.find(bytes.substr(cut));
            if (right < 0) continue;
            splits.push_back({left, right});
        }
        std::sort(splits.begin(), splits.end(), [](const Split& a, const Split& b) {
            return a.left != b.left ? a.left < b.left : a.right < b.right;
        });
        for (const Split& s : splits) data.merges.push_back(data.tokens[s.left] + " " + data.tokens[s.right]);
    }

    std::string config = config_path;
    if (config.empty()) {
        config = tokenizer_import::sibling_path(path, "tokenizer_config.json");
        if (!tokenizer_import::file_exists(config))
            throw_error("{}: special tokens are not in a tiktoken file, expected tokenizer_config.json "
                        "(added_tokens_decoder) next to it", path);
    }
    tokenizer_import::apply_tokenizer_config(data, config);
    if (data.bos_id < 0) data.bos_id = tokenizer_import::find_token(data, "<|begin_of_text|>");
    data.add_bos = data.bos_id >= 0;  // Llama 3 always starts with <|begin_of_text|>
    if (data.eos_id < 0) data.eos_id = tokenizer_import::find_token(data, "<|end_of_text|>");
    tokenizer_import::finish(data, path);
    return data;
}

}  // namespace kvlm
