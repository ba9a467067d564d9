// Token embedding lookup: one thread block per token, threads striding over the row (coalesced).
#include "cuda_check.h"
#include "cuda_ops.h"
#include "dtype_cuda.cuh"

namespace kvlm {

template <typename T>
__global__ void embed_kernel(float* out,             // [n, dim]
                             const int32_t* tokens,  // [n]
                             const T* table,         // [n_vocab, dim]
                             int32_t dim) {
    int32_t t = blockIdx.x;
    const T* row = table + int64_t(tokens[t]) * dim;
    float* dst = out + int64_t(t) * dim;
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = load_f32(row, i);
}

void launch_embed(float* out, const int32_t* tokens, const void* table, DType dtype, int32_t n, int32_t dim,
                  cudaStream_t stream) {
    if (n <= 0) return;
    KVLM_DISPATCH_DTYPE(dtype, T, embed_kernel<T><<<n, 256, 0, stream>>>(out, tokens, static_cast<const T*>(table), dim));
    CUDA_CHECK_LAUNCH();
}

}  // namespace kvlm
