// The tokenizer as stored in a .kvlm file: everything needed to encode and decode, in one plain struct.
// Importers (tokenizer_import.*) fill it from HF / GGUF / SentencePiece / tiktoken / llama2.c sources.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kvlm {

// Token types, numbered as in GGUF (tokenizer.ggml.token_type) so they pass through unchanged.
enum class TokenType : int32_t { normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };

struct TokenizerData {
    // "spm": SentencePiece-style BPE over scores with byte fallback (pieces use U+2581 for spaces).
    // "bpe": byte-level BPE over ranked merges (pieces are GPT-2 byte-to-unicode strings, e.g. "Ġthe").
    std::string type;
    // Pre-tokenizer for "bpe" (llama.cpp names): "gpt2", "llama3", "smollm" (= starcoder), "qwen2", ...
    std::string pre = "default";
    std::vector<std::string> tokens;       // [n_vocab] piece strings
    std::vector<float> scores;             // [n_vocab] for "spm"; empty for "bpe"
    std::vector<int32_t> token_types;      // [n_vocab] TokenType values
    std::vector<std::string> merges;       // for "bpe": "left right", highest priority first
    // For "bpe", derived from tokens and merges by `kvlm convert` (resolve_bpe_merges): per merge its left,
    // right and joined token ids, or -1 -1 -1 where it can never apply. Empty: computed when loading.
    std::vector<int32_t> merge_ids;
    int32_t bos_id = -1;
    int32_t eos_id = -1;
    int32_t unk_id = -1;
    int32_t pad_id = -1;
    std::vector<int32_t> stop_ids;         // extra end-of-generation ids (e.g. Llama 3 <|eot_id|>)
    bool add_bos = false;                  // prepend BOS when encoding a prompt
    bool add_space_prefix = false;         // "spm": prepend U+2581 to the text (SentencePiece add_dummy_prefix)
};

}  // namespace kvlm
