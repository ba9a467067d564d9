// Host launchers of the CUDA forward-pass kernels. Each takes the arguments of its CPU twin in
// src/compute/cpu_ops.h (device pointers instead of host ones) plus a stream, launches asynchronously and checks
// the launch. All tensors are dense row-major in device memory; activations are f32.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "compute/best_tokens.h"
#include "compute/cpu_ops.h"
#include "kernels/gemv_launch_rules.h"

namespace kvlm {

// Largest head_dim the attention kernel handles (its per-thread accumulators are sized for it).
constexpr int32_t kCudaMaxHeadDim = 256;

// embed.cu: out[t] = table[tokens[t]] converted to f32 (any DType; quantized rows are whole blocks).
void launch_embed(float* out,             // [n, dim]
                  const int32_t* tokens,  // [n]
                  const void* table,      // [n_vocab, dim] in dtype
                  DType dtype, int32_t n, int32_t dim, cudaStream_t stream);

// dequantize.cu: out = the elements of quantized w (any type, whole blocks) as f16 (round to nearest even); the prefill GEMMs'
// weight tiles. n_elements is a multiple of 32.
void launch_dequantize_f16(void* out,      // [n_elements] f16
                           const void* w,  // [n_elements / 32] blocks in dtype
                           DType dtype, int64_t n_elements, cudaStream_t stream);

// sample.cu: the next token picked where the logits are, by the CPU sampler's rule (one thread block per
// row). Inputs and result sit in device memory at fixed addresses, so the launch can end a captured decode
// graph.
constexpr int32_t kSampleMaxCandidates = 1024;  // a larger top-k, or more min-p survivors: the host samples
constexpr int32_t kSampleMaxPenalty = 1024;     // distinct tokens the repetition penalty may list
struct SampleInputs {
    float temperature, top_p, min_p, repeat_penalty;  // as SamplingParams; penalty tokens listed once each
    int32_t top_k, n_penalty;
    int32_t penalize_step_token;  // 1: the step's input token is penalized too (listed or not: once)
    int32_t want_probability;     // 1: SampleResult::probability
    // Constrained output: the pick is among the n_allowed (> 0) tokens whose bits are set in `allowed`
    // (device memory, [ceil(n_vocab / 32)] words, bit i of word i / 32 for token i); null: every token.
    int32_t n_allowed, unused;
    const uint32_t* allowed;
    double u01;  // the sampler's draw in [0, 1) for this step
    int32_t penalty_tokens[kSampleMaxPenalty];
};
enum SampleStatus : int32_t { kSampleOk = 0, kSampleBadNan = 1, kSampleBadInf = 2, kSampleNeedsHost = 3 };
struct SampleResult {
    int32_t token;      // kSampleOk: the chosen token
    int32_t status;     // SampleStatus; kSampleNeedsHost leaves the logits as they came (penalty undone)
    int32_t bad_index;  // kSampleBadNan/Inf: the first non-finite logit
    float probability;  // kSampleOk with want_probability: softmax of the penalized logits at T = 1; else -1
    unsigned long long digest;  // order-independent 64-bit digest of the (penalized) logits
};
// step_token: in, the decode step's input token (for penalize_step_token); out, the chosen token (0 when none),
// which is the input of a decode step enqueued behind this one before the host has seen the result. Null for
// n_rows > 1: row r's logits, inputs[r] and result[r] (rows of a forward_rows pass, which enqueue nothing
// behind them).
void launch_sample(float* logits,  // [n_rows, n_vocab], penalized in place
                   int32_t n_vocab, const SampleInputs* inputs, SampleResult* result, int32_t* step_token,
                   cudaStream_t stream, int32_t n_rows = 1);

// best_tokens.cu: a beam-search step's best tokens where the logits are (Backend::SequenceInput::best). Block
// r takes row r: max, log(sum(exp(x - max))) in a fixed tree order, then the n best tokens by score =
// ((x - max) - log_sum) + bases.base[r], best first, equal scores in token order (best_tokens_cpu's rule in
// the device's float sums), into out[r * out_stride ..]; token -1 past the row's usable logits.
constexpr int32_t kMaxDeviceBest = 64;  // n at most (--beams 32); more: the host takes the logits
constexpr int32_t kMaxBestRows = 64;    // rows of one launch
struct BestTokensBases {
    float base[kMaxBestRows];
};
void launch_best_tokens(const float* logits,  // [n_rows, n_vocab]
                        int32_t n_vocab, int32_t n_rows, int32_t n, const BestTokensBases& bases,
                        TokenScore* out,  // [n_rows, out_stride >= n]
                        int32_t out_stride, cudaStream_t stream);

// token_nll.cu: perplexity's scores where the logits are (CudaBackend::forward_nll): out[r] = the negative
// log-likelihood of token targets[r] (in 0..n_vocab-1) under row r's logits, in double, as the CPU's token_nll;
// NaN when the row has a non-finite logit. One block per row.
void launch_token_nll(const float* logits,  // [n_rows, n_vocab]
                      int32_t n_rows, int32_t n_vocab,
                      const int32_t* targets,  // [n_rows]
                      double* out,             // [n_rows]
                      cudaStream_t stream);

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
// 0..positions[t] of kv head h / (n_heads / n_kv_heads). A thread block takes the query heads of one GQA
// group (up to 8; larger groups in equal chunks), so each K/V row it reads serves all of them. The key range
// of each query is split into up to 1024 pieces run by separate thread blocks (flash-decoding) and merged
// by a second kernel when more than one is used; `partials` is scratch for that merge, one row per
// (token, query head, split).
// max_keys = max(positions) + 1 (host-known, it picks the split count); n_sms = multiprocessors to fill.
struct AttentionScratch {
    float* partials = nullptr;  // [max_rows, kCudaMaxHeadDim + 2]: unnormalised output, max, sum
    int64_t max_rows = 0;       // (token, head, split) rows the scratch holds
    // The launch shape's rules (CudaSettings::attn_*; every launch of a backend uses the same, so a
    // row's split count is the one its own decode step has): contexts longer than min_split_keys keys are
    // split until the grid has ~fill_per_sm blocks per multiprocessor; a block per query head instead of
    // one per GQA group when one_head is 1, never when 0, and when -1 where the grouped grid has fewer
    // blocks than multiprocessors.
    int32_t min_split_keys = 256;  // a multiple of the 128-key tile
    int32_t fill_per_sm = 2;
    int32_t one_head = -1;
};
void launch_paged_attention(float* out,                  // [n, n_heads, head_dim]
                            const float* q,              // [n, n_heads, head_dim]
                            const void* kv,              // [n_blocks] block records, see KvLayout
                            const KvLayout& layout, int32_t layer,
                            const int32_t* block_table,  // [>= (max_keys - 1) / block_size + 1]
                            const int32_t* positions,    // [n]
                            int32_t n, int32_t n_heads, int32_t max_keys, int32_t n_sms,
                            const AttentionScratch& scratch, cudaStream_t stream);

// As launch_paged_attention, but with the split count chosen by the caller and each query's split length
// derived on the device from positions[t] (ceil((positions[t] + 1) / n_splits) rounded up to the kernel's key
// tile), so one launch serves every context length: a CUDA graph captured once replays it as the context
// grows. Splits that start past a query's last key weigh nothing. Needs n * n_heads * n_splits <=
// scratch.max_rows when n_splits > 1; 1 <= n_splits <= 1024. Both launchers give each query head its own
// thread block when a block per GQA group would leave multiprocessors idle (fewer blocks than n_sms); the
// bits are the same either way.
// row_tables (null: every query reads block_table): query t reads the table at block_table + row_tables[t], so
// one launch serves the rows of several sequences (the batched exact forward).
void launch_paged_attention_splits(float* out, const float* q, const void* kv, const KvLayout& layout,
                                   int32_t layer, const int32_t* block_table, const int32_t* positions, int32_t n,
                                   int32_t n_heads, int32_t n_splits, int32_t n_sms, const AttentionScratch& scratch,
                                   cudaStream_t stream, const int32_t* row_tables = nullptr);
// The split count launch_paged_attention picks for these arguments (1 = unsplit).
int32_t paged_attention_split_count(int32_t n, int32_t n_heads, int32_t n_kv_heads, int32_t max_keys, int32_t n_sms,
                                    const AttentionScratch& scratch);

// prefill_attention.cu: causal GQA attention for a prefill batch on tensor cores, flash-attention style:
// a thread block takes a tile of consecutive queries of one head and streams keys 0..(its last query's
// position) through shared memory in tiles read once per query tile through the block table;
// S = Q K^T and O += P V run as 16-bit MMAs (the KV cache's type, f16 or bf16; q is rounded to it) with f32
// accumulation, the softmax online in f32. Same contract and output as launch_paged_attention, for
// consecutive positions (positions[t] = positions[0] + t, as every prefill batch has).
void launch_prefill_attention(float* out,                  // [n, n_heads, head_dim]
                              const float* q,              // [n, n_heads, head_dim]
                              const void* kv,              // [n_blocks] block records, see KvLayout
                              const KvLayout& layout, int32_t layer,
                              const int32_t* block_table,  // [>= positions[n - 1] / block_size + 1]
                              const int32_t* positions,    // [n], consecutive
                              int32_t n, int32_t n_heads, cudaStream_t stream);
// True when launch_prefill_attention handles this layout: a KV dtype it stages as 16-bit (f16, bf16, q8_0
// as f16) and a head_dim it supports (multiples of 16 up to kCudaMaxHeadDim).
bool prefill_attention_supports(const KvLayout& layout);

// rope_kv_write.cu: the step between the Q/K/V products and attention in one launch: RoPE on q and k in
// place (exactly launch_rope's arithmetic), then the rotated k and v stored into their pool blocks as
// launch_kv_write does. Same results as launch_rope(q), launch_rope(k), launch_kv_write.
void launch_rope_kv_write(float* q,                    // [n, n_heads, head_dim], rotated in place
                          float* k,                    // [n, n_kv_heads, head_dim], rotated in place
                          const float* v,              // [n, n_kv_heads, head_dim]
                          void* kv,                    // [n_blocks] block records, see KvLayout
                          const KvLayout& layout, int32_t layer,
                          const int32_t* block_table,  // [>= max(positions) / block_size + 1]
                          const int32_t* positions,    // [n]
                          const float* inv_freq,       // [head_dim / 2]
                          int32_t n, int32_t n_heads, cudaStream_t stream,
                          const int32_t* row_tables = nullptr);  // [n] per-token table offsets, as attention's

// gemv.cu: single-token matrix-vector products for decode (batch 1 is memory-bound: each weight is read
// once with 16-byte loads, f32 accumulation, no activation conversion and no cuBLAS, so the products can be
// captured in a CUDA graph). Weights are row-major [n_out, n_in] in f32, f16 or bf16, or any quantized type
// (gemv_quantized.cu: n_in whole blocks, matrices 2-byte aligned, q4_1, q5_1, q2_k, q4_k, q5_k and iq4_xs 4-byte).
// x_hat = x, or rmsnorm(x) * norm_weight (as rmsnorm_cpu) when norm_weight is not null, computed inside.
// decode_persistent.cu: the decode step's embedding, layers and head in one cooperative launch (the sampling
// stays a separate launch). Device pointers; positions = the step's position ([1]).
struct PersistentLayerWeights {
    const void *q, *k, *v;                  // [n_heads * head_dim or kv_dim, dim]
    const float *q_bias, *k_bias, *v_bias;  // or null
    const void *o, *gate, *up, *down;
    const float *attn_norm, *ffn_norm;
};
struct PersistentDecodeArgs {
    const PersistentLayerWeights* layers = nullptr;  // device array [n_layers]
    int32_t n_layers = 0;
    const void* token_embd = nullptr;    // [n_vocab, dim], the layers' dtype
    const float* output_norm = nullptr;  // [dim]
    const void* output = nullptr;        // [n_vocab, dim], the layers' dtype
    float* logits = nullptr;             // [n_vocab]
    int32_t n_vocab = 0;
    float *x = nullptr, *q = nullptr, *att = nullptr, *ffn = nullptr;  // [dim], [q_dim], [q_dim], [n_ff]
    float* partials = nullptr;  // attention's split partials (AttentionScratch::partials)
    int32_t dim = 0, n_heads = 0, n_ff = 0;
    float norm_eps = 0;
    void* kv = nullptr;
    KvLayout layout{};
    const int32_t *tokens = nullptr, *positions = nullptr, *block_table = nullptr;
    const float* inv_freq = nullptr;
    int32_t n_splits = 1;     // attention's, for this step's context (paged_attention_split_count)
    void* barrier = nullptr;  // 8 bytes of device memory, zeroed once (grid_barrier.cuh)
    // Set by the launcher.
    bool vec_dim = false, vec_q = false, vec_ff = false;
    float attn_scale = 0;
};
// Why the persistent kernel cannot run such a model ("" when it can); shared_per_block: the device's opt-in
// limit (cudaDeviceProp::sharedMemPerBlockOptin).
std::string persistent_decode_unsupported(DType weights, DType embedding, DType head, const KvLayout& layout,
                                          int32_t dim, int32_t q_dim, int32_t n_ff, bool gemv_rules_default,
                                          size_t shared_per_block);
// The grid: n_sms x min(blocks that fit a multiprocessor, blocks_per_sm). Sets the kernels' shared memory limit.
int32_t persistent_decode_blocks(const PersistentDecodeArgs& a, DType weights, int32_t n_sms, int32_t blocks_per_sm);
void launch_decode_persistent(PersistentDecodeArgs a, DType weights, int32_t blocks, int32_t n_sms,
                              int32_t one_head_rule, cudaStream_t stream);

struct GemvOutput {
    float* out = nullptr;          // [n_out]; must not alias x
    const void* weight = nullptr;  // [n_out, n_in] in dtype
    DType dtype = DType::f32;
    const float* bias = nullptr;   // [n_out] or null
    int32_t n_out = 0;
};
// out_i = W_i x_hat + bias_i for up to 3 outputs over the same x (Q, K and V in one launch), or
// out_i += W_i x_hat + bias_i when accumulate (the residual connection).
void launch_gemv(const GemvOutput* outputs, int32_t n_outputs,
                 const float* x,            // [n_in]
                 int32_t n_in,
                 const float* norm_weight,  // [n_in] or null
                 float norm_eps, bool accumulate, cudaStream_t stream);
// out = silu(W_gate x_hat) * (W_up x_hat): the FFN's first half in one launch.
void launch_gemv_swiglu(float* out,                // [n_ff]; must not alias x
                        const float* x,            // [n_in]
                        const void* w_gate,        // [n_ff, n_in] in dtype
                        const void* w_up,          // [n_ff, n_in] in dtype
                        DType dtype, int32_t n_in, int32_t n_ff,
                        const float* norm_weight,  // [n_in] or null
                        float norm_eps, cudaStream_t stream);

// A tuning sweep's GEMV launch shape (CudaSettings::gemv; 0 keeps each rule): rows per warp (1, 2 or 4;
// SwiGLU at most 2, RoPE pairs always 2), threads per block (128 or 256), the warps per SM up to which a
// row's dot product is split across warps (0 to 64; 16-bit weights), x_hat staged in shared memory (1) or
// read from global memory (0). Process-wide, like programmatic launches: every GEMV launch follows it, so a
// decode step and a batch of rows keep one block size and split, hence one summation order and the same bits.
// Throws on other values.
void set_gemv_launch_rules(const GemvLaunchRules& rules);
// Warps per row group the GEMV launches of n_rows rows of n_in dtype weights take (SwiGLU: n_rows gate and as
// many up rows) under the current rules: 1 unless a rule splits them (16-bit weights only).
int gemv_split_count(int64_t n_rows, int32_t n_in, DType dtype, bool swiglu);

// Both for n_tokens inputs at once (x [n_tokens, n_in], each output [n_tokens, n_out] dense): each weight
// chunk is read once for up to 8 tokens, and every token gets the bits of its own one-token launch (the
// batched exact forward of several decode rows).
void launch_gemv_tokens(const GemvOutput* outputs, int32_t n_outputs, const float* x, int32_t n_tokens, int32_t n_in,
                        const float* norm_weight, float norm_eps, bool accumulate, cudaStream_t stream);
// The decode step's Q/K/V GEMV with launch_rope_kv_write done in its epilogue (one launch instead of two, the
// same bits): qkv[0] is rotated into its out; k and v rows go straight into the pool (qkv[1].out and
// qkv[2].out are not written). For when gemv_rope_kv_supported.
void launch_gemv_rope_kv(const GemvOutput* qkv,       // [3]: q, k, v of one token
                         const float* x, int32_t n_in, const float* norm_weight, float norm_eps, void* kv,
                         const KvLayout& layout, int32_t layer,
                         const int32_t* block_table,  // [>= position / block_size + 1]
                         const int32_t* position,     // [1]
                         const float* inv_freq,       // [head_dim / 2]
                         cudaStream_t stream);
// One weight dtype for q, k and v, rows a whole number of heads, and an f32, f16 or bf16 pool.
bool gemv_rope_kv_supported(const GemvOutput* qkv, const KvLayout& layout);
void launch_gemv_swiglu_tokens(float* out, const float* x, int32_t n_tokens, const void* w_gate, const void* w_up,
                               DType dtype, int32_t n_in, int32_t n_ff, const float* norm_weight, float norm_eps,
                               cudaStream_t stream);

// rmsnorm.cu: launch_rmsnorm with the result rounded to out_dtype (f32, f16, bf16): a GEMM's input made in
// the same pass. out must not alias x unless out_dtype is f32.
void launch_rmsnorm_to(void* out,            // [n, dim] in out_dtype
                       const float* x,       // [n, dim]
                       const float* weight,  // [dim]
                       int32_t n, int32_t dim, float eps, DType out_dtype, cudaStream_t stream);

// elementwise.cu
// launch_swiglu with the result rounded to out_dtype (the down projection's input). out must not alias
// gate or up unless out_dtype is f32.
void launch_swiglu_to(void* out,          // [n, n_ff] in out_dtype
                      const float* gate,  // [n, n_ff]
                      const float* up,    // [n, n_ff]
                      int32_t n, int32_t n_ff, DType out_dtype, cudaStream_t stream);
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
