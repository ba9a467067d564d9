// The tensors of a Llama-family model as TensorViews, per layer: bound from a ModelFile (pointing into
// its mapping) or filled by tests from memory. Invariant after check_model_weights: every view has the
// shape expected_tensors() gives for the config, 1-D tensors are f32, matrices f32/f16/bf16.
#pragma once
#include <string>
#include <vector>

#include "format/model_config.h"
#include "format/tensor.h"

namespace kvlm {

class ModelFile;

struct LayerWeights {
    TensorView attn_norm;    // [n_embd] f32
    TensorView attn_q;       // [n_heads*head_dim, n_embd]
    TensorView attn_k;       // [n_kv_heads*head_dim, n_embd]
    TensorView attn_v;       // [n_kv_heads*head_dim, n_embd]
    TensorView attn_q_bias;  // [n_heads*head_dim] f32, data null unless qkv_bias
    TensorView attn_k_bias;  // [n_kv_heads*head_dim] f32, data null unless qkv_bias
    TensorView attn_v_bias;  // [n_kv_heads*head_dim] f32, data null unless qkv_bias
    TensorView attn_output;  // [n_embd, n_heads*head_dim]
    TensorView ffn_norm;     // [n_embd] f32
    TensorView ffn_gate;     // [n_ff, n_embd]
    TensorView ffn_up;       // [n_ff, n_embd]
    TensorView ffn_down;     // [n_embd, n_ff]
};

struct ModelWeights {
    TensorView token_embd;   // [n_vocab, n_embd]
    std::vector<LayerWeights> layers;  // [n_layers]
    TensorView output_norm;  // [n_embd] f32
    TensorView output;       // [n_vocab, n_embd]; the same view as token_embd when tied
};

// Binds every tensor of `model` (ModelFile::require checks presence, dtype and shape).
ModelWeights bind_model_weights(const ModelFile& model);

// Throws Error naming `source` and the tensor whose presence, shape or dtype does not fit `config`.
void check_model_weights(const ModelConfig& config, const ModelWeights& weights, const std::string& source);


}  // namespace kvlm
