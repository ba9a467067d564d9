// Host launchers of the CUDA forward-pass kernels. Each takes the arguments of its CPU twin in
// src/cpu_ops.h (device pointers instead of host ones) plus a stream, launches asynchronously and checks
// the launch. All tensors are dense row-major in device memory; activations are f32.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cpu_ops.h"

namespace kvlm {

// Largest head_dim the attention kernel handles (its per-thread accumulators are sized for it).
constexpr int32_t kCudaMaxHeadDim = 256;

// embed.cu: out[t] = table[tokens[t]] converted to f32.
void launch_embed(float* out,             // [n, dim]
                  const int32_t* tokens,  // [n]
                  const void* table,      // [n_vocab, dim] in dtype
                  DType dtype, int32_t n, int32_t dim, cudaStream_t stream);

// rmsnorm.cu: out[t] = weight * x[t] / sqrt(mean(x[t]^2) + eps). out may alias x.
void launch_rmsnorm(float* out,           // [n, dim]
                    const float* x,       // [n, dim]
                    const float* weight,  // [dim]
                    int32_t n, int32_t dim, float eps, cudaStream_t stream);

// rope.cu: in-place RoPE, rotate_half layout (dim i pairs with i + head_dim/2), angle pos * inv_freq[i].
void launch_rope(float* x,                  // [n, n_heads, head_dim]
                 const int32_t* positions,  // [n]
                 const float* inv_freq,     // [head_dim / 2]
                 int32_t n, int32_t n_heads, int32_t head_dim, cudaStream_t stream);

// kv_write.cu: stores k[t], v[t] (converted to layout.dtype) at block block_table[pos / block_size],
// slot pos % block_size of layer `layer`, pos = positions[t].
void launch_kv_write(void* kv,                    // [n_blocks] block records, see KvLayout
                     const KvLayout& layout, int32_t layer,
                     const float* k,              // [n, n_kv_heads, head_dim]
                     const float* v,              // [n, n_kv_heads, head_dim]
                     const int32_t* block_table,  // [>= max(positions) / block_size + 1]
                     const int32_t* positions,    // [n]
                     int32_t n, cudaStream_t stream);

// paged_attention.cu: causal GQA attention through the block table; query t of head h attends keys
// 0..positions[t] of kv head h / (n_heads / n_kv_heads). The key range of each (t, h) is split into up
// to `max_splits` pieces run by separate thread blocks (flash-decoding) and merged by a second kernel when
// more than one is used; `partials` is scratch for that merge.
// max_keys = max(positions) + 1 (host-known, it picks the split count); n_sms = multiprocessors to fill.
struct AttentionScratch {
    float* partials = nullptr;  // [max_rows, kCudaMaxHeadDim + 2]: unnormalised output, max, sum
    int64_t max_rows = 0;       // (token, head, split) rows the scratch holds
};
void launch_paged_attention(float* out,                  // [n, n_heads, head_dim]
                            const float* q,              // [n, n_heads, head_dim]
                            const void* kv,              // [n_blocks] block records, see KvLayout
                            const KvLayout& layout, int32_t layer,
                            const int32_t* block_table,  // [>= (max_keys - 1) / block_size + 1]
                            const int32_t* positions,    // [n]
                            int32_t n, int32_t n_heads, int32_t max_keys, int32_t n_sms,
                            const AttentionScratch& scratch, cudaStream_t stream);

// elementwise.cu
// out = silu(gate) * up. out may alias gate.
void launch_swiglu(float* out,         // [n, n_ff]
                   const float* gate,  // [n, n_ff]
                   const float* up,    // [n, n_ff]
                   int32_t n, int32_t n_ff, cudaStream_t stream);
// x[i] += y[i] (residual connection).
void launch_add(float* x,        // [n]
                const float* y,  // [n]
                int64_t n, cudaStream_t stream);
void launch_add_bias(float* x,           // [n, dim], in place
                     const float* bias,  // [dim]
                     int32_t n, int32_t dim, cudaStream_t stream);
// dst = src converted to `dtype` (f16/bf16 round to nearest even, f32 copies): GEMM inputs.
void launch_convert_from_f32(void* dst,         // [n] in dtype
                             const float* src,  // [n]
                             DType dtype, int64_t n, cudaStream_t stream);

}  // namespace kvlm
