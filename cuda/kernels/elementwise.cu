// Element-wise kernels: SwiGLU (f32 out, or f16/bf16 for the next GEMM), residual add, bias add, and
// f32 -> f16/bf16 conversion of GEMM inputs.
// Grid-stride loops over flat indices; 64-bit indices throughout.
#include "kernels/cuda_ops.h"
#include "kernels/dtype_cuda.cuh"
#include "runtime/cuda_check.h"

namespace kvlm {

namespace {
constexpr int kThreads = 256;
unsigned grid_for(int64_t n) {  // enough blocks to cover n, capped (the loops stride)
    int64_t blocks = (n + kThreads - 1) / kThreads;
    return unsigned(blocks < 65536 ? blocks : 65536);
}
}  // namespace

template <typename T>
__global__ void swiglu_kernel(T* out,             // [total]
                              const float* gate,  // [total]
                              const float* up,    // [total]
                              int64_t total) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        float g = gate[i];
        store_f32(out, i, g / (1.0f + expf(-g)) * up[i]);
    }
}

__global__ void add_kernel(float* x,        // [n]
                           const float* y,  // [n]
                           int64_t n) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        x[i] += y[i];
}

__global__ void add_bias_kernel(float* x,           // [n, dim]
                                const float* bias,  // [dim]
                                int64_t total, int32_t dim) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
        x[i] += bias[i % dim];
}

template <typename T>
__global__ void convert_from_f32_kernel(T* dst,            // [n]
                                        const float* src,  // [n]
                                        int64_t n) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        store_f32(dst, i, src[i]);
}

void launch_swiglu(float* out, const float* gate, const float* up, int32_t n, int32_t n_ff, cudaStream_t stream) {
    int64_t total = int64_t(n) * n_ff;
    if (total <= 0) return;
    swiglu_kernel<float><<<grid_for(total), kThreads, 0, stream>>>(out, gate, up, total);
    CUDA_CHECK_LAUNCH();
}

void launch_swiglu_to(void* out, const float* gate, const float* up, int32_t n, int32_t n_ff, DType out_dtype,
                      cudaStream_t stream) {
    int64_t total = int64_t(n) * n_ff;
    if (total <= 0) return;
    KVLM_DISPATCH_DTYPE(out_dtype, T,
                        swiglu_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(static_cast<T*>(out), gate, up,
                                                                                   total));
    CUDA_CHECK_LAUNCH();
}

void launch_add(float* x, const float* y, int64_t n, cudaStream_t stream) {
    if (n <= 0) return;
    add_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, n);
    CUDA_CHECK_LAUNCH();
}

void launch_add_bias(float* x, const float* bias, int32_t n, int32_t dim, cudaStream_t stream) {
    int64_t total = int64_t(n) * dim;
    if (total <= 0) return;
    add_bias_kernel<<<grid_for(total), kThreads, 0, stream>>>(x, bias, total, dim);
    CUDA_CHECK_LAUNCH();
}

void launch_convert_from_f32(void* dst, const float* src, DType dtype, int64_t n, cudaStream_t stream) {
    if (n <= 0) return;
    KVLM_DISPATCH_DTYPE(dtype, T,
                        convert_from_f32_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<T*>(dst), src, n));
    CUDA_CHECK_LAUNCH();
}

}  // namespace kvlm
