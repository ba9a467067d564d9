// Paged attention for decode steps and short batches over the block table, flash-decoding style.
//
// Layout. Thread block (split, kv head x head chunk, token) computes attention for up to kMaxGroupHeads
// query heads of one GQA group: they all read the same K and V rows, so each row is loaded once per block
// and used by every head of the chunk (the block count and the K/V bytes read fall by the group size; a
// group larger than kMaxGroupHeads is split into ceil(G / kMaxGroupHeads) chunks of equal size, each its own
// block). When those blocks would be fewer than the multiprocessors (a decode step at a short context), each
// query head gets its own block instead (a kernel compiled for one head): a grouped block is a serial chain
// of instructions that no other warp hides (H200, ncu, SmolLM2's decode at 64 keys: 3 blocks, ~2,000
// instructions per warp at ~10 cycles each, 16 us), and the group's shared rows come from L2 at that size.
// Both kernels do each head's arithmetic in the same order, so they give the same bits.
// The block walks its share of the keys in tiles of kAttnTile with an online softmax per head:
//   - scores: groups of key_lanes lanes take one K row each; a lane loads units gl, gl + key_lanes, ... of
//     the row (16-byte chunks when head_dim * sizeof(T) is a multiple of 16; for a q8_0 cache, 8 elements of
//     a block with its scale; else single elements read through load_kv), holds
//     the matching elements of every head's query in registers (queries staged as f32 in shared memory),
//     and the group's partial dot products are summed with shuffles;
//   - softmax: one warp per head, f32 max / sum / correction per head, probabilities in shared [heads][tile];
//   - output: each thread owns one unit of the V rows (two elements per thread on the scalar path past
//     head_dim 128) and accumulates it into every head's accumulator in registers; when a row has fewer units
//     than threads, key_groups rows are accumulated side by side and summed, in group order, at the end.
// Keys are visited in increasing position within a split and splits merge in order, so the result does not
// depend on the physical block order; no atomics. When a query's keys are split over several blocks,
// attention_combine_kernel merges the partial results ([n, n_heads, n_splits, kPartialStride] rows).
// The split length is either fixed by the host (launch_paged_attention, from max_keys) or derived per query
// on the device from its position (launch_paged_attention_splits, for CUDA graphs replayed as the context
// grows); a split starting past its query's last key writes max -inf, sum 0 and weighs nothing.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/cuda_ops.h"
#include "kernels/kv_cache_cuda.cuh"
#include "kernels/paged_attention.cuh"
#include "kernels/programmatic_launch.cuh"
#include "runtime/cuda_check.h"

