// Paged attention (decode and prefill) over the block table, flash-decoding style: thread block
// (split, head, token) walks its share of the keys in tiles of kAttnTile with an online softmax; when a
// query's keys are split over several blocks, attention_combine_kernel merges the partial results.
// Keys are visited in increasing position within a split and splits merge in order, so the result does not
// depend on the physical block order. GQA: query head h reads kv head h / (n_heads / n_kv_heads).
// The split length is either fixed by the host (launch_paged_attention, from max_keys) or derived per query
// on the device from its position (launch_paged_attention_splits, for CUDA graphs replayed as the context
// grows); a split starting past its query's last key writes max -inf, sum 0 and weighs nothing.
#include <algorithm>
#include <cmath>
#include <string>

#include "cuda_check.h"
#include "cuda_ops.h"
#include "dtype_cuda.cuh"

namespace kvlm {

namespace {
constexpr int kAttnThreads = 128;                                  // 4 warps
constexpr int kAttnTile = kAttnThreads;                            // keys per tile: one probability per thread
constexpr int kDimsPerThread = kCudaMaxHeadDim / kAttnThreads;     // output dims each thread accumulates
constexpr int kPartialStride = kCudaMaxHeadDim + 2;                // floats per partial row: acc, max, sum
constexpr int32_t kMinKeysPerSplit = 256;                          // shorter contexts are not split
constexpr int32_t kMaxSplits = 1024;
}  // namespace

template <typename T>
__global__ void __launch_bounds__(kAttnThreads)
    paged_attention_kernel(float* out,                  // [n, n_heads, head_dim] (when gridDim.x == 1)
                           float* partials,             // [n, n_heads, n_splits, kPartialStride] (otherwise)
                           const float* q,              // [n, n_heads, head_dim]
                           const T* kv,                 // [n_blocks] block records
                           KvLayout layout, int32_t layer,
                           const int32_t* block_table,  // [>= max(positions) / block_size + 1]
                           const int32_t* positions,    // [n]
                           int32_t n_heads,
                           int32_t keys_per_split,  // <= 0: ceil(n_keys / n_splits) rounded up to kAttnTile
                           float scale) {
    const int32_t split = blockIdx.x, h = blockIdx.y, t = blockIdx.z, n_splits = gridDim.x;
    const int32_t head_dim = layout.head_dim, block_size = layout.block_size;
    const int32_t kv_head = h / (n_heads / layout.n_kv_heads);
    const int32_t n_keys = positions[t] + 1;
    int64_t split_keys = keys_per_split;
    if (split_keys <= 0) {
        split_keys = (int64_t(n_keys) + n_splits - 1) / n_splits;
        split_keys = (split_keys + kAttnTile - 1) / kAttnTile * kAttnTile;
    }
    const int64_t begin64 = split * split_keys;  // 64-bit: split * split_keys may pass INT32_MAX
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, n_warps = kAttnThreads / 32;
    if (begin64 >= n_keys) {
        // An empty split (more splits than this query's keys need) weighs nothing: max -inf, sum 0. The
        // combine kernel never reads the accumulator of a row with sum 0, so it is left unwritten.
        // The whole block returns here (the condition is uniform), before any barrier.
        if (n_splits > 1 && tid == 0) {
            float* part = partials + ((int64_t(t) * n_heads + h) * n_splits + split) * kPartialStride;
            part[kCudaMaxHeadDim] = -INFINITY;
            part[kCudaMaxHeadDim + 1] = 0.0f;
        }
        return;
    }
    const int32_t begin = int32_t(begin64);
    const int32_t end = int32_t(min(begin64 + split_keys, int64_t(n_keys)));

    __shared__ float q_s[kCudaMaxHeadDim];
    __shared__ float p_s[kAttnTile];        // scores, then probabilities, of the current tile
    __shared__ int64_t offset_s[kAttnTile];  // element offset of each tile key's K row (this head, layer)

    const float* qh = q + (int64_t(t) * n_heads + h) * head_dim;
    for (int d = tid; d < head_dim; d += kAttnThreads) q_s[d] = qh[d];
    const int64_t row = int64_t(layout.n_kv_heads) * head_dim;
    const int64_t block_elements = int64_t(layout.n_layers) * 2 * block_size * row;
    const int64_t head_offset = int64_t(layer) * 2 * block_size * row + int64_t(kv_head) * head_dim;
    const int64_t v_delta = int64_t(block_size) * row;  // a key's V row sits block_size rows after its K row

    float m = -INFINITY, l = 0.0f;
    float acc[kDimsPerThread];
#pragma unroll
    for (int i = 0; i < kDimsPerThread; i++) acc[i] = 0.0f;
    __syncthreads();

    for (int32_t tile = begin; tile < end; tile += kAttnTile) {
        const int32_t tile_n = min(kAttnTile, end - tile);
        if (tid < tile_n) {
            int32_t j = tile + tid;
            offset_s[tid] = int64_t(block_table[j / block_size]) * block_elements + int64_t(j % block_size) * row +
                            head_offset;
        }
        __syncthreads();
        // Scores: one warp per key, lanes over head_dim (coalesced K row reads).
        for (int jj = warp; jj < tile_n; jj += n_warps) {
            const T* krow = kv + offset_s[jj];
            float s = 0.0f;
            for (int d = lane; d < head_dim; d += 32) s = fmaf(load_f32(krow, d), q_s[d], s);
            for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
            if (lane == 0) p_s[jj] = s * scale;
        }
        __syncthreads();
        float tile_max = -INFINITY;
        for (int jj = 0; jj < tile_n; jj++) tile_max = fmaxf(tile_max, p_s[jj]);
        const float new_m = fmaxf(m, tile_max);
        const float correction = expf(m - new_m);  // 0 on the first tile (m = -inf)
        __syncthreads();  // everyone has read the scores before they become probabilities
        if (tid < tile_n) p_s[tid] = expf(p_s[tid] - new_m);
        __syncthreads();
        float tile_sum = 0.0f;
        for (int jj = 0; jj < tile_n; jj++) tile_sum += p_s[jj];
        l = l * correction + tile_sum;
        // Output: thread owns dims tid, tid + kAttnThreads, ...; reads of V rows are coalesced across threads.
#pragma unroll
        for (int i = 0; i < kDimsPerThread; i++) {
            int d = tid + i * kAttnThreads;
            if (d < head_dim) {
                float a = acc[i] * correction;
                for (int jj = 0; jj < tile_n; jj++) a = fmaf(p_s[jj], load_f32(kv + offset_s[jj] + v_delta, d), a);
                acc[i] = a;
            }
        }
        m = new_m;
        __syncthreads();  // p_s and offset_s are rewritten by the next tile
    }

    if (n_splits == 1) {
        float* oh = out + (int64_t(t) * n_heads + h) * head_dim;
        const float inv_l = 1.0f / l;
#pragma unroll
        for (int i = 0; i < kDimsPerThread; i++) {
            int d = tid + i * kAttnThreads;
            if (d < head_dim) oh[d] = acc[i] * inv_l;
        }
        return;
    }
    float* part = partials + ((int64_t(t) * n_heads + h) * n_splits + split) * kPartialStride;
#pragma unroll
    for (int i = 0; i < kDimsPerThread; i++) {
        int d = tid + i * kAttnThreads;
        if (d < head_dim) part[d] = acc[i];
    }
    if (tid == 0) {
        part[kCudaMaxHeadDim] = m;
        part[kCudaMaxHeadDim + 1] = l;
    }
}

// Merges the splits of each (token, head): out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s.
__global__ void attention_combine_kernel(float* out,             // [n, n_heads, head_dim]
                                         const float* partials,  // [n, n_heads, n_splits, kPartialStride]
                                         int32_t n_heads, int32_t head_dim, int32_t n_splits) {
    const int32_t h = blockIdx.x, t = blockIdx.y;
    const float* base = partials + (int64_t(t) * n_heads + h) * n_splits * kPartialStride;
    float max_all = -INFINITY;
    for (int32_t s = 0; s < n_splits; s++) max_all = fmaxf(max_all, base[s * kPartialStride + kCudaMaxHeadDim]);
    float den = 0.0f;
    for (int32_t s = 0; s < n_splits; s++) {
        float l = base[s * kPartialStride + kCudaMaxHeadDim + 1];
        if (l > 0.0f) den += expf(base[s * kPartialStride + kCudaMaxHeadDim] - max_all) * l;
    }
    const float inv_den = 1.0f / den;
    float* oh = out + (int64_t(t) * n_heads + h) * head_dim;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float num = 0.0f;
        for (int32_t s = 0; s < n_splits; s++) {
            const float* part = base + s * kPartialStride;
            if (part[kCudaMaxHeadDim + 1] > 0.0f) num += expf(part[kCudaMaxHeadDim] - max_all) * part[d];
        }
        oh[d] = num * inv_den;
    }
}

