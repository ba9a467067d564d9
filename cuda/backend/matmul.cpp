// cuBLAS GEMMs (see matmul.h). cuBLAS is column-major: the row-major [n_out, n_in] weight is a
// column-major [n_in, n_out] matrix, so out^T = W x^T is gemm(T, N) with m = n_out, n = n_tokens, k = n_in.
#include "backend/matmul.h"

#include <algorithm>
#include <climits>

#include "kernels/cuda_ops.h"
#include "runtime/cuda_check.h"
#include "util/error.h"

namespace kvlm {

void launch_matmul_prepared(cublasHandle_t handle, float* out, const void* x, const void* w, DType w_dtype, int64_t n,
                            int64_t n_in, int64_t n_out, bool accumulate, cudaStream_t stream) {
    if (n <= 0) return;
    KVLM_ASSERT(n <= INT_MAX && n_in <= INT_MAX && n_out <= INT_MAX, "launch_matmul: dimension above INT_MAX");
    const CublasApi& api = cublas_api();
    CUBLAS_CHECK(api.set_stream(handle, stream));
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    const int m = int(n_out), cols = int(n), k = int(n_in);
    if (w_dtype == DType::f32) {
        CUBLAS_CHECK(api.sgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, cols, k, &alpha, static_cast<const float*>(w), k,
                               static_cast<const float*>(x), k, &beta, out, m));
        return;
    }
    cudaDataType type = w_dtype == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
    CUBLAS_CHECK(api.gemm_ex(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, cols, k, &alpha, w, type, k, x, type, k, &beta, out,
                             CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void launch_matmul_quantized(cublasHandle_t handle, float* out, const void* x, const void* w, DType w_dtype, int64_t n,
                             int64_t n_in, int64_t n_out, bool accumulate, void* tile, int64_t tile_rows,
                             cudaStream_t stream) {
    if (n <= 0 || n_out <= 0) return;
    KVLM_ASSERT(dtype_is_quantized(w_dtype), "launch_matmul_quantized: weights are not quantized");
    KVLM_ASSERT(n_in % dtype_block_elements(w_dtype) == 0, "launch_matmul_quantized: rows are not whole blocks");
    KVLM_ASSERT(tile != nullptr && tile_rows >= 1, "launch_matmul_quantized: no tile scratch");
    KVLM_ASSERT(n <= INT_MAX && n_in <= INT_MAX && n_out <= INT_MAX, "launch_matmul: dimension above INT_MAX");
    const CublasApi& api = cublas_api();
    CUBLAS_CHECK(api.set_stream(handle, stream));
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    const size_t row_bytes = size_t(dtype_bytes(w_dtype, uint64_t(n_in)));
    // Tiles run in stream order: a tile's dequantization waits for the previous tile's GEMM to finish reading.
    for (int64_t r0 = 0; r0 < n_out; r0 += tile_rows) {
        const int64_t rows = std::min(tile_rows, n_out - r0);
        launch_dequantize_f16(tile, static_cast<const char*>(w) + size_t(r0) * row_bytes, w_dtype, rows * n_in, stream);
        // Column-major view: out^T[r0 .. r0 + rows) = tile x^T, written with out's leading dimension n_out.
        CUBLAS_CHECK(api.gemm_ex(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(rows), int(n), int(n_in), &alpha, tile,
                                 CUDA_R_16F, int(n_in), x, CUDA_R_16F, int(n_in), &beta, out + r0, CUDA_R_32F,
                                 int(n_out), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
}

void launch_matmul(cublasHandle_t handle, float* out, const float* x, const void* w, DType w_dtype, int64_t n,
                   int64_t n_in, int64_t n_out, void* x_converted, cudaStream_t stream) {
    if (n <= 0) return;
    if (w_dtype != DType::f32) {
        KVLM_ASSERT(x_converted != nullptr, "launch_matmul: f16/bf16 weights need the x_converted scratch");
        launch_convert_from_f32(x_converted, x, w_dtype, n * n_in, stream);
    }
    launch_matmul_prepared(handle, out, w_dtype == DType::f32 ? static_cast<const void*>(x) : x_converted, w, w_dtype,
                           n, n_in, n_out, false, stream);
}

}  // namespace kvlm
