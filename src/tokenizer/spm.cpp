// SentencePiece-style BPE over piece scores (see spm.h). A priority queue of candidate
// bigrams over a linked list of symbols: O(n log n), stale queue entries are skipped when popped.
#include "tokenizer/spm.h"

#include <queue>

#include "tokenizer/unicode.h"
#include "util/error.h"

namespace kvlm {

namespace {

struct Symbol {
    uint32_t start;   // byte offset in the text
    uint32_t length;  // 0 once merged into its left neighbour
    int32_t prev, next;
};

struct Bigram {
    float score;
    int32_t left, right;
    uint32_t length;  // bytes of the merged piece, to detect stale entries
};

struct BigramOrder {  // highest score first, then leftmost
    bool operator()(const Bigram& a, const Bigram& b) const {
        return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
};

int parse_byte_piece(const std::string& piece) {  // "<0x0A>" -> 10, otherwise -1
    if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
    int value = 0;
    for (int i = 3; i < 5; ++i) {
        const char c = piece[i];
        const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
                        : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (digit < 0) return -1;
        value = value * 16 + digit;
    }
    return value;
}

}  // namespace

SpmEncoder::SpmEncoder(const TokenizerData& data) : data_(data) {
    byte_ids_.fill(-1);
    piece_to_id_.reserve(data.tokens.size());
    for (size_t id = 0; id < data.tokens.size(); ++id) {
        const auto type = static_cast<TokenType>(data.token_types[id]);
        const std::string& piece = data.tokens[id];
        if (type == TokenType::byte) {
            const int byte = parse_byte_piece(piece);
            if (byte >= 0 && byte_ids_[byte] < 0) byte_ids_[byte] = static_cast<int32_t>(id);
        } else if (type == TokenType::normal || type == TokenType::user_defined) {
            piece_to_id_.insert(piece, static_cast<int32_t>(id));  // first id wins for duplicates
        }
    }
}

void SpmEncoder::encode(std::string_view text, std::vector<int32_t>& out) const {
    if (text.empty()) return;
    if (text.size() > UINT32_MAX / 2) throw_error("tokenizer: text of {} bytes is too long to encode", text.size());
    std::vector<Symbol> symbols;
    symbols.reserve(text.size());
    for (size_t offset = 0; offset < text.size();) {
        // One symbol per valid UTF-8 character; each invalid byte is a symbol of its own (byte fallback).
        const int status = utf8_sequence_status(text.data() + offset, text.size() - offset);
        const size_t length = status > 0 ? static_cast<size_t>(status) : 1;
        const auto index = static_cast<int32_t>(symbols.size());
        symbols.push_back({static_cast<uint32_t>(offset), static_cast<uint32_t>(length), index - 1,
                           offset + length == text.size() ? -1 : index + 1});
        offset += length;
    }

    std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
    auto try_add = [&](int32_t left, int32_t right) {
        if (left < 0 || right < 0) return;
        const uint32_t length = symbols[left].length + symbols[right].length;
        const int32_t id = piece_to_id_.find(text.substr(symbols[left].start, length));
        if (id < 0) return;
        queue.push({data_.scores[id], left, right, length});
    };
    for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add(i - 1, i);

    while (!queue.empty()) {
        const Bigram bigram = queue.top();
        queue.pop();
        Symbol& left = symbols[bigram.left];
        Symbol& right = symbols[bigram.right];
        if (left.length == 0 || right.length == 0 || left.length + right.length != bigram.length) continue;
        left.length += right.length;
        right.length = 0;
        left.next = right.next;
        if (right.next >= 0) symbols[right.next].prev = bigram.left;
        try_add(left.prev, bigram.left);
        try_add(bigram.left, left.next);
    }

    for (int32_t i = 0; i != -1; i = symbols[i].next) {
        const std::string_view piece = text.substr(symbols[i].start, symbols[i].length);
        const int32_t id = piece_to_id_.find(piece);
        if (id >= 0) {
            out.push_back(id);
            continue;
        }
        for (char c : piece) {  // byte fallback, else unknown
            const int32_t byte_id = byte_ids_[static_cast<uint8_t>(c)];
            if (byte_id >= 0) {
                out.push_back(byte_id);
            } else if (data_.unk_id >= 0) {
                out.push_back(data_.unk_id);
                break;  // one <unk> per character, as SentencePiece does without byte fallback
            }
        }
    }
}

}  // namespace kvlm
