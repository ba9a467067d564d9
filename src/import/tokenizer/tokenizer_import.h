// Reading tokenizers from the formats models ship with, into TokenizerData.
#pragma once
#include <string>

#include "format/tokenizer_data.h"

namespace kvlm {

class GgufFile;

// HF tokenizer.json (model.type BPE; byte-level or SentencePiece-style with byte fallback), plus the
// added tokens and bos/eos settings of tokenizer_config.json when that path is non-empty.
TokenizerData tokenizer_from_hf_json(const std::string& tokenizer_json, const std::string& tokenizer_config_json);
// GPT-2 style vocab.json + merges.txt (Qwen2), with added_tokens.json / tokenizer_config.json if present
// in the same directory.
TokenizerData tokenizer_from_vocab_merges(const std::string& vocab_json, const std::string& merges_txt);
// Meta's tiktoken tokenizer.model (base64 token + rank per line), special tokens from tokenizer_config.json.
TokenizerData tokenizer_from_tiktoken(const std::string& tokenizer_model, const std::string& tokenizer_config_json);
// SentencePiece tokenizer.model (protobuf ModelProto, BPE type).
TokenizerData tokenizer_from_sentencepiece(const std::string& tokenizer_model);
// llama2.c tokenizer.bin (max_token_length, then score + length + bytes per token).
TokenizerData tokenizer_from_llama2c(const std::string& tokenizer_bin, int32_t n_vocab);
// tokenizer.ggml.* metadata.
TokenizerData tokenizer_from_gguf(const GgufFile& gguf);

// Picks the reader from a path: a directory (tokenizer.json, vocab.json+merges.txt, tokenizer.model),
// a tokenizer.json, a tokenizer.model (tiktoken or SentencePiece, detected), a llama2.c .bin, or a .gguf.
// n_vocab_hint is needed for llama2.c tokenizer.bin (0 = read until end of file).
TokenizerData load_tokenizer_source(const std::string& path, int32_t n_vocab_hint = 0);

}  // namespace kvlm
