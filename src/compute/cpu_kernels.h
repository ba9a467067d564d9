// The CPU kernel set of one SIMD path (scalar, avx2, avx512), behind function pointers chosen at run time
// (compute/cpu_features.h). Each path is its own translation unit compiled with that path's -m flags.
//
// Canonical order (every path, so that each output element is the same bits whatever the batch size, tile or
// thread split, and the same bits on every path):
// - f32/f16/bf16 weights: lane l (of 8) accumulates elements i = l (mod 8) in increasing i with fused
//   multiply-add (inputs zero-padded to a multiple of 8); lanes reduce as ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
// - q8_0/q4_0/q4_1 weights: the activation row is quantized once per matmul to 16-bit ActivationBlocks
//   (d = amax/32767, q = x/d rounded to nearest even: a relative error of 1/65534 per block, far below the
//   weights' own, where 8 bits as llama.cpp uses would flip near-tied tokens). Per 32-block b in increasing
//   order: S = the exact integer sum of w[j]*q[j] (w = q, nibble - 8, or nibble), acc = fma(float(S),
//   dw*dx, acc) (float(S) rounded to nearest even); q4_1 also bias = fma(m, s, bias) (s = dx * sum q).
//   The result is acc + bias. SIMD paths run batches 8 rows at once, one row per lane.
// - q5_0, q5_1, iq4_nl, q2_k .. q6_k and iq4_xs weights (written out by matmul_quant_generic, which the
//   scalar path runs): each 32-element chunk read as a QuantChunk (format/quant_blocks.h); chunk c goes to
//   lane l = c % 4, and per lane in increasing c: S = the exact integer sum of w[j]*q[j], acc_l = fma(float(S),
//   scale*dx, acc_l); where the type has mins, bias_l = fma(min, s, bias_l). With sum4(v) = (v_0 + v_1) +
//   (v_2 + v_3), the result is sum4(acc) + sum4(bias). Types with a scale per 16 elements (q2_k, q3_k, q6_k)
//   run such lanes per half h of the chunks (acc_h, bias_h; S over the half's 16 elements, q2_k's bias term
//   min_h x dx * float(sum of the half's q)): the result is (sum4(acc_0) + sum4(acc_1)) + (sum4(bias_0) +
//   sum4(bias_1)). Four independent lanes, not one chain: a one-token row is otherwise bound by the latency of
//   its dependent fmas (1.4x the decode rate at the 1B shape, bench/RESULTS.md session 33). q8_0/q4_0/q4_1
//   keep their single chain for now (issue 48 revisits them).
// - attention (attend_block, keys in chunks of kAttentionChunk positions, in increasing position): s_j = dot(k_j, q) * scale
//   (the canonical dot); keys past the query's position take no part; m' = max(m, max_j s_j); alpha = 0 when
//   m is -inf, else exp_c(m - m'); p_j = exp_c(s_j - m'); l = l * alpha, then l += p_j in increasing j;
//   o = o * alpha, then o = fma(p_j, v_j, o) in increasing j; m = m'. exp_c is canonical_exp below, the same
//   operations on every path (fma, nearest-even rounding, an exponent built from bits).
// Kernel translation units call no inline function or template of external linkage (std::min, dtype.h's
// helpers) and keep their own code in an anonymous namespace: a copy of such a function compiled with
// AVX-512 flags could be the one the linker keeps for the whole program, and crash a machine without AVX-512.
#pragma once
#include <cstdint>

#include "format/dtype.h"

