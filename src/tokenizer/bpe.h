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

// The merges of a byte-level BPE vocabulary as token ids, three per merge: left, right and the joined piece,
// or -1 -1 -1 for a merge that can never apply (a piece missing from the vocabulary). `kvlm convert` stores
// them (tokenizer.merge_ids), so that loading does not look up 150k pieces (half a 49k-merge tokenizer's
// start-up). `data` must have passed Tokenizer::validate.
std::vector<int32_t> resolve_bpe_merges(const TokenizerData& data);

class BpeEncoder {
public:
    // `data` must have passed Tokenizer::validate (the encoder keeps copies of what it needs). Uses
    // data.merge_ids where they are stored.
    explicit BpeEncoder(const TokenizerData& data);
    // text: raw bytes (no special tokens). Appends ids to `out`.
    void encode(std::string_view text, std::vector<int32_t>& out) const;
    // The distinct byte values of `text` (ascending) that have no token and so are dropped by encode.
    std::string bytes_without_token(std::string_view text) const;
    size_t n_merges() const { return merges_.size(); }

private:
    void encode_word(std::string_view word, std::vector<int32_t>& out) const;

    PreTokenizer pre_;
    bool ignore_merges_;  // Llama 3: a pre-tokenized word that is itself a token is taken whole
    PieceMap piece_to_id_;  // normal and byte pieces; only built where encode needs it (ignore_merges_)
    PairMap merges_;                                             // (left id, right id) -> rank, result
    std::array<int32_t, 256> byte_ids_;                          // token of each single byte, -1 if absent
};

}  // namespace kvlm
