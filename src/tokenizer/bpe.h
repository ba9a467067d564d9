// Byte-level BPE ("bpe"): regex pre-tokenization, GPT-2 byte encoding, then ranked merges (lowest rank
// first, leftmost on ties) over token ids. Invariant: every symbol is a vocabulary token or a lone byte.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "format/tokenizer_data.h"
#include "tokenizer/pair_map.h"
#include "tokenizer/piece_map.h"
#include "tokenizer/pretokenizer.h"

namespace kvlm {

class BpeEncoder {
public:
    // `data` must have passed Tokenizer::validate (the encoder keeps copies of what it needs).
    explicit BpeEncoder(const TokenizerData& data);
    // text: raw bytes (no special tokens). Appends ids to `out`.
    void encode(std::string_view text, std::vector<int32_t>& out) const;
    // The distinct byte values of `text` (ascending) that have no token and so are dropped by encode.
    std::string bytes_without_token(std::string_view text) const;
    size_t n_merges() const { return merges_.size(); }

private:
    void encode_word(std::string_view word, std::vector<int32_t>& out) const;
    // The merge's pair split at its second space or later (vocabularies whose pieces contain ' '): its key and
    // the joined piece's id; false when no split names vocabulary pieces.
    bool split_at_later_space(const std::string& merge, uint64_t* key, int32_t* result) const;

    PreTokenizer pre_;
    bool ignore_merges_;  // Llama 3: a pre-tokenized word that is itself a token is taken whole
    PieceMap piece_to_id_;                                       // normal and byte pieces
    PairMap merges_;                                             // (left id, right id) -> rank, result
    std::array<int32_t, 256> byte_ids_;                          // token of each single byte, -1 if absent
};

}  // namespace kvlm