namespace kvlm {

// One block of 32 quantized activations: x[j] ~= d * q[j], s = d * sum(q).
struct ActivationBlock {
    float d;
    float s;
    int16_t q[32];
};

// Floats of scratch matmul_widened needs for a tile of n_rows rows (row pairs interleaved per 8 columns,
// padded to whole 8-column chunks, on the avx512 path).
constexpr int64_t widened_scratch_floats(int64_t n_rows, int64_t n_in) { return (n_rows + 1) * ((n_in + 7) / 8 * 8); }

// exp_c(x): Cody-Waite reduction x = n ln2 + r, exp(r) = 1 + r + r^2 P(r) with Cephes' expf polynomial,
// times 2^n; arguments are clamped to [kExpMin, kExpMax] (exp of about 1.6e-38 to 1.7e38, so that 2^n is a
// normal float). Within 2 ulp of expf inside that range.
constexpr float kExpMin = -87.0f, kExpMax = 88.0f;
constexpr float kExpLog2e = 1.44269504088896341f;
constexpr float kExpLn2Hi = 0.693359375f, kExpLn2Lo = -2.12194440e-4f;
constexpr float kExpP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                            4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

// Queries of one attend_block call: n_q rows of head_dim floats; query i sees keys up to position last[i]
// and carries its running max m[i] (-inf before the first key), sum l[i] and unnormalised output
// o[i * head_dim ...]. scores: scratch for kAttentionChunk floats.
struct AttentionQueries {
    const float* q;
    const int32_t* last;
    float* m;
    float* l;
    float* o;
    float* scores;
    int32_t n_q;
    int32_t head_dim;
    float scale;
};
// Keys of one attend_block call: kAttentionChunk positions key0 .. key0 + n_keys - 1 (key0 a multiple of
// kAttentionChunk, whatever the KV block size, so that results do not depend on it); key j's row at k[j]
// and its value row at v[j] (dtype f32, f16, bf16, or q8_0 whose elements are read as the exact f32
// products d * q). Every query's last is >= key0, and the queries are in increasing last. widened: scratch
// for 2 * kAttentionChunk * head_dim floats (a path may widen the chunk's rows there once for all its
// queries), or null.
constexpr int32_t kAttentionChunk = 32;
struct AttentionKeys {
    const void* const* k;
    const void* const* v;
    DType dtype;
    int32_t key0;
    int32_t n_keys;
    float* widened = nullptr;
};

// Up to this many tokens matmul_q reads the weight rows as they are (a few sequences decoding together);
// more tokens unpack a tile of rows first, once for all of them.
constexpr int64_t kQuantRowsAsStoredTokens = 4;

// Bytes of scratch matmul_q needs for n_tokens tokens and n_rows rows of n_in weights: up to
// kQuantRowsAsStoredTokens tokens, the tokens' block scales side by side (four floats per token and block: d,
// s and two half sums) or their blocks rearranged in groups of 4 (128 bytes a block, rounded up to groups,
// 64-byte aligned), whatever n_rows; more tokens, the unpacked rows (per row and block, 32 16-bit weights and
// up to two scales and two mins as floats) or the block scales, whichever is larger. (The AVX-512 path's
// rows of q5_0, q5_1 and q2_k .. q6_k take 88 bytes a token and block of 32: scales, the activations as bytes,
// and the half sums of q in whole groups of 4 blocks.)
constexpr int64_t quantized_scratch_bytes(int64_t n_tokens, int64_t n_rows, int64_t n_in) {
    const int64_t scales = (n_in / 32) * n_tokens * 16;
    if (n_tokens <= kQuantRowsAsStoredTokens) {
        const int64_t split = n_tokens * ((n_in / 32 + 3) / 4 * 4 * 128) + 64;
        return split > scales ? split : scales;
    }
    const int64_t unpacked = (n_in / 32) * n_rows * (64 + 16);
    return unpacked > scales ? unpacked : scales;
}

struct CpuKernels {
    // The canonical dot product of a (n elements of a_dtype, f32/f16/bf16) and b (n floats).
    float (*dot)(const void* a, DType a_dtype, const float* b, int64_t n);
    // y[i] = fma(alpha, x[i], y[i]) for i < n (x converted from x_dtype, f32/f16/bf16).
    void (*axpy)(float* y, float alpha, const void* x, DType x_dtype, int64_t n);
    // Rows [r0, r1) of out[t, r] = dot(w[r, :], x[t, :]) for tokens t < n, weights as stored (a few tokens:
    // widening 16-bit rows first would cost more than it saves).
    void (*matmul_direct)(float* out, int64_t out_stride, const float* x, int64_t n, const void* w, DType w_dtype,
                      int64_t n_in, int64_t r0, int64_t r1);
    // out[t, r] for rows r < n_rows of the tile w (16-bit), tokens t < n: the tile is widened to f32 once into
    // `scratch` (kWidenedScratch(n_rows, n_in) floats; the layout is the path's own) and reused by every token.
    void (*matmul_widened)(float* out, int64_t out_stride, const float* x, int64_t n, const void* w, DType w_dtype,
                           int64_t n_in, int64_t n_rows, float* scratch);
    // Quantizes n rows of n_in floats (n_in a multiple of 32) into n * n_in / 32 blocks.
    void (*quantize_rows)(ActivationBlock* out, const float* x, int64_t n, int64_t n_in);
    // Rows [r0, r1) of out[t, r] = dot(w[r, :], x[t, :]) for quantized weights (row_bytes per row) and
    // quantized activations (n_in / 32 blocks per token). scratch: quantized_scratch_bytes(n, r1 - r0, n_in)
    // bytes, float-aligned (batches unpack the rows there once for all their tokens).
    void (*matmul_q)(float* out, int64_t out_stride, const ActivationBlock* x, int64_t n, const void* w, DType w_dtype,
                     int64_t n_in, int64_t r0, int64_t r1, void* scratch);
    // One chunk of keys of online-softmax attention for every query (the canonical order above).
    void (*attend_block)(const AttentionQueries& queries, const AttentionKeys& keys);
    // out[i] = silu(gate[i]) * up[i] = gate[i] / (1 + exp_c(-gate[i])) * up[i]; out may alias gate.
    void (*swiglu)(float* out, const float* gate, const float* up, int64_t n);
    // The sum of exp_c(x[i] - shift) over i < n (x[i] <= shift: a softmax's denominator), in the path's order.
    double (*exp_sum)(const float* x, int64_t n, float shift);
};

// q5_0 .. iq4_xs written out plainly from QuantChunks (compute/quant_generic.cpp): the dot product of one
// weight row (n_blocks 32-element chunks) with quantized activations, and matmul_q's contract over rows
// [r0, r1) of all n tokens. The scalar path's kernel, and the statement of the canonical order the x86 paths'
// kernels (kernels_x86_kquant.inc) reproduce bit for bit.
float dot_quant_generic(const uint8_t* w, DType w_dtype, const ActivationBlock* x, int64_t n_blocks);
void matmul_quant_generic(float* out, int64_t out_stride, const ActivationBlock* x, int64_t n, const void* w,
                          DType w_dtype, int64_t n_in, int64_t r0, int64_t r1);

extern const CpuKernels kScalarKernels;
extern const CpuKernels kAvx2Kernels;
extern const CpuKernels kAvx512Kernels;

}  // namespace kvlm
