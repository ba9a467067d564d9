// A read-only view of one tensor's bytes (usually inside the memory-mapped model file).
// Shapes are row-major, outermost first: a linear layer's weight is [out_features, in_features].
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "format/dtype.h"

namespace kvlm {

// Number of elements in a tensor of this shape (1 for an empty shape). No overflow check: parsers bound
// every dimension before they trust a product.
inline int64_t element_count(const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

struct TensorView {
    const void* data = nullptr;
    DType dtype = DType::f32;
    std::vector<int64_t> shape;

    int64_t n_elements() const { return element_count(shape); }
    size_t n_bytes() const { return size_t(dtype_bytes(dtype, uint64_t(n_elements()))); }
};

std::string shape_string(const std::vector<int64_t>& shape);  // "[576, 192]"

// Canonical tensor names in a .kvlm file (GGUF-style). q/k weights are stored in the Hugging Face
// rotate_half RoPE order: within each head, dimension i pairs with i + head_dim/2.
namespace tensor_names {
inline const char* token_embd = "token_embd.weight";      // [n_vocab, n_embd]
inline const char* output_norm = "output_norm.weight";    // [n_embd]
inline const char* output = "output.weight";              // [n_vocab, n_embd], absent when tied
std::string layer(int layer_index, const char* suffix);   // layer(3, "attn_q.weight") = "blk.3.attn_q.weight"
// Per-layer suffixes and shapes:
//   attn_norm.weight [n_embd]               ffn_norm.weight [n_embd]
//   attn_q.weight [n_heads*head_dim, n_embd]   attn_q.bias [n_heads*head_dim]     (bias: qwen2 only)
//   attn_k.weight [n_kv_heads*head_dim, n_embd] attn_k.bias [n_kv_heads*head_dim]
//   attn_v.weight [n_kv_heads*head_dim, n_embd] attn_v.bias [n_kv_heads*head_dim]
//   attn_output.weight [n_embd, n_heads*head_dim]
//   ffn_gate.weight [n_ff, n_embd]  ffn_up.weight [n_ff, n_embd]  ffn_down.weight [n_embd, n_ff]
}  // namespace tensor_names

}  // namespace kvlm
