// The CPU forward-pass ops: the reference twins of the CUDA kernels (same arguments; pool may be null).
// Each output element's arithmetic is independent of batch size, block layout and thread count.
#pragma once
#include <cstddef>
#include <cstdint>

#include "compute/matmul_cpu.h"
#include "format/dtype.h"
#include "format/model_config.h"

namespace kvlm {

class ThreadPool;

// Where token slot `slot` of layer `layer`'s K (kind 0) or V (kind 1) lives inside the KV storage:
// block records [n_blocks][n_layers][2][block_size][n_kv_heads][head_dim] of `dtype` (see backend.h), one
// every stride() bytes. Element counts turn into bytes with bytes_of. A q8_0 cache keeps whole 32-element
// blocks, so head_dim is a multiple of 32 there (check_kv_dtype) and every head's row starts on a block.
struct KvLayout {
    int32_t n_layers = 0;
    int32_t block_size = 0;
    int32_t n_kv_heads = 0;
    int32_t head_dim = 0;
    DType dtype = DType::f32;

    static KvLayout of(const ModelConfig& config, int32_t block_size, DType dtype) {
        return KvLayout{config.n_layers, block_size, config.n_kv_heads, config.head_dim, dtype};
    }
    int64_t row_elements() const { return int64_t(n_kv_heads) * head_dim; }  // one token, one layer, K or V
    int64_t block_elements() const { return int64_t(n_layers) * 2 * block_size * row_elements(); }
    size_t block_bytes() const { return size_t(bytes_of(block_elements())); }
    int64_t bytes_of(int64_t elements) const {  // elements: a multiple of 32 for q8_0
        return dtype == DType::q8_0 ? elements / 32 * 34 : elements * (dtype == DType::f32 ? 4 : 2);
    }
    int64_t row_byte_offset(int32_t block, int32_t layer, int32_t kind, int32_t slot) const {  // in bytes
        return int64_t(block) * int64_t(block_bytes()) + bytes_of(((int64_t(layer) * 2 + kind) * block_size + slot) * row_elements());
    }
};

// out[t] = table[tokens[t]] converted to f32.
void embed_cpu(float* out,             // [n, dim]
               const int32_t* tokens,  // [n]
               const void* table,      // [n_vocab, dim] in dtype
               DType dtype, int32_t n, int32_t dim);

// out[t] = weight * x[t] / sqrt(mean(x[t]^2) + eps). out may alias x.
void rmsnorm_cpu(float* out,           // [n, dim]
                 const float* x,       // [n, dim]
                 const float* weight,  // [dim]
                 int32_t n, int32_t dim, float eps);

void add_bias_cpu(float* x,           // [n, dim], in place
                  const float* bias,  // [dim]
                  int32_t n, int32_t dim);

// x[i] += y[i] (residual connection).
void add_cpu(float* x, const float* y, int64_t n);

// Inverse RoPE frequencies theta^(-2i/head_dim), with Llama 3 frequency-dependent scaling when
// scaling.type == "llama3" (Hugging Face _compute_llama3_parameters).
void rope_inv_freq(float* out,  // [head_dim / 2]
                   int32_t head_dim, float theta, const RopeScaling& scaling);

// In-place RoPE in the rotate_half layout: within each head, dim i pairs with i + head_dim/2, rotated by
// angle positions[t] * inv_freq[i].
void rope_cpu(float* x,                 // [n, n_heads, head_dim]
              const int32_t* positions,  // [n]
              const float* inv_freq,     // [head_dim / 2]
              int32_t n, int32_t n_heads, int32_t head_dim);

// Stores k[t], v[t] (converted to layout.dtype) at absolute position positions[t]:
// block block_table[pos / block_size], slot pos % block_size.
void kv_write_cpu(void* kv,                    // [n_blocks] block records, see KvLayout
                  const KvLayout& layout, int32_t layer,
                  const float* k,              // [n, n_kv_heads, head_dim]
                  const float* v,              // [n, n_kv_heads, head_dim]
                  const int32_t* block_table,  // [>= max(positions) / block_size + 1]
                  const int32_t* positions,    // [n]
                  int32_t n);

// Causal attention with GQA: query t of head h attends keys 0..positions[t] of kv head
// h / (n_heads / n_kv_heads), read through the block table; softmax of q.k / sqrt(head_dim).
// Keys are visited in increasing position, 32 positions at a time (online softmax, the canonical order of
// compute/cpu_kernels.h), so results do not depend on the physical block order, the batch or the threads.
void paged_attention_cpu(float* out,                  // [n, n_heads, head_dim]
                         const float* q,              // [n, n_heads, head_dim]
                         const void* kv,              // [n_blocks] block records, see KvLayout
                         const KvLayout& layout, int32_t layer,
                         const int32_t* block_table,  // [>= max(positions) / block_size + 1]
                         const int32_t* positions,    // [n]
                         int32_t n, int32_t n_heads, ThreadPool* pool);

// out = silu(gate) * up. out may alias gate.
// The sum of exp(x[i] - shift) over i < n, each term within 2 ulp of expf (the kernels' exp_c): a softmax's
// denominator, for the token probability -v reports.
double exp_sum_cpu(const float* x, int64_t n, float shift);

void swiglu_cpu(float* out,         // [n, n_ff]
                const float* gate,  // [n, n_ff]
                const float* up,    // [n, n_ff]
                int32_t n, int32_t n_ff);

}  // namespace kvlm
