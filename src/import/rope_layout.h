// RoPE row layouts of q/k projection weights. kvlm (like Hugging Face) pairs dimension i of a head with
// i + head_dim/2 ("rotate_half"); GGUF, llama2.c and Meta checkpoints pair 2i with 2i+1 ("interleaved").
// llama.cpp's HF converter maps HF -> interleaved with w.reshape(n_head, 2, head_dim/2, in).swapaxes(1, 2);
// these functions undo it, one head at a time (for k, the heads are the n_kv_heads key heads).
#pragma once
#include <cstdint>

namespace kvlm {

// Row of the interleaved-layout weight that lands at `row` of the rotate_half layout (rows of all heads
// are numbered consecutively; head_dim must be even).
int64_t interleaved_source_row(int64_t row, int64_t head_dim);

// dst[r] = src[interleaved_source_row(r)] for every row; src and dst must not overlap.
void interleaved_to_rotate_half(const float* src,  // [n_heads * head_dim, n_cols] interleaved
                                float* dst,        // [n_heads * head_dim, n_cols] rotate_half
                                int64_t n_heads, int64_t head_dim, int64_t n_cols);

// The forward direction (what llama.cpp's converter does), for tests and tools.
void rotate_half_to_interleaved(const float* src,  // [n_heads * head_dim, n_cols] rotate_half
                                float* dst,        // [n_heads * head_dim, n_cols] interleaved
                                int64_t n_heads, int64_t head_dim, int64_t n_cols);

}  // namespace kvlm
