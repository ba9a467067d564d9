// Validation of model hyperparameters (shared by the loader and every importer).
#include "format/model_config.h"

#include <cmath>

#include "util/error.h"

namespace kvlm {

void ModelConfig::validate(const std::string& source) const {
    auto check_range = [&](const char* field, int64_t value, int64_t lo, int64_t hi) {
        if (value < lo || value > hi)
            throw_error("{}: {} = {} is out of range (expected {}..{})", source, field, value, lo, hi);
    };
    if (architecture != "llama" && architecture != "qwen2")
        throw_error("{}: architecture '{}' is not supported (supported: llama, qwen2)", source, architecture);
    check_range("n_vocab", n_vocab, 1, 1 << 22);
    check_range("n_embd", n_embd, 1, 1 << 17);
    check_range("n_layers", n_layers, 1, 1024);
    check_range("n_heads", n_heads, 1, 1024);
    check_range("n_kv_heads", n_kv_heads, 1, n_heads);
    check_range("head_dim", head_dim, 2, 1024);
    check_range("n_ff", n_ff, 1, 1 << 20);
    check_range("n_ctx", n_ctx, 1, 1 << 24);
    if (head_dim % 2 != 0) throw_error("{}: head_dim = {} must be even for RoPE", source, head_dim);
    if (n_heads % n_kv_heads != 0)
        throw_error("{}: n_heads = {} is not a multiple of n_kv_heads = {}", source, n_heads, n_kv_heads);
    if (!(rope_theta > 0.0f) || !std::isfinite(rope_theta))
        throw_error("{}: rope_theta = {} must be positive and finite", source, rope_theta);
    if (!(norm_eps > 0.0f && norm_eps < 1.0f)) throw_error("{}: norm_eps = {} is out of range", source, norm_eps);
    if (rope_scaling.type != "none" && rope_scaling.type != "llama3")
        throw_error("{}: rope scaling '{}' is not supported (supported: none, llama3)", source, rope_scaling.type);
    if (rope_scaling.type == "llama3" &&
        !(rope_scaling.factor >= 1.0f && std::isfinite(rope_scaling.factor) && rope_scaling.low_freq_factor > 0.0f &&
          rope_scaling.original_max_position > 0 && rope_scaling.high_freq_factor > rope_scaling.low_freq_factor &&
          std::isfinite(rope_scaling.high_freq_factor)))
        throw_error("{}: llama3 rope scaling parameters are inconsistent", source);
    // Each field is in range, but together they could still describe petabytes of weights.
    if (n_params() > kMaxParams)
        throw_error("{}: the shape implies {} parameters, more than the limit of {} (about 1.1 trillion); the "
                    "hyperparameters are corrupted or absurd",
                    source, n_params(), kMaxParams);
}

int64_t ModelConfig::n_params() const {
    int64_t q = int64_t(n_heads) * head_dim, kv = int64_t(n_kv_heads) * head_dim;
    int64_t per_layer = 2 * int64_t(n_embd)                    // norms
                        + int64_t(n_embd) * (q + 2 * kv) + q * n_embd  // attention
                        + 3 * int64_t(n_embd) * n_ff;          // MLP
    if (qkv_bias) per_layer += q + 2 * kv;
    int64_t total = int64_t(n_layers) * per_layer + int64_t(n_vocab) * n_embd + n_embd;
    if (!tied_embeddings) total += int64_t(n_vocab) * n_embd;
    return total;
}

}  // namespace kvlm
