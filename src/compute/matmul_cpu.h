// CPU dot products and matrix products with f32/f16/bf16 weights (converted to f32 in registers).
// Invariant: every output element is one canonical dot product, whatever the batch size, tiling or thread
// split: lane l (of 8) accumulates elements i = l (mod 8) in increasing i with fused multiply-add (inputs
// zero-padded to a multiple of 8), then lanes reduce as ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
// The AVX2 path and the portable scalar path follow this order exactly, so they give identical bits.
#pragma once
#include <cstdint>

#include "format/dtype.h"

namespace kvlm {

class ThreadPool;

// True when built with AVX2+FMA+F16C and not switched off. Tests switch it off to check that the
// scalar path gives the same bits.
bool cpu_simd_enabled();
void set_cpu_simd_enabled(bool enabled);

// The canonical dot product of a (n elements of a_dtype) and b (n floats).
float dot_cpu(const void* a, DType a_dtype, const float* b, int64_t n);
// y[i] = fma(alpha, x[i], y[i]) for i < n (x converted from x_dtype).
void axpy_cpu(float* y, float alpha, const void* x, DType x_dtype, int64_t n);

// out[t, r] = dot(w[r, :], x[t, :]). Rows are split over the pool's threads (pool may be null).
// Weights are streamed once per tile of tokens.
void matmul_cpu(float* out,      // [n, n_out]
                const float* x,  // [n, n_in]
                const void* w,   // [n_out, n_in] in w_dtype
                DType w_dtype, int64_t n, int64_t n_in, int64_t n_out, ThreadPool* pool);

}  // namespace kvlm
