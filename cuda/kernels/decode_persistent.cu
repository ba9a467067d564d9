// The decode step up to its logits as one persistent kernel: every block stays resident (a cooperative
// launch) and the stages the step's 150-odd launches ran one after another - embedding; per layer Q/K/V with
// RoPE and the pool write, attention (and its split combine), the O projection, gate/up with SwiGLU, the down
// projection; the head's norm and GEMV - are separated by grid barriers instead of kernel boundaries.
// SmolLM2-135M's decode is bound by those boundaries (session 25's H100: 153 launches, ~4 us each, 13% of the
// memory roofline); a barrier costs a round trip to L2. Every stage runs the standalone kernels' device code
// (gemv_rows.cuh, gemv_shared.cuh, paged_attention.cuh) with the same row, split and head assignment rules,
// and the norms are summed in the standalone kernels' orders, so a step gives the bits of the
// launch-per-stage step (tested), and rows decoded together still equal steps decoded one by one.
// Scope: f16/bf16 weights (the embedding table and head too), an f16/bf16 pool with 16-byte rows, one-token
// steps, inputs that fit a block's shared memory (the device's opt-in limit less attention's arrays: 50-odd
// thousand values on an H100, so Llama-3-8B's n_ff of 14,336, which the per-stage GEMV reads from global
// memory, is staged here; the same values either way, so the same bits), unsplit GEMV rows;
// persistent_decode_unsupported says why not.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/cuda_ops.h"
#include "kernels/dtype_cuda.cuh"
#include "kernels/gemv_rows.cuh"
#include "kernels/gemv_shared.cuh"
#include "kernels/grid_barrier.cuh"
#include "kernels/paged_attention.cuh"
#include "kernels/programmatic_launch.cuh"
#include "runtime/cuda_check.h"

