// RoPE on q and k plus the K/V pool write in one launch (the decode step's glue between the Q/K/V
// products and attention). One thread block per (token, head row): q heads, then k heads, then v heads. A
// thread rotates one (i, i + half) pair of a q or k row and writes the result back in place and, for k,
// straight from its registers into the pool, so no thread reads a value another thread writes and the
// kernel needs no barrier. The rotation is rope_cuda.cuh's (rope.cu's) and the stores are kv_write_kernel's
// (kv_write.cu), so the results equal launch_rope(q), launch_rope(k), launch_kv_write bit for bit. A q8_0
// cache is the exception: a block's scale needs its 32 rotated values, so a k head's threads meet at one
// barrier (the condition is uniform over the thread block) and then quantize one block each.
#include "kernels/cuda_ops.h"
#include "kernels/kv_cache_cuda.cuh"
#include "kernels/programmatic_launch.cuh"
#include "kernels/rope_cuda.cuh"
#include "runtime/cuda_check.h"

namespace kvlm {

namespace {
constexpr int kRopeKvThreads = 64;  // half of head_dim 128: one pair per thread in the common case
}  // namespace

template <typename T>
__global__ void __launch_bounds__(kRopeKvThreads)
    rope_kv_write_kernel(float* q,                    // [n, n_heads, head_dim]
                         float* k,                    // [n, n_kv_heads, head_dim]
                         const float* v,              // [n, n_kv_heads, head_dim]
                         T* kv,                       // [n_blocks] block records
                         KvLayout layout, int32_t layer,
                         const int32_t* block_table,  // [>= max(positions) / block_size + 1]
                         const int32_t* positions,    // [n]
                         const float* inv_freq,       // [head_dim / 2]
                         int32_t n_heads,
                         const int32_t* row_tables) {  // [n] offsets into block_table, or null
    wait_for_prior_kernel();  // q, k, v, positions and the table come from before
    allow_next_kernel();
    // blockIdx.y: [0, n_heads) q head; [n_heads, n_heads + n_kv_heads) k head; above that v head.
    const int32_t t = blockIdx.x, y = blockIdx.y, n_kv_heads = layout.n_kv_heads;
    const int32_t head_dim = layout.head_dim, half = head_dim / 2;
    const int32_t pos = positions[t];
    if (row_tables) block_table += row_tables[t];
    if (y >= n_heads + n_kv_heads) {
        const int32_t kv_head = y - n_heads - n_kv_heads;
        const int64_t offset = pool_row(layout, layer, 1, block_table, pos) + int64_t(kv_head) * head_dim;
        const float* vh = v + (int64_t(t) * n_kv_heads + kv_head) * head_dim;
        if constexpr (kIsQ8Kv<T>) {
            for (int32_t b = threadIdx.x; b < head_dim / 32; b += blockDim.x)
                store_q8_0_block(kv_at(kv, offset + 32 * b), vh + 32 * b);
        } else {
            for (int32_t d = threadIdx.x; d < head_dim; d += blockDim.x) store_f32(kv + offset, d, vh[d]);
        }
        return;
    }
    const bool is_k = y >= n_heads;
    const int32_t head = is_k ? y - n_heads : y;
    float* xh = is_k ? k + (int64_t(t) * n_kv_heads + head) * head_dim : q + (int64_t(t) * n_heads + head) * head_dim;
    // K row of this head in the pool (only used when is_k).
    const int64_t offset = is_k ? pool_row(layout, layer, 0, block_table, pos) + int64_t(head) * head_dim : 0;
    for (int32_t i = threadIdx.x; i < half; i += blockDim.x) {
        const float2 r = rope_rotate(xh[i], xh[i + half], pos, inv_freq[i]);
        const float r0 = r.x, r1 = r.y;
        xh[i] = r0;
        xh[i + half] = r1;
        if constexpr (!kIsQ8Kv<T>) {
            if (is_k) {
                store_f32(kv + offset, i, r0);
                store_f32(kv + offset, i + half, r1);
            }
        }
    }
    if constexpr (kIsQ8Kv<T>) {
        if (is_k) {  // uniform over the thread block
            __syncthreads();  // the head's rotated values in xh are visible to every thread
            for (int32_t b = threadIdx.x; b < head_dim / 32; b += blockDim.x)
                store_q8_0_block(kv_at(kv, offset + 32 * b), xh + 32 * b);
        }
    }
}

void launch_rope_kv_write(float* q, float* k, const float* v, void* kv, const KvLayout& layout, int32_t layer,
                          const int32_t* block_table, const int32_t* positions, const float* inv_freq, int32_t n,
                          int32_t n_heads, cudaStream_t stream, const int32_t* row_tables) {
    if (n <= 0) return;
    if (layout.head_dim < 2 || layout.head_dim % 2 != 0) cuda_throw("launch_rope_kv_write: head_dim must be even");
    if (n_heads < 1 || layout.n_kv_heads < 1 || int64_t(n_heads) + 2 * int64_t(layout.n_kv_heads) > 65535)
        cuda_throw("launch_rope_kv_write: n_heads + 2 * n_kv_heads outside 3..65535");
    const dim3 grid(unsigned(n), unsigned(n_heads + 2 * layout.n_kv_heads));
    KVLM_DISPATCH_KV_DTYPE(layout.dtype, T,
                        launch_kernel("rope_kv_write_kernel", rope_kv_write_kernel<T>, grid, kRopeKvThreads, 0,
                                      stream, q, k, v, static_cast<T*>(kv), layout, layer, block_table, positions,
                                      inv_freq, n_heads, row_tables));
}

}  // namespace kvlm
