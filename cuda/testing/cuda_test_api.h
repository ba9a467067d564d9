// Host-side entry points for the CUDA parity tests (plain C++, no CUDA headers, so tests/ compiles with
// g++ alone; defined only in CUDA builds, tests guard their use with #ifdef KVLM_CUDA). Each function takes
// its CPU twin's host arguments, copies them to the device, runs the shipped launcher on the default
// stream, synchronizes and copies results back. Every device buffer has guard bands of 0xFF bytes on both
// sides and outputs start poisoned (0xFF = NaN), so unwritten elements show up as NaN; a changed guard
// band or any CUDA error throws Error.
#pragma once
#include <cstdint>
#include <string>

#include "compute/backend.h"
#include "compute/cpu_ops.h"
#include "kernels/gemv_launch_rules.h"

namespace kvlm::cuda_test {

// A device that can run kvlm's kernels exists (cuBLAS not needed); otherwise false and why.
bool device_available(std::string* why_not);
// cuBLAS can be loaded too (needed for matmul and the backend).
bool cublas_available(std::string* why_not);

// sample.cu through launch_sample, as CudaBackend::decode_sample runs it: `logits` [n_vocab] in, and out as
// the kernel left them (penalized; as they came when the outcome is kNeedsHost). step_token (in/out, optional):
// the step's input token, then the token the kernel leaves for the next step's input.
SampleOutcome sample(float* logits, int32_t n_vocab, const SampleRequest& request, int32_t* step_token = nullptr);

// best_tokens.cu through launch_best_tokens: logits [n_rows, n_vocab], bases [n_rows]; out [n_rows, n].
void best_tokens(const float* logits, int32_t n_rows, int32_t n_vocab, const float* bases, int32_t n, TokenScore* out);

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
// The split count launch_paged_attention picks for these arguments with scratch_rows rows of scratch (0: none).
int32_t paged_attention_split_count(int32_t n, int32_t n_heads, int32_t n_kv_heads, int32_t max_keys, int32_t n_sms,
                                    int64_t scratch_rows);
// Same, through launch_paged_attention_splits with a fixed split count (scratch sized for it); n_sms steers
// the block-per-head choice (1: always a block per GQA group; 1 << 20: a block per query head).
void paged_attention_splits(float* out, const float* q, const void* kv, int32_t n_blocks, const KvLayout& layout,
                            int32_t layer, const int32_t* block_table, int32_t n_table, const int32_t* positions,
                            int32_t n, int32_t n_heads, int32_t n_splits, int32_t n_sms);
// Through launch_prefill_attention (positions consecutive).
void prefill_attention(float* out, const float* q, const void* kv, int32_t n_blocks, const KvLayout& layout,
                       int32_t layer, const int32_t* block_table, int32_t n_table, const int32_t* positions, int32_t n,
                       int32_t n_heads);
// q, k rotated in place; kv (in/out) as kv_write.
void rope_kv_write(float* q, float* k, const float* v, void* kv, int32_t n_blocks, const KvLayout& layout,
                   int32_t layer, const int32_t* block_table, int32_t n_table, const int32_t* positions,
                   const float* inv_freq, int32_t n, int32_t n_heads);
// One launch_gemv over host copies: outs[i] has n_outs[i] floats (read first when accumulate), weights[i]
// [n_outs[i], n_in] in dtypes[i], biases[i] null or [n_outs[i]]; norm_weight null or [n_in].
void gemv(float* const* outs, const void* const* weights, const DType* dtypes, const float* const* biases,
          const int32_t* n_outs, int32_t n_outputs, const float* x, int32_t n_in, const float* norm_weight,
          float norm_eps, bool accumulate);
// gemv with every weight matrix `weight_offset` elements past a 16-byte boundary (forces the scalar path);
// for quantized dtypes `weight_offset` counts bytes.
void gemv_offset_weights(float* const* outs, const void* const* weights, const DType* dtypes,
                         const float* const* biases, const int32_t* n_outs, int32_t n_outputs, const float* x,
                         int32_t n_in, const float* norm_weight, float norm_eps, bool accumulate,
                         int32_t weight_offset);
// launch_gemv_rope_kv and, on the same inputs, launch_gemv + launch_rope_kv_write (the two launches it
// replaces), for one token at `position`: weights[3] (q, k, v: [n_heads or n_kv_heads * head_dim, n_in] in
// dtype), biases[3] (each null or [rows]); the pool kv ([n_blocks] records, see KvLayout) is copied in for
// each. Out: q after each ([n_heads * head_dim]) and the pool after each.
void gemv_rope_kv(float* q_fused, void* kv_fused, float* q_plain, void* kv_plain, const void* const* weights,
                  DType dtype, const float* const* biases, const float* x, int32_t n_in, const float* norm_weight,
                  float norm_eps, const void* kv, int32_t n_blocks, const KvLayout& layout, int32_t layer,
                  const int32_t* block_table, int32_t n_table, int32_t position, const float* inv_freq,
                  int32_t n_heads);
// set_gemv_launch_rules, process-wide: a case that changes the rules puts the defaults back.
void use_gemv_launch_rules(const GemvLaunchRules& rules);
// gemv_split_count: the warps per row group of such a launch under the current rules.
int gemv_split_count(int32_t n_rows, int32_t n_in, DType dtype, bool swiglu);
void gemv_swiglu(float* out, const float* x, const void* w_gate, const void* w_up, DType dtype, int32_t n_in,
                 int32_t n_ff, const float* norm_weight, float norm_eps);
// launch_gemv_tokens / launch_gemv_swiglu_tokens over n_tokens inputs (x [n_tokens, n_in]; outs[i]
// [n_tokens, n_outs[i]], out [n_tokens, n_ff]).
void gemv_tokens(float* const* outs, const void* const* weights, const DType* dtypes, const float* const* biases,
                 const int32_t* n_outs, int32_t n_outputs, const float* x, int32_t n_tokens, int32_t n_in,
                 const float* norm_weight, float norm_eps, bool accumulate);
void gemv_swiglu_tokens(float* out, const float* x, int32_t n_tokens, const void* w_gate, const void* w_up,
                        DType dtype, int32_t n_in, int32_t n_ff, const float* norm_weight, float norm_eps);
void swiglu(float* out, const float* gate, const float* up, int32_t n, int32_t n_ff);
// The prefill path's fused variants: out [n, dim] / [n, n_ff] in out_dtype.
void rmsnorm_to(void* out, const float* x, const float* weight, int32_t n, int32_t dim, float eps, DType out_dtype);
void swiglu_to(void* out, const float* gate, const float* up, int32_t n, int32_t n_ff, DType out_dtype);
// out (in/out) += W x through launch_convert_from_f32 + launch_matmul_prepared(accumulate).
void matmul_accumulate(float* out, const float* x, const void* w, DType w_dtype, int64_t n, int64_t n_in,
                       int64_t n_out);
void add(float* x, const float* y, int64_t n);
void add_bias(float* x, const float* bias, int32_t n, int32_t dim);
void matmul(float* out, const float* x, const void* w, DType w_dtype, int64_t n, int64_t n_in, int64_t n_out);
// Quantized weights (any quantized type) for a batch: x rounded to f16 (launch_convert_from_f32), then
// launch_matmul_quantized with tiles of tile_rows rows; out is read first when accumulate.
void matmul_quantized(float* out, const float* x, const void* w, DType w_dtype, int64_t n, int64_t n_in,
                      int64_t n_out, int64_t tile_rows, bool accumulate);
// launch_dequantize_f16: out [n_elements] f16 bits.
void dequantize_f16(uint16_t* out, const void* w, DType w_dtype, int64_t n_elements);

}  // namespace kvlm::cuda_test