namespace kvlm {

using namespace attention_detail;

// MaxHeads: the most query heads a block takes (kMaxGroupHeads, or 1 for a block per head).
template <typename T, bool Vec, int MaxHeads>
__global__ void __launch_bounds__(kAttnThreads)
    paged_attention_kernel(float* out, float* partials, const float* q, const T* kv, KvLayout layout, int32_t layer,
                           const int32_t* block_table, const int32_t* positions, int32_t n_heads, AttnGeometry geo,
                           int32_t keys_per_split, float scale, const int32_t* row_tables) {
    __shared__ AttnShared<MaxHeads> attn_shared;
    wait_for_prior_kernel();  // q, the pool, positions and the table all come from before
    allow_next_kernel();
    attention_block<T, Vec, MaxHeads>(attn_shared, blockIdx.x, blockIdx.y,
                                      blockIdx.z, gridDim.x, out, partials, q, kv, layout, layer, block_table,
                                      positions, n_heads, geo, keys_per_split, scale, row_tables);
}

// Merges the splits of each (token, head): block (head, token).
__global__ void attention_combine_kernel(float* out, const float* partials, int32_t n_heads, int32_t head_dim,
                                         int32_t n_splits) {
    wait_for_prior_kernel();
    allow_next_kernel();
    combine_head(out, partials, n_heads, head_dim, n_splits, blockIdx.x, blockIdx.y);
}

namespace {

// The argument checks both launchers make; messages start with the launcher's name.
void check_attention_args(const char* who, const KvLayout& layout, int32_t n, int32_t n_heads) {
    auto fail = [who](const char* what) { cuda_throw((std::string(who) + ": " + what).c_str()); };
    if (layout.head_dim < 1 || layout.head_dim > kCudaMaxHeadDim) fail("head_dim outside 1..kCudaMaxHeadDim (256)");
    if (n > 65535 || n_heads < 1 || n_heads > 65535) fail("more than 65535 tokens or heads in a batch");
    if (layout.n_kv_heads <= 0 || n_heads % layout.n_kv_heads != 0) fail("n_heads is not a multiple of n_kv_heads");
    if (layout.dtype == DType::q8_0 && layout.head_dim % 32 != 0) fail("a q8_0 cache needs head_dim a multiple of 32");
}

template <typename T, int MaxHeads>
void launch_attention_kernel(const dim3& grid, bool vec, const AttnGeometry& geo, float* out, float* partials,
                             const float* q, const T* kv, const KvLayout& layout, int32_t layer,
                             const int32_t* block_table, const int32_t* positions, int32_t n_heads,
                             int32_t keys_per_split, float scale, const int32_t* row_tables, cudaStream_t stream) {
    if (vec) {
        launch_kernel("paged_attention_kernel", paged_attention_kernel<T, true, MaxHeads>, grid, kAttnThreads, 0,
                      stream, out, partials, q, kv, layout, layer, block_table, positions, n_heads, geo, keys_per_split,
                      scale, row_tables);
        return;
    }
    if constexpr (kIsQ8Kv<T>)  // its rows are whole blocks, always read in vector units
        cuda_throw("paged attention: a q8_0 pool without vector units");
    else
        launch_kernel("paged_attention_kernel", paged_attention_kernel<T, false, MaxHeads>, grid, kAttnThreads, 0,
                      stream, out, partials, q, kv, layout, layer, block_table, positions, n_heads, geo, keys_per_split,
                      scale, row_tables);
}

template <typename T>
void launch_attention_kernel(float* out, float* partials, const float* q, const T* kv, const KvLayout& layout,
                             int32_t layer, const int32_t* block_table, const int32_t* positions, int32_t n,
                             int32_t n_heads, int32_t n_splits, int32_t keys_per_split, int32_t n_sms,
                             int32_t one_head_rule, float scale, const int32_t* row_tables, cudaStream_t stream) {
    const AttnPlan plan = attention_plan<T>(layout, kv, n, n_heads, n_splits, n_sms, one_head_rule);
    const bool vec = plan.vec;
    const AttnGeometry& geo = plan.geo;
    // grid.y = n_kv_heads * head_chunks <= n_heads <= 65535.
    const dim3 grid(unsigned(n_splits), unsigned(layout.n_kv_heads * geo.head_chunks), unsigned(n));
    if (geo.heads_per_block == 1)
        launch_attention_kernel<T, 1>(grid, vec, geo, out, partials, q, kv, layout, layer, block_table, positions,
                                      n_heads, keys_per_split, scale, row_tables, stream);
    else
        launch_attention_kernel<T, kMaxGroupHeads>(grid, vec, geo, out, partials, q, kv, layout, layer, block_table,
                                                   positions, n_heads, keys_per_split, scale, row_tables, stream);
}

// Launches the attention kernel on an (n_splits, n_kv_heads * head_chunks, n) grid (a block per query head
// when the grouped grid would be smaller than n_sms), then the combine kernel when n_splits > 1.
// keys_per_split <= 0: derived per query on the device. Neither allocates nor synchronizes (both launchers
// are captured in CUDA graphs).
void launch_attention(float* out, const float* q, const void* kv, const KvLayout& layout, int32_t layer,
                      const int32_t* block_table, const int32_t* positions, int32_t n, int32_t n_heads,
                      int32_t n_splits, int32_t keys_per_split, int32_t n_sms, const AttentionScratch& scratch,
                      const int32_t* row_tables, cudaStream_t stream) {
    const float scale = 1.0f / std::sqrt(float(layout.head_dim));
    KVLM_DISPATCH_KV_DTYPE(
        layout.dtype, T,
        launch_attention_kernel<T>(out, scratch.partials, q, static_cast<const T*>(kv), layout, layer, block_table,
                                   positions, n, n_heads, n_splits, keys_per_split, n_sms, scratch.one_head, scale,
                                   row_tables, stream));
    if (n_splits > 1)
        launch_kernel("attention_combine_kernel", attention_combine_kernel, dim3(unsigned(n_heads), unsigned(n)), 128, 0,
                      stream, out, static_cast<const float*>(scratch.partials), n_heads, layout.head_dim, n_splits);
}

}  // namespace

int32_t paged_attention_split_count(int32_t n, int32_t n_heads, int32_t n_kv_heads, int32_t max_keys, int32_t n_sms,
                                    const AttentionScratch& scratch) {
    if (n <= 0 || n_heads <= 0 || n_kv_heads <= 0 || n_heads % n_kv_heads != 0 || max_keys < 1) return 1;
    // Split only contexts longer than min_split_keys, only as far as needed to give every multiprocessor
    // ~fill_per_sm blocks (a split runs n * n_kv_heads * head_chunks of them), and only as far as the scratch
    // holds (n * n_heads partial rows per split).
    const int64_t rows = int64_t(n) * n_heads;
    const int64_t blocks = int64_t(n) * n_kv_heads * head_chunks(n_heads / n_kv_heads);
    int64_t n_splits = 1;
    const int64_t min_keys = scratch.min_split_keys;
    if (scratch.partials && max_keys > min_keys) {
        int64_t want = (max_keys + min_keys - 1) / min_keys;
        int64_t fill = (int64_t(scratch.fill_per_sm) * n_sms + blocks - 1) / blocks;
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
    const int32_t n_splits = paged_attention_split_count(n, n_heads, layout.n_kv_heads, max_keys, n_sms, scratch);
    // The split count came from this same rounding, so recomputing it from n_splits gives back the length
    // paged_attention_split_count settled on (every split non-empty for the longest query).
    int64_t keys_per_split = (int64_t(max_keys) + n_splits - 1) / n_splits;
    keys_per_split = (keys_per_split + kAttnTile - 1) / kAttnTile * kAttnTile;
    launch_attention(out, q, kv, layout, layer, block_table, positions, n, n_heads,
                     n_splits, int32_t(keys_per_split), n_sms, scratch, nullptr, stream);
}

void launch_paged_attention_splits(float* out, const float* q, const void* kv, const KvLayout& layout,
                                   int32_t layer, const int32_t* block_table, const int32_t* positions, int32_t n,
                                   int32_t n_heads, int32_t n_splits, int32_t n_sms, const AttentionScratch& scratch,
                                   cudaStream_t stream, const int32_t* row_tables) {
    if (n <= 0) return;
    check_attention_args("launch_paged_attention_splits", layout, n, n_heads);
    if (n_splits < 1 || n_splits > kMaxSplits) cuda_throw("launch_paged_attention_splits: n_splits outside 1..1024");
    if (n_splits > 1 && (!scratch.partials || int64_t(n) * n_heads * n_splits > scratch.max_rows))
        cuda_throw("launch_paged_attention_splits: scratch holds fewer than n * n_heads * n_splits rows");
    launch_attention(out, q, kv, layout, layer, block_table, positions, n, n_heads,
                     n_splits, 0, n_sms, scratch, row_tables, stream);
}

}  // namespace kvlm
