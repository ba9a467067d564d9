// The RoPE rotation every CUDA kernel that rotates shares (rope.cu, rope_kv_write.cu and the decode GEMV's
// epilogue, gemv_shared.cuh), so that they give the same bits: a decode step whose Q/K/V GEMV rotates in its
// epilogue writes the K rows a batched decode or a prefill (rope_kv_write.cu) would write.
#pragma once
#include <cstdint>

namespace kvlm {

// Rotates the pair (x0, x1) = (x[i], x[i + head_dim / 2]) of a head at position pos, inv_freq_i the pair's
// frequency. The angle is formed in f32 (pos * inv_freq, as rope_cpu does) and its cos/sin taken in f64 then
// rounded, so the factors match rope_cpu's bit for bit; each product and sum is rounded on its own (no fma
// contraction, which nvcc would otherwise choose per call site), as the CPU computes them.
__device__ __forceinline__ float2 rope_rotate(float x0, float x1, int32_t pos, float inv_freq_i) {
    const float angle = float(pos) * inv_freq_i;
    double s, c;
    sincos(double(angle), &s, &c);
    const float sin_a = float(s), cos_a = float(c);
    return make_float2(__fsub_rn(__fmul_rn(x0, cos_a), __fmul_rn(x1, sin_a)),
                       __fadd_rn(__fmul_rn(x0, sin_a), __fmul_rn(x1, cos_a)));
}

}  // namespace kvlm
