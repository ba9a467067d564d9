// Quantized weight rows (every quantized type) widened to f16 for the prefill GEMMs (matmul.cpp dequantizes one
// tile of rows at a time into scratch, then runs the tensor-core f16 GEMM on it). Element values as
// convert_to_f32, then rounded to nearest even f16 (q8_0's d * q needs up to 19 significant bits: f16 keeps 11).
// The tiles are whole rows, so a tile is whole blocks of any type.
#include <algorithm>

#include "kernels/cuda_ops.h"
#include "kernels/quant_cuda.cuh"
#include "runtime/cuda_check.h"

namespace kvlm {

namespace {

// Thread per output element, grid-stride: lanes of a warp read neighbouring bytes of one or two blocks.
template <DType Q>
__global__ void dequantize_f16_kernel(__half* out,       // [n_elements]
                                      const uint8_t* w,  // [n_elements / kElements] blocks of Q
                                      int64_t n_elements) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_elements;
         i += int64_t(gridDim.x) * blockDim.x)
        out[i] = __float2half_rn(dequant_at<Q>(w, i));
}

}  // namespace

void launch_dequantize_f16(void* out, const void* w, DType dtype, int64_t n_elements, cudaStream_t stream) {
    if (n_elements <= 0) return;
    if (n_elements % dtype_block_elements(dtype) != 0)
        cuda_throw("launch_dequantize_f16: not a whole number of blocks");
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((n_elements + threads - 1) / threads, 65536);
    KVLM_DISPATCH_QUANT(dtype, Q,
                        dequantize_f16_kernel<Q><<<unsigned(blocks), threads, 0, stream>>>(
                            static_cast<__half*>(out), static_cast<const uint8_t*>(w), n_elements));
    CUDA_CHECK_LAUNCH();
}

}  // namespace kvlm