namespace {

// The argument checks both launchers make; messages start with the launcher's name.
void check_attention_args(const char* who, const KvLayout& layout, int32_t n, int32_t n_heads) {
    auto fail = [who](const char* what) { cuda_throw((std::string(who) + ": " + what).c_str()); };
    if (layout.head_dim < 1 || layout.head_dim > kCudaMaxHeadDim) fail("head_dim outside 1..kCudaMaxHeadDim (256)");
    if (n > 65535 || n_heads < 1 || n_heads > 65535) fail("more than 65535 tokens or heads in a batch");
    if (layout.n_kv_heads <= 0 || n_heads % layout.n_kv_heads != 0) fail("n_heads is not a multiple of n_kv_heads");
}

// Launches the attention kernel on an (n_splits, n_heads, n) grid, then the combine kernel when
// n_splits > 1. keys_per_split <= 0: derived per query on the device. Neither allocates nor synchronizes
// (both launchers are captured in CUDA graphs).
void launch_attention(float* out, const float* q, const void* kv, const KvLayout& layout, int32_t layer,
                      const int32_t* block_table, const int32_t* positions, int32_t n, int32_t n_heads,
                      int32_t n_splits, int32_t keys_per_split, const AttentionScratch& scratch,
                      cudaStream_t stream) {
    const float scale = 1.0f / std::sqrt(float(layout.head_dim));
    const dim3 grid(static_cast<unsigned>(n_splits), static_cast<unsigned>(n_heads), static_cast<unsigned>(n));
    KVLM_DISPATCH_DTYPE(layout.dtype, T,
                        paged_attention_kernel<T><<<grid, kAttnThreads, 0, stream>>>(
                            out, scratch.partials, q, static_cast<const T*>(kv), layout, layer, block_table,
                            positions, n_heads, keys_per_split, scale));
    CUDA_CHECK_LAUNCH();
    if (n_splits > 1) {
        attention_combine_kernel<<<dim3(unsigned(n_heads), unsigned(n)), 128, 0, stream>>>(
            out, scratch.partials, n_heads, layout.head_dim, n_splits);
        CUDA_CHECK_LAUNCH();
    }
}

}  // namespace