namespace kvlm {

namespace {

using namespace gemv_detail;
using namespace attention_detail;

constexpr int kPersistentThreads = kAttnThreads;  // attention's block size; the GEMV stages take 4 warps a block
// The kernel's static shared arrays (declared at the top of decode_persistent_kernel, the grouped variant's
// sizes): what the device's per-block limit leaves for the staged input is the limit less these.
constexpr size_t kStaticSharedBytes = sizeof(float) * kMaxWarps + sizeof(AttnShared<kMaxGroupHeads>);

// The first load step of a warp's first row group in a GEMV stage: weights never change, so a warp issues
// these loads before the grid barrier that makes the stage's input ready, and their round trip to L2/DRAM
// runs while it waits (on SmolLM2 most warps have one row group a stage, whose whole rows are one step).
template <int R, bool kSwiglu>
struct FirstStep {
    static constexpr int NR = R * (kSwiglu ? 2 : 1);
    static constexpr int U = 8 / NR;
    uint4 wv[U][NR];
};

template <int U, int NR>
__device__ __forceinline__ void zero_step(uint4 (&wv)[U][NR]) {
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
        for (int k = 0; k < NR; k++) wv[u][k] = make_uint4(0, 0, 0, 0);
}

__device__ __forceinline__ int64_t first_row_group() {
    return int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
}

// Loads the calling warp's FirstStep of the stage p (zeros when it has no row group, or on the scalar path,
// which loads as it goes). Every lane of the warp calls it.
template <typename T, int R, bool kSwiglu>
__device__ __forceinline__ void load_first_step(const GemvParams& p, FirstStep<R, kSwiglu>& first) {
    constexpr int V = 16 / int(sizeof(T));
    const int64_t g = first_row_group();
    if (!p.vec || g >= (int64_t(p.n_rows) + R - 1) / R) {
        zero_step(first.wv);
        return;
    }
    const T* rows[FirstStep<R, kSwiglu>::NR];
    row_pointers<T, R, kSwiglu, 1>(p, g * R, rows);
    load_step(first.wv, rows, 0, p.n_in / V, int(threadIdx.x) % 32, 32);
}

// The rows of a GEMV stage over x_hat staged in x_shared (scale: its rms, when p.norm_weight is set): warp w
// of the grid takes row groups w, w + warps, ... of R rows, as gemv_kernel's warps take theirs (unsplit).
// step holds the first group's first load step (load_first_step); each group loads the next one's into it
// before its epilogue, or zeros it (the last group, the scalar path), so that no value of step lives
// through an epilogue (ptxas then keeps the kernel at 210 / 236 registers without spills).
template <typename T, int R, bool kSwiglu>
__device__ __forceinline__ void stage_rows(const GemvParams& p, const float* x_shared, const float (&scale)[1],
                                           FirstStep<R, kSwiglu>& step) {
    constexpr int NR = FirstStep<R, kSwiglu>::NR;
    constexpr int U = FirstStep<R, kSwiglu>::U;
    constexpr int V = 16 / int(sizeof(T));
    const int lane = int(threadIdx.x) % 32;
    const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
    const int64_t n_groups = (int64_t(p.n_rows) + R - 1) / R;
    for (int64_t g = first_row_group(); g < n_groups; g += warps) {
        const int64_t first = g * R;
        const T* rows[NR];
        row_pointers<T, R, kSwiglu, 1>(p, first, rows);
        const EarlyReads<R> early = early_reads<R, kSwiglu, 1>(p, first, lane);
        float acc[1][NR];
        accumulate_rows<T, U, NR, 1, true>(p, rows, step.wv, lane, 32, x_shared, scale, acc);
        if (p.vec && g + warps < n_groups) {
            const T* next[NR];
            row_pointers<T, R, kSwiglu, 1>(p, first + warps * R, next);
            load_step(step.wv, next, 0, p.n_in / V, lane, 32);
        } else {
            zero_step(step.wv);
        }
        finish_rows<R, kSwiglu>(p, first, acc, lane, early);
    }
}

// One GEMV stage over the whole grid: each block stages x_hat (p.x normalised when p.norm_weight is set) in
// shared memory, then its warps take their rows. Every thread of every block must call it.
template <typename T, int R, bool kSwiglu>
__device__ __forceinline__ void gemv_stage(const GemvParams& p, float* x_shared, float* warp_sums,
                                           FirstStep<R, kSwiglu>& step) {
    float scale[1];
    stage_input<true, 1>(p, x_shared, warp_sums, scale);
    stage_rows<T, R, kSwiglu>(p, x_shared, scale, step);
}

// A stage whose weights take at most this many bytes is prefetched into L2 whole while the stage before it
// runs; a larger one (the 1B's FFN) only each warp's first row group, so that prefetches do not evict what
// the current stage still reads (H100/H200 L2: 50 MB).
constexpr int64_t kPrefetchStageBytes = 16 << 20;

__device__ __forceinline__ void prefetch_l2(const void* p) {
#if defined(KVLM_CUDA_EMU) || defined(__CUDA_ARCH__)
    asm volatile("prefetch.global.L2 [%0];" : : "l"(p));
#endif
}

// Asks L2 for the weight rows the calling warp will take in gemv_stage over p (all of them when the stage
// is small, see kPrefetchStageBytes), a 128-byte line per lane at a time. No data moves into registers, so
// it costs a few instructions and no barrier: the weights never change, so they may be fetched before the
// barrier that makes the stage's input ready. Every lane of the warp calls it.
template <typename T, int R, bool kSwiglu>
__device__ __forceinline__ void prefetch_stage(const GemvParams& p) {
    constexpr int NR = R * (kSwiglu ? 2 : 1);
    const int lane = int(threadIdx.x) % 32;
    const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
    const int64_t n_groups = (int64_t(p.n_rows) + R - 1) / R;
    const int64_t row_bytes = int64_t(p.n_in) * int64_t(sizeof(T)), lines = (row_bytes + 127) / 128;
    const bool whole = int64_t(p.n_rows) * row_bytes * (kSwiglu ? 2 : 1) <= kPrefetchStageBytes;
    const int64_t first_group = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
    for (int64_t g = first_group; g < n_groups; g += warps) {
        const T* rows[NR];
        row_pointers<T, R, kSwiglu, 1>(p, g * R, rows);
#pragma unroll
        for (int k = 0; k < NR; k++)
            for (int64_t line = lane; line <= lines; line += 32)  // one more: a row need not start a line
                prefetch_l2(reinterpret_cast<const char*>(rows[k]) +
                            (line * 128 < row_bytes ? line * 128 : row_bytes - 1));
        if (!whole) break;
    }
}

__device__ __forceinline__ GemvParams stage_params(const float* x, int32_t n_in, const float* norm_weight,
                                                   float norm_eps, bool accumulate, bool vec) {
    GemvParams p{};
    for (int i = 0; i < kMaxOutputs; i++) p.row_end[i] = INT32_MAX;
    p.x = x, p.n_in = n_in, p.norm_weight = norm_weight, p.norm_eps = norm_eps, p.accumulate = accumulate;
    p.n_tokens = 1, p.splits = 1, p.vec = vec;
    return p;
}

// MinBlocks: 0 (no minimum) lets ptxas take the registers it wants (210 one head, 236 grouped: 2 blocks per
// SM; a minimum of 1 or 2 makes it take 234-239); the kDenseBlocks build caps them at 168 so that 3 blocks
// fit (12 bytes of spills one head, ~1.9 KB grouped), for the sweep to say whether 12 warps per SM beat 8.
constexpr int kDenseBlocks = 3;

template <typename T, typename KvT, int MaxHeads, int MinBlocks>
__global__ void __launch_bounds__(kPersistentThreads, MinBlocks)
    decode_persistent_kernel(const PersistentDecodeArgs a, const AttnGeometry geo) {
    extern __shared__ float4 x_shared4[];  // [max n_in]
    float* x_shared = reinterpret_cast<float*>(x_shared4);
    __shared__ float warp_sums[kMaxWarps];
    __shared__ AttnShared<MaxHeads> attn_shared;
    auto* barrier = static_cast<GridBarrierState*>(a.barrier);
    wait_for_prior_kernel();  // the token may be the prior step's pick
    const int32_t dim = a.dim, head_dim = a.layout.head_dim;
    const int32_t q_dim = a.n_heads * head_dim, kv_dim = a.layout.n_kv_heads * head_dim;

    {  // embed_kernel's lookup
        const T* row = static_cast<const T*>(a.token_embd) + int64_t(a.tokens[0]) * dim;
        for (int32_t i = int32_t(blockIdx.x * blockDim.x + threadIdx.x); i < dim; i += int32_t(gridDim.x * blockDim.x))
            a.x[i] = load_f32(row, i);
    }
    const int32_t n_attn_blocks = a.n_splits * a.layout.n_kv_heads * geo.head_chunks;
    // Each GEMV stage's parameters, for its run and for the prefetch one stage (two for the O projection)
    // ahead of it.
    const auto qkv_params = [&](int32_t layer) {  // Q/K/V, RoPE and the pool write (gemv_kernel's rope pairs)
        const PersistentLayerWeights& w = a.layers[layer];
        GemvParams p = stage_params(a.x, dim, w.attn_norm, a.norm_eps, false, a.vec_dim);
        const void* weights[3] = {w.q, w.k, w.v};
        const float* bias[3] = {w.q_bias, w.k_bias, w.v_bias};
        const int32_t ends[3] = {q_dim, q_dim + kv_dim, q_dim + 2 * kv_dim};
        const int32_t n_out[3] = {q_dim, kv_dim, kv_dim};
        for (int i = 0; i < 3; i++)  // k and v go to the pool only
            p.weight[i] = weights[i], p.out[i] = a.q, p.bias[i] = bias[i], p.row_end[i] = ends[i],
            p.out_stride[i] = n_out[i];
        p.n_rows = ends[2];
        p.rope_kv = true;
        p.rope = GemvRopeKv{a.kv, a.layout, layer, a.block_table, a.positions, a.inv_freq};
        return p;
    };
    const auto o_params = [&](int32_t layer) {  // x += W_o att
        GemvParams p = stage_params(a.att, q_dim, nullptr, 0.0f, true, a.vec_q);
        p.weight[0] = a.layers[layer].o, p.out[0] = a.x, p.row_end[0] = dim, p.out_stride[0] = dim, p.n_rows = dim;
        return p;
    };
    const auto ffn_params = [&](int32_t layer) {  // silu(gate) * up
        const PersistentLayerWeights& w = a.layers[layer];
        GemvParams p = stage_params(a.x, dim, w.ffn_norm, a.norm_eps, false, a.vec_dim);
        p.weight[0] = w.gate, p.weight[1] = w.up, p.out[0] = a.ffn, p.row_end[0] = a.n_ff;
        p.out_stride[0] = a.n_ff, p.n_rows = a.n_ff;
        return p;
    };
    const auto down_params = [&](int32_t layer) {  // x += W_down ffn
        GemvParams p = stage_params(a.ffn, a.n_ff, nullptr, 0.0f, true, a.vec_ff);
        p.weight[0] = a.layers[layer].down, p.out[0] = a.x, p.row_end[0] = dim, p.out_stride[0] = dim, p.n_rows = dim;
        return p;
    };
    GemvParams head_params = stage_params(nullptr, dim, nullptr, 0.0f, false, a.vec_dim);  // x_hat staged below
    head_params.weight[0] = a.output, head_params.out[0] = a.logits, head_params.row_end[0] = a.n_vocab;
    head_params.out_stride[0] = a.n_vocab, head_params.n_rows = a.n_vocab;
    // Before each barrier: the L2 prefetch one GEMV stage further on, then the next GEMV stage's first weight
    // loads (load_first_step), so that those are the only values a warp holds while it waits.
    prefetch_stage<T, 2, false>(qkv_params(0));
    for (int32_t layer = 0; layer < a.n_layers; layer++) {
        prefetch_stage<T, 1, false>(o_params(layer));
        FirstStep<2, false> qkv_first;
        load_first_step<T>(qkv_params(layer), qkv_first);
        grid_barrier(barrier);  // x is complete
        gemv_stage<T, 2, false>(qkv_params(layer), x_shared, warp_sums, qkv_first);
        prefetch_stage<T, 1, true>(ffn_params(layer));
        grid_barrier(barrier);
        for (int32_t b = int32_t(blockIdx.x); b < n_attn_blocks; b += int32_t(gridDim.x))
            attention_block<KvT, true, MaxHeads>(attn_shared, b % a.n_splits, b / a.n_splits, 0, a.n_splits, a.att,
                                                 a.partials, a.q, static_cast<const KvT*>(a.kv), a.layout, layer,
                                                 a.block_table, a.positions, a.n_heads, geo, 0, a.attn_scale, nullptr);
        if (a.n_splits > 1) {
            grid_barrier(barrier);
            for (int32_t h = int32_t(blockIdx.x); h < a.n_heads; h += int32_t(gridDim.x))
                combine_head(a.att, a.partials, a.n_heads, head_dim, a.n_splits, h, 0);
        }
        prefetch_stage<T, 1, false>(down_params(layer));
        FirstStep<1, false> o_first;
        load_first_step<T>(o_params(layer), o_first);
        grid_barrier(barrier);
        gemv_stage<T, 1, false>(o_params(layer), x_shared, warp_sums, o_first);
        if (layer + 1 < a.n_layers) prefetch_stage<T, 2, false>(qkv_params(layer + 1));
        FirstStep<1, true> ffn_first;
        load_first_step<T>(ffn_params(layer), ffn_first);
        grid_barrier(barrier);
        gemv_stage<T, 1, true>(ffn_params(layer), x_shared, warp_sums, ffn_first);
        if (layer + 1 == a.n_layers) prefetch_stage<T, 1, false>(head_params);
        FirstStep<1, false> down_first;
        load_first_step<T>(down_params(layer), down_first);
        grid_barrier(barrier);
        gemv_stage<T, 1, false>(down_params(layer), x_shared, warp_sums, down_first);
    }
    FirstStep<1, false> head_first;
    load_first_step<T>(head_params, head_first);
    grid_barrier(barrier);
    {  // the head: rmsnorm_kernel's arithmetic (scalar sum of squares over 256 virtual threads), then its GEMV
        const float scale[1] = {block_rms_scale(a.x, dim, a.norm_eps, false, warp_sums)};
        for (int32_t i = int32_t(threadIdx.x); i < dim; i += int32_t(blockDim.x))
            x_shared[i] = a.output_norm[i] * (a.x[i] * scale[0]);
        __syncthreads();
        stage_rows<T, 1, false>(head_params, x_shared, scale, head_first);
    }
    allow_next_kernel();  // the head's kernels may be launched; they wait for this grid to finish
}

template <typename T, typename KvT, int MinBlocks>
void launch_variant(const PersistentDecodeArgs& a, const AttnPlan& plan, unsigned blocks, size_t smem,
                    cudaStream_t stream) {
    if (plan.geo.heads_per_block == 1)
        launch_cooperative_kernel("decode_persistent_kernel", decode_persistent_kernel<T, KvT, 1, MinBlocks>, blocks,
                                  kPersistentThreads, smem, stream, a, plan.geo);
    else
        launch_cooperative_kernel("decode_persistent_kernel",
                                  decode_persistent_kernel<T, KvT, kMaxGroupHeads, MinBlocks>, blocks,
                                  kPersistentThreads, smem, stream, a, plan.geo);
}

// The dense build runs grids of more than 2 blocks per SM (persistent_decode_blocks sizes them so).
template <typename T, typename KvT>
void launch_typed(const PersistentDecodeArgs& a, const AttnPlan& plan, unsigned blocks, unsigned n_sms, size_t smem,
                  cudaStream_t stream) {
    if (blocks > 2 * n_sms)
        launch_variant<T, KvT, kDenseBlocks>(a, plan, blocks, smem, stream);
    else
        launch_variant<T, KvT, 0>(a, plan, blocks, smem, stream);
}

// Lets the kernels of both builds take smem bytes of dynamic shared memory; returns the blocks per
// multiprocessor a grid may have for blocks_per_sm asked: the dense build's when more than 2 are asked and
// it fits more than 2, else the default build's (the fewer of its one-head and grouped kernels').
template <typename T, typename KvT>
int configure(size_t smem, int32_t blocks_per_sm) {
    const auto fewest = [&](auto one_head, auto grouped) {
        int fewest_blocks = 1 << 30;
        for (auto kernel : {one_head, grouped}) {
            int blocks = 0;
            CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
            CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kPersistentThreads, smem));
            fewest_blocks = std::min(fewest_blocks, blocks);
        }
        return fewest_blocks;
    };
    const int dense = fewest(decode_persistent_kernel<T, KvT, 1, kDenseBlocks>,
                             decode_persistent_kernel<T, KvT, kMaxGroupHeads, kDenseBlocks>);
    const int plain =
        fewest(decode_persistent_kernel<T, KvT, 1, 0>, decode_persistent_kernel<T, KvT, kMaxGroupHeads, 0>);
    return std::min(blocks_per_sm, blocks_per_sm > 2 && dense > 2 ? dense : plain);
}

