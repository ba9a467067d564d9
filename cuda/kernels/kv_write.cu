// Writes new K/V rows into their pool blocks through the block table. Grid (token, K|V); the row for
// one token and layer is n_kv_heads * head_dim contiguous elements of the block record (see KvLayout),
// so the same bytes land where kv_write_cpu puts them (a q8_0 row: one thread per 32-element block, quantized
// with the CPU's arithmetic).
#include "kernels/cuda_ops.h"
#include "kernels/kv_cache_cuda.cuh"
#include "runtime/cuda_check.h"

namespace kvlm {

template <typename T>
__global__ void kv_write_kernel(T* kv,                       // [n_blocks] block records
                                KvLayout layout, int32_t layer,
                                const float* k,              // [n, n_kv_heads, head_dim]
                                const float* v,              // [n, n_kv_heads, head_dim]
                                const int32_t* block_table,  // [>= max(positions) / block_size + 1]
                                const int32_t* positions) {  // [n]
    int32_t t = blockIdx.x, kind = blockIdx.y;
    int32_t pos = positions[t];
    int64_t row = int64_t(layout.n_kv_heads) * layout.head_dim;
    int64_t block_elements = int64_t(layout.n_layers) * 2 * layout.block_size * row;
    int64_t offset = int64_t(block_table[pos / layout.block_size]) * block_elements +
                     ((int64_t(layer) * 2 + kind) * layout.block_size + pos % layout.block_size) * row;
    const float* src = (kind == 0 ? k : v) + int64_t(t) * row;
    if constexpr (kIsQ8Kv<T>) {
        for (int64_t b = threadIdx.x; b < row / 32; b += blockDim.x) store_q8_0_block(kv_at(kv, offset + 32 * b), src + 32 * b);
    } else {
        for (int64_t i = threadIdx.x; i < row; i += blockDim.x) store_f32(kv + offset, i, src[i]);
    }
}

void launch_kv_write(void* kv, const KvLayout& layout, int32_t layer, const float* k, const float* v,
                     const int32_t* block_table, const int32_t* positions, int32_t n, cudaStream_t stream) {
    if (n <= 0) return;
    dim3 grid(unsigned(n), 2);
    KVLM_DISPATCH_KV_DTYPE(layout.dtype, T,
                        kv_write_kernel<T><<<grid, 256, 0, stream>>>(static_cast<T*>(kv), layout, layer, k, v,
                                                                      block_table, positions));
    CUDA_CHECK_LAUNCH();
}

}  // namespace kvlm
