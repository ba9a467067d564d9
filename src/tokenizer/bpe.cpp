// Byte-level BPE over ranked merges (see bpe.h). Per pre-tokenized word: a linked list of
// symbols and a priority queue of mergeable neighbours; stale entries are detected by id and adjacency.
#include "tokenizer/bpe.h"

#include <queue>
#include <string>

#include "tokenizer/unicode.h"
#include "util/error.h"

namespace kvlm {

namespace {

struct Symbol {
    int32_t id;  // -1: a byte without a token (cannot merge)
    int32_t prev, next;
    bool alive;
};

struct Bigram {
    int32_t rank;
    int32_t left, right;
    int32_t left_id, right_id;
    int32_t result;
};

struct BigramOrder {  // lowest rank first, then leftmost
    bool operator()(const Bigram& a, const Bigram& b) const {
        return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    }
};

}  // namespace

BpeEncoder::BpeEncoder(const TokenizerData& data) : pre_(data.pre) {
    ignore_merges_ = pre_.name() == "llama3";
    std::vector<std::string_view> vocabulary;
    std::vector<int32_t> vocabulary_ids;
    vocabulary.reserve(data.tokens.size());
    vocabulary_ids.reserve(data.tokens.size());
    for (size_t id = 0; id < data.tokens.size(); ++id) {
        const auto type = static_cast<TokenType>(data.token_types[id]);
        if (type == TokenType::normal || type == TokenType::byte) {
            vocabulary.push_back(data.tokens[id]);
            vocabulary_ids.push_back(static_cast<int32_t>(id));
        }
    }
    piece_to_id_.insert_many(vocabulary.data(), vocabulary_ids.data(), vocabulary.size());
    for (int b = 0; b < 256; ++b) {
        byte_ids_[b] = piece_to_id_.find(byte_to_unicode(static_cast<uint8_t>(b)));
    }

    merges_.reserve(data.merges.size());
    // Byte-level pieces never contain ' ', so a merge's first space almost always separates its pair: look
    // those pairs and their joins up in batches (the lookups' cache misses overlap), then try the other
    // spaces one by one for merges whose first split does not name vocabulary pieces.
    constexpr size_t kBatch = 256;
    std::vector<std::string_view> pieces(2 * kBatch), joined_views(kBatch);
    std::vector<std::string> joined(kBatch);
    std::vector<int32_t> ids(2 * kBatch), results(kBatch);
    std::vector<uint64_t> keys(kBatch);
    std::vector<BpeMerge> found(kBatch);
    for (size_t first = 0; first < data.merges.size(); first += kBatch) {
        const size_t count = std::min(kBatch, data.merges.size() - first);
        for (size_t i = 0; i < count; i++) {
            const std::string_view merge = data.merges[first + i];
            const size_t space = std::min(merge.find(' '), merge.size());
            pieces[2 * i] = merge.substr(0, space);
            pieces[2 * i + 1] = space < merge.size() ? merge.substr(space + 1) : std::string_view();
            joined[i].assign(pieces[2 * i]);
            joined[i].append(pieces[2 * i + 1]);
            joined_views[i] = joined[i];
        }
        piece_to_id_.find_many(pieces.data(), ids.data(), 2 * count);
        piece_to_id_.find_many(joined_views.data(), results.data(), count);
        size_t n_found = 0;  // in rank order, so that the first (lowest-rank) merge of a pair stays
        for (size_t i = 0; i < count; i++) {
            const int32_t rank = static_cast<int32_t>(first + i);
            const std::string& merge = data.merges[first + i];
            if (merge.find(' ') == std::string::npos) continue;  // no pair: can never apply
            if (ids[2 * i] >= 0 && ids[2 * i + 1] >= 0 && results[i] >= 0) {
                keys[n_found] = PairMap::key(ids[2 * i], ids[2 * i + 1]);
                found[n_found++] = BpeMerge{rank, results[i]};
            } else if (split_at_later_space(merge, &keys[n_found], &found[n_found].result)) {
                found[n_found++].rank = rank;
            }
        }
        merges_.insert_many(keys.data(), found.data(), n_found);
    }
}

bool BpeEncoder::split_at_later_space(const std::string& merge, uint64_t* key, int32_t* result) const {
    std::string joined;
    for (size_t space = merge.find(' ', merge.find(' ') + 1); space != std::string::npos;
         space = merge.find(' ', space + 1)) {
        const int32_t left = piece_to_id_.find(std::string_view(merge).substr(0, space));
        if (left < 0) continue;
        const int32_t right = piece_to_id_.find(std::string_view(merge).substr(space + 1));
        if (right < 0) continue;
        joined.assign(merge, 0, space);
        joined.append(merge, space + 1, std::string::npos);
        *result = piece_to_id_.find(joined);
        if (*result < 0) continue;
        *key = PairMap::key(left, right);
        return true;
    }
    return false;  // a merge over pieces missing from the vocabulary can never apply and is skipped
}

void BpeEncoder::encode(std::string_view text, std::vector<int32_t>& out) const {
    for (std::string_view word : pre_.split(text)) encode_word(word, out);
}

void BpeEncoder::encode_word(std::string_view word, std::vector<int32_t>& out) const {
    if (ignore_merges_) {
        const int32_t id = piece_to_id_.find(byte_level_encode(word));
        if (id >= 0) {
            out.push_back(id);
            return;
        }
    }
    const auto n = static_cast<int32_t>(word.size());
    std::vector<Symbol> symbols(word.size());
    for (int32_t i = 0; i < n; ++i)
        symbols[i] = {byte_ids_[static_cast<uint8_t>(word[i])], i - 1, i + 1 < n ? i + 1 : -1, true};

    std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
    auto try_add = [&](int32_t left, int32_t right) {
        if (left < 0 || right < 0) return;
        const int32_t left_id = symbols[left].id, right_id = symbols[right].id;
        if (left_id < 0 || right_id < 0) return;
        const BpeMerge* merge = merges_.find(PairMap::key(left_id, right_id));
        if (!merge) return;
        queue.push({merge->rank, left, right, left_id, right_id, merge->result});
    };
    for (int32_t i = 1; i < n; ++i) try_add(i - 1, i);

    while (!queue.empty()) {
        const Bigram bigram = queue.top();
        queue.pop();
        Symbol& left = symbols[bigram.left];
        Symbol& right = symbols[bigram.right];
        if (!left.alive || !right.alive || left.next != bigram.right || left.id != bigram.left_id ||
            right.id != bigram.right_id)
            continue;  // stale
        left.id = bigram.result;
        right.alive = false;
        left.next = right.next;
        if (right.next >= 0) symbols[right.next].prev = bigram.left;
        try_add(left.prev, bigram.left);
        try_add(bigram.left, left.next);
    }

    // A byte without a token is dropped, as Hugging Face tokenizers (BPE without unk_token) and llama.cpp do;
    // emitting unk would put SmolLM2's <|endoftext|> into the prompt. Callers warn (bytes_without_token).
    for (int32_t i = 0; i >= 0 && i < n; i = symbols[i].next)
        if (symbols[i].id >= 0) out.push_back(symbols[i].id);
}

std::string BpeEncoder::bytes_without_token(std::string_view text) const {
    bool seen[256] = {};
    for (char c : text) seen[static_cast<uint8_t>(c)] = true;
    std::string missing;
    for (int b = 0; b < 256; ++b)
        if (seen[b] && byte_ids_[b] < 0) missing.push_back(static_cast<char>(b));
    return missing;
}

}  // namespace kvlm
