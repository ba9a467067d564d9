// SentencePiece-style BPE ("spm"): repeatedly merges the adjacent pair whose concatenation is the
// highest-scoring vocabulary piece; characters left without a piece fall back to <0xXX> byte tokens.
// Invariant: every merged symbol is a piece of the vocabulary.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "format/tokenizer_data.h"
#include "tokenizer/piece_map.h"

namespace kvlm {

class SpmEncoder {
public:
    // `data` must outlive the encoder (the piece map points into data.tokens).
    explicit SpmEncoder(const TokenizerData& data);
    // text: already normalized (spaces escaped to U+2581, dummy prefix added). Appends ids to `out`.
    void encode(std::string_view text, std::vector<int32_t>& out) const;

private:
    const TokenizerData& data_;
    PieceMap piece_to_id_;                 // normal and user_defined pieces
    std::array<int32_t, 256> byte_ids_;                           // <0xXX> tokens, -1 if absent
};

}  // namespace kvlm
