// RoPE in the rotate_half layout: one thread block per token, one thread per (head, pair), the rotation of
// rope_cuda.cuh; inv_freq (with any llama3 scaling) is precomputed on the host by rope_inv_freq and uploaded
// once.
#include "kernels/cuda_ops.h"
#include "kernels/rope_cuda.cuh"
#include "runtime/cuda_check.h"

namespace kvlm {

__global__ void rope_kernel(float* x,                  // [n, n_heads, head_dim]
                            const int32_t* positions,  // [n]
                            const float* inv_freq,     // [head_dim / 2]
                            int32_t n_heads, int32_t head_dim) {
    int32_t t = blockIdx.x, half = head_dim / 2;
    const int32_t pos = positions[t];
    for (int32_t p = threadIdx.x; p < n_heads * half; p += blockDim.x) {
        int32_t h = p / half, i = p % half;
        float* xh = x + (int64_t(t) * n_heads + h) * head_dim;
        const float2 r = rope_rotate(xh[i], xh[i + half], pos, inv_freq[i]);
        xh[i] = r.x;
        xh[i + half] = r.y;
    }
}

void launch_rope(float* x, const int32_t* positions, const float* inv_freq, int32_t n, int32_t n_heads,
                 int32_t head_dim, cudaStream_t stream) {
    if (n <= 0) return;
    rope_kernel<<<n, 256, 0, stream>>>(x, positions, inv_freq, n_heads, head_dim);
    CUDA_CHECK_LAUNCH();
}

}  // namespace kvlm
