// Linear layers on the GPU through cuBLAS (the twin of matmul_cpu): f32 weights via cublasSgemm,
// f16/bf16 weights via cublasGemmEx on tensor cores with f32 accumulation and f32 output (the f32
// activations are first rounded to the weight dtype, so bf16 results agree with the CPU to ~1e-2 rel);
// quantized weights via f16 tiles of dequantized rows and the same f16 GEMM.
#pragma once
#include <cstdint>

#include "format/dtype.h"
#include "runtime/cublas_loader.h"

namespace kvlm {

// out[t, r] = dot(w[r, :], x[t, :]). x_converted is scratch for x in w_dtype (unused for f32 weights).
void launch_matmul(cublasHandle_t handle,
                   float* out,          // [n, n_out]
                   const float* x,      // [n, n_in]
                   const void* w,       // [n_out, n_in] in w_dtype
                   DType w_dtype, int64_t n, int64_t n_in, int64_t n_out,
                   void* x_converted,   // [n, n_in] in w_dtype
                   cudaStream_t stream);

// out[t, r] (+)= dot(w[r, :], x[t, :]) with x already in w_dtype (f32 for f32 weights, else f16/bf16 as
// made by launch_rmsnorm_to / launch_swiglu_to / launch_convert_from_f32): one GEMM, no conversion.
// accumulate adds to what out holds (beta = 1: the residual connection without a separate add).
void launch_matmul_prepared(cublasHandle_t handle,
                            float* out,      // [n, n_out]
                            const void* x,   // [n, n_in] in w_dtype
                            const void* w,   // [n_out, n_in] in w_dtype
                            DType w_dtype, int64_t n, int64_t n_in, int64_t n_out, bool accumulate,
                            cudaStream_t stream);

// Quantized weights (any quantized type) for a batch: out[t, r] (+)= dot(w[r, :], x[t, :]) with x in f16. The
// weight rows are widened to f16 tile_rows at a time into `tile` (launch_dequantize_f16), each tile then one
// tensor-core GEMM writing its columns of out, so no dequantized copy of the matrix outlives the call.
// Results as launch_matmul_prepared over the f16-rounded weights.
void launch_matmul_quantized(cublasHandle_t handle,
                             float* out,       // [n, n_out]
                             const void* x,    // [n, n_in] f16
                             const void* w,    // [n_out, n_in] in w_dtype
                             DType w_dtype, int64_t n, int64_t n_in, int64_t n_out, bool accumulate,
                             void* tile,       // [tile_rows, n_in] f16 scratch
                             int64_t tile_rows, cudaStream_t stream);

}  // namespace kvlm
