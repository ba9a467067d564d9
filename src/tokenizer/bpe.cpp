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

namespace {

bool is_vocabulary_piece(const TokenizerData& data, size_t id) {
    const auto type = static_cast<TokenType>(data.token_types[id]);
    return type == TokenType::normal || type == TokenType::byte;
}

PieceMap vocabulary_map(const TokenizerData& data) {
    std::vector<std::string_view> pieces;
    std::vector<int32_t> ids;
    pieces.reserve(data.tokens.size());
    ids.reserve(data.tokens.size());
    for (size_t id = 0; id < data.tokens.size(); ++id)
        if (is_vocabulary_piece(data, id)) {
            pieces.push_back(data.tokens[id]);
            ids.push_back(static_cast<int32_t>(id));
        }
    PieceMap map;
    map.insert_many(pieces.data(), ids.data(), pieces.size());
    return map;
}

// The merge's pair split at its second space or later (vocabularies whose pieces contain ' '): its three
// ids; false when no split names vocabulary pieces.
bool split_at_later_space(const PieceMap& pieces, const std::string& merge, int32_t* ids) {
    std::string joined;
    for (size_t space = merge.find(' ', merge.find(' ') + 1); space != std::string::npos;
         space = merge.find(' ', space + 1)) {
        const int32_t left = pieces.find(std::string_view(merge).substr(0, space));
        if (left < 0) continue;
        const int32_t right = pieces.find(std::string_view(merge).substr(space + 1));
        if (right < 0) continue;
        joined.assign(merge, 0, space);
        joined.append(merge, space + 1, std::string::npos);
        const int32_t result = pieces.find(joined);
        if (result < 0) continue;
        ids[0] = left, ids[1] = right, ids[2] = result;
        return true;
    }
    return false;  // a merge over pieces missing from the vocabulary can never apply
}

std::vector<int32_t> resolve_merges(const TokenizerData& data, const PieceMap& vocabulary) {
    std::vector<int32_t> merge_ids(3 * data.merges.size(), -1);
    // Byte-level pieces never contain ' ', so a merge's first space almost always separates its pair: look
    // those pairs and their joins up in batches (the lookups' cache misses overlap), then try the other
    // spaces one by one for merges whose first split does not name vocabulary pieces.
    constexpr size_t kBatch = 256;
    std::vector<std::string_view> pieces(2 * kBatch), joined_views(kBatch);
    std::vector<std::string> joined(kBatch);
    std::vector<int32_t> ids(2 * kBatch), results(kBatch);
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
        vocabulary.find_many(pieces.data(), ids.data(), 2 * count);
        vocabulary.find_many(joined_views.data(), results.data(), count);
        for (size_t i = 0; i < count; i++) {
            const std::string& merge = data.merges[first + i];
            int32_t* out = merge_ids.data() + 3 * (first + i);
            if (merge.find(' ') == std::string::npos) continue;  // no pair: can never apply
            if (ids[2 * i] >= 0 && ids[2 * i + 1] >= 0 && results[i] >= 0) {
                out[0] = ids[2 * i], out[1] = ids[2 * i + 1], out[2] = results[i];
            } else {
                split_at_later_space(vocabulary, merge, out);
            }
        }
    }
    return merge_ids;
}

}  // namespace

std::vector<int32_t> resolve_bpe_merges(const TokenizerData& data) { return resolve_merges(data, vocabulary_map(data)); }

BpeEncoder::BpeEncoder(const TokenizerData& data) : pre_(data.pre) {
    ignore_merges_ = pre_.name() == "llama3";
    const bool stored = !data.merge_ids.empty();  // Tokenizer::validate checked their count and range
    if (ignore_merges_ || !stored) piece_to_id_ = vocabulary_map(data);
    const std::vector<int32_t> computed = stored ? std::vector<int32_t>() : resolve_merges(data, piece_to_id_);
    const std::vector<int32_t>& merge_ids = stored ? data.merge_ids : computed;

    // The token of each single byte: the first vocabulary piece that is the byte's GPT-2 character.
    byte_ids_.fill(-1);
    for (size_t id = 0; id < data.tokens.size(); ++id) {
        const std::string& piece = data.tokens[id];
        if (piece.empty() || piece.size() > 2 || !is_vocabulary_piece(data, id)) continue;
        size_t length = 0;
        const int byte = unicode_to_byte(utf8_decode(piece.data(), piece.size(), &length));
        if (byte >= 0 && length == piece.size() && byte_ids_[byte] < 0) byte_ids_[byte] = static_cast<int32_t>(id);
    }

    // In rank order, so that the first (lowest-rank) merge of a pair stays.
    std::vector<uint64_t> keys;
    std::vector<BpeMerge> found;
    keys.reserve(data.merges.size());
    found.reserve(data.merges.size());
    for (size_t rank = 0; rank < data.merges.size(); rank++) {
        const int32_t* ids = merge_ids.data() + 3 * rank;
        if (ids[0] < 0) continue;
        keys.push_back(PairMap::key(ids[0], ids[1]));
        found.push_back(BpeMerge{static_cast<int32_t>(rank), ids[2]});
    }
    merges_.reserve(keys.size());
    constexpr size_t kBatch = 256;  // slots prefetched a batch at a time: they stay in cache until written
    for (size_t first = 0; first < keys.size(); first += kBatch)
        merges_.insert_many(keys.data() + first, found.data() + first, std::min(kBatch, keys.size() - first));
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
