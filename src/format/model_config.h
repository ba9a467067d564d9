// Hyperparameters of a Llama-family model, as stored in a .kvlm file.
// Invariant once validated: n_heads * head_dim is the attention width, n_heads % n_kv_heads == 0.
#pragma once
#include <cstdint>
#include <string>

namespace kvlm {

struct RopeScaling {
    std::string type = "none";  // "none" | "llama3" (Llama 3.1/3.2 frequency-dependent scaling)
    float factor = 1.0f;
    float low_freq_factor = 1.0f;
    float high_freq_factor = 4.0f;
    int32_t original_max_position = 8192;
};

// Far above any dense model kvlm runs (405B); the per-field ranges alone would allow ~4e14.
constexpr int64_t kMaxParams = int64_t(1) << 40;

struct ModelConfig {
    std::string architecture = "llama";  // "llama" | "qwen2" (same graph, qwen2 has QKV bias)
    int32_t n_vocab = 0;
    int32_t n_embd = 0;      // model width (hidden_size)
    int32_t n_layers = 0;
    int32_t n_heads = 0;     // query heads
    int32_t n_kv_heads = 0;  // key/value heads (GQA when < n_heads)
    int32_t head_dim = 0;
    int32_t n_ff = 0;        // MLP hidden width (intermediate_size)
    int32_t n_ctx = 0;       // trained context length
    float rope_theta = 10000.0f;
    RopeScaling rope_scaling;
    float norm_eps = 1e-5f;
    bool tied_embeddings = false;  // output head reuses token_embd.weight
    bool qkv_bias = false;

    // Throws Error naming `source` and the offending field if the values are inconsistent or absurd
    // (each field in a range far above real models, n_params() at most kMaxParams).
    void validate(const std::string& source) const;
    int64_t n_params() const;  // parameter count implied by the shape
};

}  // namespace kvlm
