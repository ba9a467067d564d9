// RoPE in the rotate_half layout: one thread block per token, one thread per (head, pair). The angle is
// formed in f32 (pos * inv_freq, as the CPU twin does) and its cos/sin taken in f64 then rounded, so the
// rotation factors match rope_cpu's bit for bit; inv_freq (with any llama3 scaling) is precomputed on
// the host by rope_inv_freq and uploaded once.
#include "cuda_check.h"
#include "cuda_ops.h"

namespace kvlm {

__global__ void rope_kernel(float* x,                  // [n, n_heads, head_dim]
                            const int32_t* positions,  // [n]
                            const float* inv_freq,     // [head_dim / 2]
                            int32_t n_heads, int32_t head_dim) {
    int32_t t = blockIdx.x, half = head_dim / 2;
    float pos = float(positions[t]);
    for (int32_t p = threadIdx.x; p < n_heads * half; p += blockDim.x) {
        int32_t h = p / half, i = p % half;
        float angle = pos * inv_freq[i];
        double s, c;
        sincos(double(angle), &s, &c);
        float sin_a = float(s), cos_a = float(c);
        float* xh = x + (int64_t(t) * n_heads + h) * head_dim;
        float x0 = xh[i], x1 = xh[i + half];
        xh[i] = x0 * cos_a - x1 * sin_a;
        xh[i + half] = x0 * sin_a + x1 * cos_a;
    }
}

void launch_rope(float* x, const int32_t* positions, const float* inv_freq, int32_t n, int32_t n_heads,
                 int32_t head_dim, cudaStream_t stream) {
    if (n <= 0) return;
    rope_kernel<<<n, 256, 0, stream>>>(x, positions, inv_freq, n_heads, head_dim);
    CUDA_CHECK_LAUNCH();
}

}  // namespace kvlm
