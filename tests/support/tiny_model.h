// Test helper: small valid .kvlm files written with ModelWriter (no shared data needed). A TinyModel is a
// file's contents (metadata, tensor list, bytes) that a test may edit before writing to get a malformed
// file; the random weights come from random_model.h.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "format/model_file.h"
#include "support/random_model.h"

namespace kvlm::test {

struct TinyModel {
    ModelMetadata metadata;
    std::vector<TensorInfo> tensors;         // expected_tensors(config, dtype)
    std::vector<std::vector<uint8_t>> data;  // [n_tensors] raw bytes in the tensor's dtype
};

// n_vocab 32, n_embd 16, 2 layers, 4 heads, 2 KV heads, head_dim 4, n_ff 24, n_ctx 128, llama3 RoPE
// scaling; architecture qwen2 when qkv_bias.
ModelConfig tiny_config(bool tied, bool qkv_bias);
// "spm", 32 tokens: <unk> <s> </s> then "▁tok3".."▁tok31"; bos 1, eos 2, stop ids {2, 31}, add_bos.
TokenizerData tiny_tokenizer();
// tiny_config and tiny_tokenizer with make_random_model's weights. Same seed = same bytes.
TinyModel make_tiny(DType dtype, bool tied, bool qkv_bias, uint32_t seed = 7);
// Writes the model to `path` and returns its fingerprint.
std::string write_tiny(const std::string& path, const TinyModel& model);

// Writes an in-memory model to a .kvlm file with a placeholder BPE tokenizer of n_vocab pieces
// ("a", "b", "ab", "<3>", "<4>", ...; one merge), so ModelFile::open + make_cpu_backend can be tested on it.
// `dtype` must be the one the model was made with.
void write_random_model(const RandomModel& model, DType dtype, const std::string& path);

}  // namespace kvlm::test