size_t shared_bytes(const PersistentDecodeArgs& a) {
    return size_t(std::max({a.dim, a.n_heads * a.layout.head_dim, a.n_ff})) * sizeof(float);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

std::string persistent_decode_unsupported(DType weights, DType embedding, DType head, const KvLayout& layout,
                                          int32_t dim, int32_t q_dim, int32_t n_ff, bool gemv_rules_default,
                                          size_t shared_per_block) {
    if (weights != DType::f16 && weights != DType::bf16) return "weights are not f16 or bf16";
    if (embedding != weights) return "the embedding table's dtype is not the layers'";
    if (head != weights) return "the output head's dtype is not the layers'";
    if (layout.dtype != DType::f16 && layout.dtype != DType::bf16) return "the KV pool is not f16 or bf16";
    if (layout.head_dim % 8 != 0 || layout.head_dim < 2) return "head_dim is not a multiple of 8";
    const int32_t largest = std::max({dim, q_dim, n_ff});
    if (size_t(largest) * sizeof(float) + kStaticSharedBytes > shared_per_block)
        return "its largest input (" + std::to_string(largest) + " values) needs " +
               std::to_string((size_t(largest) * sizeof(float) + kStaticSharedBytes + 1023) / 1024) +
               " KB of shared memory a block; the device allows " + std::to_string(shared_per_block / 1024) + " KB";
    if (!gemv_rules_default) return "GEMV launch rules are set (the persistent kernel runs the default shape)";
    return "";
}

int32_t persistent_decode_blocks(const PersistentDecodeArgs& a, DType weights, int32_t n_sms, int32_t blocks_per_sm) {
    const size_t smem = shared_bytes(a);
    const bool bf16_kv = a.layout.dtype == DType::bf16;
    int per_sm = 0;
    if (weights == DType::bf16)
        per_sm = bf16_kv ? configure<__nv_bfloat16, __nv_bfloat16>(smem, blocks_per_sm)
                         : configure<__nv_bfloat16, __half>(smem, blocks_per_sm);
    else
        per_sm = bf16_kv ? configure<__half, __nv_bfloat16>(smem, blocks_per_sm)
                         : configure<__half, __half>(smem, blocks_per_sm);
    if (per_sm < 1) cuda_throw("persistent decode: the kernel does not fit a multiprocessor");
    return n_sms * per_sm;
}

void launch_decode_persistent(PersistentDecodeArgs a, DType weights, int32_t blocks, int32_t n_sms,
                              int32_t one_head_rule, cudaStream_t stream) {
    if (!a.layers || !a.token_embd || !a.output_norm || !a.output || !a.logits || !a.x || !a.q || !a.att || !a.ffn ||
        !a.kv || !a.tokens || !a.positions || !a.block_table || !a.inv_freq || !a.barrier)
        cuda_throw("launch_decode_persistent: a null pointer");
    if (a.n_splits > 1 && !a.partials) cuda_throw("launch_decode_persistent: splits without partials");
    if (blocks < 1) cuda_throw("launch_decode_persistent: no blocks");
    a.vec_dim = int64_t(a.dim) * int64_t(dtype_size(weights)) % 16 == 0;
    a.vec_q = int64_t(a.n_heads) * a.layout.head_dim * int64_t(dtype_size(weights)) % 16 == 0;
    a.vec_ff = int64_t(a.n_ff) * int64_t(dtype_size(weights)) % 16 == 0;
    const size_t smem = shared_bytes(a);
    const bool bf16_kv = a.layout.dtype == DType::bf16;
    a.attn_scale = 1.0f / std::sqrt(float(a.layout.head_dim));
    const auto plan_for = [&](auto* kv) {
        const AttnPlan plan = attention_plan(a.layout, kv, 1, a.n_heads, a.n_splits, n_sms, one_head_rule);
        if (!plan.vec) cuda_throw("launch_decode_persistent: the pool's rows are not 16-byte units");
        return plan;
    };
    if (!aligned16(a.kv)) cuda_throw("launch_decode_persistent: the pool is not 16-byte aligned");
    if (weights == DType::bf16) {
        if (bf16_kv)
            launch_typed<__nv_bfloat16, __nv_bfloat16>(a, plan_for(static_cast<const __nv_bfloat16*>(a.kv)), blocks,
                                                       n_sms, smem, stream);
        else
            launch_typed<__nv_bfloat16, __half>(a, plan_for(static_cast<const __half*>(a.kv)), blocks, n_sms, smem,
                                                stream);
    } else if (weights == DType::f16) {
        if (bf16_kv)
            launch_typed<__half, __nv_bfloat16>(a, plan_for(static_cast<const __nv_bfloat16*>(a.kv)), blocks, n_sms,
                                                smem, stream);
        else
            launch_typed<__half, __half>(a, plan_for(static_cast<const __half*>(a.kv)), blocks, n_sms, smem, stream);
    } else {
        cuda_throw("launch_decode_persistent: weights must be f16 or bf16");
    }
}

}  // namespace kvlm
