// Test helper: tiny random-weight models written with ModelWriter (no shared data needed), for tests of
// the model file, inspect, and anything that needs a small valid .kvlm quickly.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model_file.h"

namespace kvlm::test {

struct TinyModel {
    ModelMetadata metadata;
    std::vector<TensorInfo> tensors;         // expected_tensors(config, dtype)
    std::vector<std::vector<uint8_t>> data;  // [n_tensors] raw bytes, N(0, 1) values in the tensor's dtype
};

// n_vocab 32, n_embd 16, 2 layers, 4 heads, 2 KV heads, head_dim 4, n_ff 24, n_ctx 128, llama3 RoPE
// scaling; architecture qwen2 when qkv_bias.
ModelConfig tiny_config(bool tied, bool qkv_bias);
// "spm", 32 tokens: <unk> <s> </s> then "▁tok3".."▁tok31"; bos 1, eos 2, stop ids {2, 31}, add_bos.
TokenizerData tiny_tokenizer();
TinyModel make_tiny(DType dtype, bool tied, bool qkv_bias, uint32_t seed = 7);
// Writes the model to `path` and returns its fingerprint.
std::string write_tiny(const std::string& path, const TinyModel& model);

}  // namespace kvlm::test
