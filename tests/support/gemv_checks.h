// The decode GEMVs' parity checks, shared by tests/cuda/test_gemv.cpp (16-bit and f32 weights) and
// test_gemv_quantized.cpp: random outputs, the CPU's f32 composition over the weights as convert_to_f32
// decodes them, the tolerance, and one launch checked against it. The launching helpers: CUDA builds only.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "format/dtype.h"

namespace kvlm::test {

constexpr float kGemvEps = 1e-5f;  // rmsnorm's epsilon in every GEMV case
// Tolerance |got - want| <= gemv_atol(n_in) + kGemvRtol * |want|. Both sides multiply the same f32 values
// (16-bit weights convert exactly, quantized ones as d * q, exact in f32, or d * nibble + m rounded once as
// convert_to_f32 does; x stays f32) with fused multiply-adds, so they differ only in the order of summation
// (CPU: 8 strided lanes; GPU: 32 lanes over 16-byte chunks, then a butterfly; a quantized block's quarter sums
// scaled by d once), in the rms scale's own sum of squares and in expf vs std::exp (SwiGLU). Weights are
// U(-1, 1) / sqrt(n_in) and x_hat is O(1), so outputs are O(1) for every n_in. Replaying the kernel's summation
// order on the CPU gave errors of at most 1% of this tolerance (2.4e-6 at n_in 14336 with norm, bias and
// residual), so a correct kernel passes with ~100x headroom; a kernel that drops one product |w x| (0.25 /
// sqrt(n_in) on average, 2e-3 at n_in 14336) fails on 80-100% of the rows (test_gemv.cpp's "tolerance" case).
float gemv_atol(int32_t n_in);
constexpr float kGemvRtol = 1e-4f;

// Elements of `got` off the tolerance against `want` (NaN never passes); the first few go into *first.
size_t count_off(const std::vector<float>& got, const std::vector<float>& want, int32_t n_in, std::string* first);
void check_gemv_close(const std::vector<float>& got, const std::vector<float>& want, int32_t n_in,
                      const std::string& what);

// f32 values in `dtype` (convert_from_f32: every dtype, quantized ones by blocks).
std::vector<uint8_t> to_dtype(const std::vector<float>& f, DType dtype);
// [n_out, n_in] uniform in +-1/sqrt(n_in), so each output is O(1) whatever n_in.
std::vector<float> random_matrix(int32_t n_out, int32_t n_in, uint64_t seed);
// x_hat = rmsnorm_cpu(x) * norm_weight, or x when norm_weight is null.
std::vector<float> x_hat_cpu(const std::vector<float>& x, const float* norm_weight);
// W x_hat for W [n_out, x_hat.size()] in f32.
std::vector<float> product_cpu(const std::vector<float>& w_f32, int32_t n_out, const std::vector<float>& x_hat);

// One output of a launch: its weights and the host data around it.
struct GemvOutput {
    int32_t n_out = 0;
    DType dtype = DType::f32;
    std::vector<uint8_t> weight;  // [n_out, n_in] in dtype
    std::vector<float> decoded;   // [n_out, n_in]: weight as convert_to_f32 reads it (the reference's weights)
    std::vector<float> bias;      // [n_out]
    std::vector<float> init;      // [n_out]: out before an accumulating launch
};
// weight_f32 [n_out, n_in] stored in dtype; bias from `seed`, init from seed + 1.
GemvOutput make_gemv_output(const std::vector<float>& weight_f32, int32_t n_out, DType dtype, uint64_t seed);
// random_matrix(n_out, n_in, seed) as make_gemv_output(..., seed + 1): three seeds from `seed`.
GemvOutput random_gemv_output(int32_t n_out, int32_t n_in, DType dtype, uint64_t seed);
// The CPU composition for output o: [init +] (W x_hat [+ bias]).
std::vector<float> reference_output(const GemvOutput& o, const std::vector<float>& x_hat, bool bias, bool accumulate);

// One launch_gemv over `outputs` (output i has a bias iff bit i of bias_mask; weights read from weight_offset
// bytes into copies of theirs), checked against reference_output. CUDA builds only.
void check_gemv(const std::vector<GemvOutput>& outputs, const std::vector<float>& x, const float* norm_weight,
                unsigned bias_mask, bool accumulate, int32_t weight_offset, const std::string& what);
// One launch_gemv_swiglu vs swiglu_cpu(W_gate x_hat, W_up x_hat) (gate and up in one dtype). CUDA builds only.
void check_gemv_swiglu(const GemvOutput& gate, const GemvOutput& up, const std::vector<float>& x,
                       const float* norm_weight, const std::string& what);

}  // namespace kvlm::test
