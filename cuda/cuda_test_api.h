// Host-side entry points for the CUDA parity tests (plain C++, no CUDA headers, so tests/ compiles with
// g++ alone; defined only in CUDA builds, tests guard their use with #ifdef KVLM_CUDA). Each function takes
// its CPU twin's host arguments, copies them to the device, runs the shipped launcher on the default
// stream, synchronizes and copies results back. Every device buffer has guard bands of 0xFF bytes on both
// sides and outputs start poisoned (0xFF = NaN), so unwritten elements show up as NaN; a changed guard
// band or any CUDA error throws Error.
#pragma once
#include <cstdint>
#include <string>

#include "cpu_ops.h"

namespace kvlm::cuda_test {

// A device that can run kvlm's kernels exists (cuBLAS not needed); otherwise false and why.
bool device_available(std::string* why_not);
// cuBLAS can be loaded too (needed for matmul and the backend).
bool cublas_available(std::string* why_not);

void embed(float* out, const int32_t* tokens, const void* table, DType dtype, int32_t n, int32_t dim,
           int32_t n_vocab);
void rmsnorm(float* out, const float* x, const float* weight, int32_t n, int32_t dim, float eps);
void rope(float* x, const int32_t* positions, const float* inv_freq, int32_t n, int32_t n_heads, int32_t head_dim);
// kv: [n_blocks] block records (in/out); block_table: [n_table].
void kv_write(void* kv, int32_t n_blocks, const KvLayout& layout, int32_t layer, const float* k, const float* v,
              const int32_t* block_table, int32_t n_table, const int32_t* positions, int32_t n);
// n_sms and scratch_rows steer the launcher's split choice (scratch_rows 0: no scratch, never split).
void paged_attention(float* out, const float* q, const void* kv, int32_t n_blocks, const KvLayout& layout,
                     int32_t layer, const int32_t* block_table, int32_t n_table, const int32_t* positions, int32_t n,
                     int32_t n_heads, int32_t n_sms, int64_t scratch_rows);
void swiglu(float* out, const float* gate, const float* up, int32_t n, int32_t n_ff);
void add(float* x, const float* y, int64_t n);
void add_bias(float* x, const float* bias, int32_t n, int32_t dim);
void matmul(float* out, const float* x, const void* w, DType w_dtype, int64_t n, int64_t n_in, int64_t n_out);

}  // namespace kvlm::cuda_test
