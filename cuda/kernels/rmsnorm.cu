// RMSNorm: one thread block per row; sum of squares by warp shuffles then across warps in shared memory.
// out may alias x: each thread reads x[i] before writing out[i] for the same i, after the reduction.
// The output is f32, or (for the prefill GEMMs' input) f16/bf16 rounded to nearest even.
#include "kernels/cuda_ops.h"
#include "kernels/dtype_cuda.cuh"
#include "kernels/programmatic_launch.cuh"
#include "runtime/cuda_check.h"

namespace kvlm {

constexpr int kRmsnormThreads = 256;

template <typename T>
__global__ void rmsnorm_kernel(T* out,               // [n, dim]
                               const float* x,       // [n, dim]
                               const float* weight,  // [dim]
                               int32_t dim, float eps) {
    wait_for_prior_kernel();
    allow_next_kernel();
    const float* xt = x + int64_t(blockIdx.x) * dim;
    T* ot = out + int64_t(blockIdx.x) * dim;
    float sum = 0.0f;
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) sum = fmaf(xt[i], xt[i], sum);
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    __shared__ float warp_sums[kRmsnormThreads / 32];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) warp_sums[warp] = sum;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < int(blockDim.x / 32); w++) total += warp_sums[w];  // same order in every thread
    float scale = 1.0f / sqrtf(total / float(dim) + eps);
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) store_f32(ot, i, weight[i] * (xt[i] * scale));
}

void launch_rmsnorm(float* out, const float* x, const float* weight, int32_t n, int32_t dim, float eps,
                    cudaStream_t stream) {
    if (n <= 0) return;
    launch_kernel("rmsnorm_kernel", rmsnorm_kernel<float>, n, kRmsnormThreads, 0, stream, out, x, weight, dim, eps);
}

void launch_rmsnorm_to(void* out, const float* x, const float* weight, int32_t n, int32_t dim, float eps,
                       DType out_dtype, cudaStream_t stream) {
    if (n <= 0) return;
    KVLM_DISPATCH_DTYPE(out_dtype, T,
                        launch_kernel("rmsnorm_kernel", rmsnorm_kernel<T>, n, kRmsnormThreads, 0, stream,
                                      static_cast<T*>(out), x, weight, dim, eps));
}

}  // namespace kvlm