int32_t paged_attention_split_count(int32_t n, int32_t n_heads, int32_t max_keys, int32_t n_sms,
                                    const AttentionScratch& scratch) {
    if (n <= 0 || n_heads <= 0 || max_keys < 1) return 1;
    // Split only long contexts, only as far as needed to give every multiprocessor ~2 blocks, and only as
    // far as the scratch holds.
    const int64_t rows = int64_t(n) * n_heads;
    int64_t n_splits = 1;
    if (scratch.partials && max_keys > kMinKeysPerSplit) {
        int64_t want = (max_keys + kMinKeysPerSplit - 1) / kMinKeysPerSplit;
        int64_t fill = (2 * int64_t(n_sms) + rows - 1) / rows;
        n_splits = std::min({want, fill, scratch.max_rows / rows, int64_t(kMaxSplits)});
        n_splits = std::max<int64_t>(n_splits, 1);
    }
    int64_t keys_per_split = (max_keys + n_splits - 1) / n_splits;
    keys_per_split = (keys_per_split + kAttnTile - 1) / kAttnTile * kAttnTile;
    return int32_t((max_keys + keys_per_split - 1) / keys_per_split);  // no split starts past max_keys
}

void launch_paged_attention(float* out, const float* q, const void* kv, const KvLayout& layout, int32_t layer,
                            const int32_t* block_table, const int32_t* positions, int32_t n, int32_t n_heads,
                            int32_t max_keys, int32_t n_sms, const AttentionScratch& scratch, cudaStream_t stream) {
    if (n <= 0) return;
    check_attention_args("launch_paged_attention", layout, n, n_heads);
    if (max_keys < 1) cuda_throw("launch_paged_attention: max_keys must be at least 1");
    const int32_t n_splits = paged_attention_split_count(n, n_heads, max_keys, n_sms, scratch);
    // The split count came from this same rounding, so recomputing it from n_splits gives back the length
    // paged_attention_split_count settled on (every split non-empty for the longest query).
    int64_t keys_per_split = (int64_t(max_keys) + n_splits - 1) / n_splits;
    keys_per_split = (keys_per_split + kAttnTile - 1) / kAttnTile * kAttnTile;
    launch_attention(out, q, kv, layout, layer, block_table, positions, n, n_heads,
                     n_splits, int32_t(keys_per_split), scratch, stream);
}

void launch_paged_attention_splits(float* out, const float* q, const void* kv, const KvLayout& layout,
                                   int32_t layer, const int32_t* block_table, const int32_t* positions, int32_t n,
                                   int32_t n_heads, int32_t n_splits, const AttentionScratch& scratch,
                                   cudaStream_t stream) {
    if (n <= 0) return;
    check_attention_args("launch_paged_attention_splits", layout, n, n_heads);
    if (n_splits < 1 || n_splits > kMaxSplits) cuda_throw("launch_paged_attention_splits: n_splits outside 1..1024");
    if (n_splits > 1 && (!scratch.partials || int64_t(n) * n_heads * n_splits > scratch.max_rows))
        cuda_throw("launch_paged_attention_splits: scratch holds fewer than n * n_heads * n_splits rows");
    launch_attention(out, q, kv, layout, layer, block_table, positions, n, n_heads,
                     n_splits, 0, scratch, stream);
}

}  // namespace kvlm
