// Token embedding lookup: one thread block per token, threads striding over the row (coalesced). Quantized
// tables (every quantized type) are dequantized element by element as convert_to_f32 does (bit-identical).
#include "kernels/cuda_ops.h"
#include "kernels/dtype_cuda.cuh"
#include "kernels/programmatic_launch.cuh"
#include "kernels/quant_cuda.cuh"
#include "runtime/cuda_check.h"

namespace kvlm {

template <typename T>
__global__ void embed_kernel(float* out,             // [n, dim]
                             const int32_t* tokens,  // [n]
                             const T* table,         // [n_vocab, dim]
                             int32_t dim) {
    wait_for_prior_kernel();  // the token may be the prior step's pick
    allow_next_kernel();
    int32_t t = blockIdx.x;
    const T* row = table + int64_t(tokens[t]) * dim;
    float* dst = out + int64_t(t) * dim;
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = load_f32(row, i);
}

template <DType Q>
__global__ void embed_quantized_kernel(float* out,             // [n, dim]
                                       const int32_t* tokens,  // [n]
                                       const uint8_t* table,   // [n_vocab, dim / kElements] blocks of Q
                                       int32_t dim) {
    wait_for_prior_kernel();  // the token may be the prior step's pick
    allow_next_kernel();
    int32_t t = blockIdx.x;
    const uint8_t* row = table + int64_t(tokens[t]) * (dim / QuantBlock<Q>::kElements) * QuantBlock<Q>::kBytes;
    float* dst = out + int64_t(t) * dim;
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = dequant_at<Q>(row, i);
}

void launch_embed(float* out, const int32_t* tokens, const void* table, DType dtype, int32_t n, int32_t dim,
                  cudaStream_t stream) {
    if (n <= 0) return;
    if (dtype_is_quantized(dtype)) {
        if (dim % dtype_block_elements(dtype) != 0) cuda_throw("launch_embed: quantized rows must be whole blocks");
        KVLM_DISPATCH_QUANT(dtype, Q,
                            launch_kernel("embed_quantized_kernel", embed_quantized_kernel<Q>, n, 256, 0, stream, out,
                                          tokens, static_cast<const uint8_t*>(table), dim));
    } else {
        KVLM_DISPATCH_DTYPE(dtype, T,
                            launch_kernel("embed_kernel", embed_kernel<T>, n, 256, 0, stream, out, tokens,
                                          static_cast<const T*>(table), dim));
    }
}

}  // namespace kvlm
