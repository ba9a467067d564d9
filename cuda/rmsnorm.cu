// RMSNorm: one thread block per row; sum of squares by warp shuffles then across warps in shared memory.
// out may alias x: each thread reads x[i] before writing out[i] for the same i, after the reduction.
#include "cuda_check.h"
#include "cuda_ops.h"

namespace kvlm {

constexpr int kRmsnormThreads = 256;

__global__ void rmsnorm_kernel(float* out,           // [n, dim]
                               const float* x,       // [n, dim]
                               const float* weight,  // [dim]
                               int32_t dim, float eps) {
    const float* xt = x + int64_t(blockIdx.x) * dim;
    float* ot = out + int64_t(blockIdx.x) * dim;
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
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) ot[i] = weight[i] * (xt[i] * scale);
}

void launch_rmsnorm(float* out, const float* x, const float* weight, int32_t n, int32_t dim, float eps,
                    cudaStream_t stream) {
    if (n <= 0) return;
    rmsnorm_kernel<<<n, kRmsnormThreads, 0, stream>>>(out, x, weight, dim, eps);
    CUDA_CHECK_LAUNCH();
}

}  // namespace kvlm
