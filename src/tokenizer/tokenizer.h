// Text <-> token ids for the two tokenizer families kvlm supports ("spm" and "bpe", see tokenizer_data.h).
// Special/added tokens (control and user_defined types) are matched in the text before BPE runs.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "format/tokenizer_data.h"

namespace kvlm {

// Bytes [begin, end) of a text.
struct TextRange {
    size_t begin = 0, end = 0;
};

class Tokenizer {
public:
    explicit Tokenizer(const TokenizerData& data);  // throws Error if the data is inconsistent
    // The same, keeping a reference to `data` instead of a copy (the copy is 4 ms of a 49k-token vocabulary's
    // start-up): `data` must outlive the tokenizer, as the metadata of the engine's model file does.
    struct KeepReference {};
    Tokenizer(const TokenizerData& data, KeepReference);
    ~Tokenizer();
    // The checks the constructor makes (sizes, types, ids, pre-tokenizer name, merge format), without
    // building the tokenizer; throws Error describing the first problem.
    static void validate(const TokenizerData& data);

    // add_bos: prepend BOS when the tokenizer's settings say so (data.add_bos) - pass false to never add.
    // parse_special: match special/added tokens in the text (true for prompts/chat templates).
    // A byte-level BPE vocabulary may lack some single bytes (SmolLM2: \x04, \x06, ...): encode drops them, as
    // Hugging Face tokenizers and llama.cpp do, so callers warn about user text with bytes_without_token.
    // plain_ranges (sorted, disjoint byte ranges of `text`): parts encoded as with parse_special false - no
    // special token is matched that overlaps one (chat messages under --no-special, inside a template whose
    // own special tokens are parsed). Text runs across range edges are encoded as one, as without ranges.
    std::vector<int32_t> encode(std::string_view text, bool add_bos = true, bool parse_special = true,
                                const std::vector<TextRange>& plain_ranges = {}) const;
    // `text` as it continues earlier text: no BOS, no special tokens, no SentencePiece dummy prefix (the
    // tokens of text that constrained decoding forces after the model's own).
    std::vector<int32_t> encode_continuation(std::string_view text) const;
    // The distinct byte values of `text` (ascending) that encode drops; always "" for SentencePiece-style
    // vocabularies (their unknown characters become byte-fallback tokens or unk, never nothing).
    std::string bytes_without_token(std::string_view text) const;
    // "" when encode keeps every byte of `text`; otherwise a warning naming the dropped bytes, e.g.
    // "the prompt has bytes with no token in this vocabulary (\x04, \x06): they are dropped (as Hugging Face
    // tokenizers and llama.cpp do)". `what` names the text ("the prompt").
    std::string dropped_bytes_warning(std::string_view text, std::string_view what) const;
    // Bytes this token contributes to the output (byte-fallback and byte-level pieces decoded; control
    // tokens such as BOS/EOS give ""). May be a partial UTF-8 sequence.
    std::string decode_token(int32_t id) const;
    std::string decode(const std::vector<int32_t>& ids) const;
    const std::string& piece(int32_t id) const;  // raw vocabulary string
    int32_t n_vocab() const;
    int32_t bos_id() const;
    int32_t eos_id() const;
    bool is_end_of_generation(int32_t id) const;  // eos or one of stop_ids
    const TokenizerData& data() const;

private:
    void build();  // everything but the data, from *impl_->data
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// Streams decoded tokens as text that is always valid UTF-8: a multi-byte character split across
// tokens is held back until complete; invalid bytes become U+FFFD.
class Utf8StreamDecoder {
public:
    std::string push(const std::string& bytes);  // returns the complete characters now available
    std::string flush();                         // what is left (incomplete tail as U+FFFD)

private:
    std::string pending_;
};

}  // namespace kvlm
