// What the decode GEMVs of gemv.cu (f32/f16/bf16 weights) and gemv_quantized.cu (quantized types) share: the
// launch parameters, the in-kernel rms scale, the row bookkeeping, the epilogue and the launch shape, so both
// kernel families reduce, write and size their launches identically. Device helpers only (no __shared__
// declarations and no launches: the emulator's prep.py rewrites those in .cu files).
#pragma once
#include <climits>
#include <cstdint>

#include "kernels/cuda_ops.h"
#include "kernels/kv_cache_cuda.cuh"
#include "kernels/rope_cuda.cuh"

namespace kvlm::gemv_detail {

constexpr int kMaxOutputs = 3;
constexpr int kMaxWarps = 8;  // blocks of 128 or 256 threads
// Tokens one launch of the multi-token kernels takes (launch_gemv_tokens runs more in groups of this many):
// each weight chunk a warp loads serves all of them.
constexpr int kGemvTokens = 8;
// x_hat is staged in shared memory when it fits the default 48 KB (less a margin for the static arrays);
// larger inputs (Llama's FFN down, n_in 14336) read x from global memory, where it stays L1/L2-resident.
constexpr int32_t kMaxSharedIn = (48 * 1024 - 1024) / 4;
// Split rows (LaunchShape::splits): the partial sums a warp hands to its row group's first warp, at most
// kGemvTokens tokens x 2 rows (SwiGLU's gate and up) or 1 token x 4 rows.
constexpr int kMaxPartials = 2 * kGemvTokens;
// Bytes a warp loads per step (32 lanes x 8 loads of 16 bytes): a split keeps at least one per warp.
constexpr int64_t kStepBytes = 32 * 8 * 16;
// Launch-shape targets for an H100/H200 (132 SMs): several rows per warp only while >= 4 blocks of 256
// threads per SM remain; 128-thread blocks when 256-thread ones would leave fewer than 2 blocks per SM.
constexpr int64_t kSms = 132;
constexpr int64_t kFillBlocks = 4 * kSms;

// The decode step's Q/K/V GEMV (one token) can finish the way rope_kv_write.cu does: RoPE on the q and k rows
// and the K and V rows stored into the pool, so the step needs no rope_kv_write launch. Its warps then take
// rows in pairs, (i, i + head_dim / 2) of one head, and lane 0 rotates the pair with rope_cuda.cuh's
// arithmetic and stores it with kv_write's: the same bits as the GEMV, then rope_kv_write. Only q is written
// to its output (k's f32 row is not needed once it is in the pool); f32, f16 and bf16 pools (a q8_0 block
// needs 32 rotated values, which no warp holds).
struct GemvRopeKv {
    void* kv;                    // the pool
    KvLayout layout;
    int32_t layer;
    const int32_t* block_table;  // [>= position / block_size + 1]
    const int32_t* position;     // [1]
    const float* inv_freq;       // [head_dim / 2]
};

// One launch's work: the flattened row space [0, n_rows) is split over the outputs, output o owning rows
// [row_end[o - 1], row_end[o]) (row_end[-1] = 0; unused entries INT32_MAX). For SwiGLU, weight[0] is the
// gate and weight[1] the up matrix of the single output. n_tokens inputs (1 for the decode step, up to
// kGemvTokens): token t's x starts at x + t * n_in and its result for output o at out[o] + t * out_stride[o].
struct GemvParams {
    const void* weight[kMaxOutputs];  // [n_out_o, n_in] in the launch's dtype
    float* out[kMaxOutputs];          // [n_tokens, out_stride_o]
    const float* bias[kMaxOutputs];   // [n_out_o] or null
    int32_t row_end[kMaxOutputs];
    int32_t out_stride[kMaxOutputs];  // n_out_o for dense outputs
    int32_t n_rows;
    int32_t n_tokens;
    const float* x;            // [n_tokens, n_in]
    const float* norm_weight;  // [n_in] or null
    float norm_eps;
    int32_t n_in;
    bool accumulate;
    bool vec;  // 16-byte loads: n_in * sizeof(T) % 16 == 0 and weights (and x, norm_weight if read from global) aligned
    int32_t splits;  // warps per row group (LaunchShape::splits; set by the launcher)
    bool rope_kv;  // outputs q, k, v of one token finished as GemvRopeKv says (kernels with R = 2, NT = 1)
    GemvRopeKv rope;
};

// Kernels whose warps can take the rope pairs.
template <int R, bool kSwiglu, int NT>
constexpr bool kRopePairs = R == 2 && !kSwiglu && NT == 1;

// 1 / rms(x) as rmsnorm_cpu computes it: 1 / sqrt(sum(x^2) / n + eps). Every thread of the block must call
// it (it synchronizes). The sum is taken as a block of kMaxWarps warps would take it whatever blockDim (a
// 128-thread block's threads each sum two virtual threads' shares), so every launch shape and the persistent
// decode kernel get the same bits. x and norm_weight as float4 when both allow it (n a multiple of 4, 16-byte
// aligned): the prologue's loads are dependent round trips to L2, and this makes a quarter as many per thread.
__device__ __forceinline__ bool float4_input(const float* x, const float* norm_weight, int32_t n) {
    return n % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
           (!norm_weight || reinterpret_cast<uintptr_t>(norm_weight) % 16 == 0);
}

// blockDim.x must divide kMaxWarps * 32.
__device__ inline float block_rms_scale(const float* x, int32_t n, float eps, bool vec4,
                                        float* warp_sums /* [kMaxWarps] */) {
    constexpr int kVirtualThreads = kMaxWarps * 32;
    for (int v0 = 0; v0 < kVirtualThreads; v0 += int(blockDim.x)) {
        const int vt = v0 + int(threadIdx.x);
        float sum = 0.0f;
        if (vec4) {
            for (int32_t i = vt; i < n / 4; i += kVirtualThreads) {
                const float4 v = reinterpret_cast<const float4*>(x)[i];  // coherent: a prior kernel wrote x
                sum = fmaf(v.x, v.x, sum), sum = fmaf(v.y, v.y, sum), sum = fmaf(v.z, v.z, sum),
                sum = fmaf(v.w, v.w, sum);
            }
        } else {
            for (int32_t i = vt; i < n; i += kVirtualThreads) sum = fmaf(x[i], x[i], sum);
        }
        for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
        if (vt % 32 == 0) warp_sums[vt / 32] = sum;
    }
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < kMaxWarps; w++) total += warp_sums[w];
    return 1.0f / sqrtf(total / float(n) + eps);
}

// The input of the block's rows for its NT (>= p.n_tokens) token slots: scale[t] = 1 / rms(x of token t) when
// p.norm_weight is set (else 1), and, when kShared, each token's x (times norm_weight * scale) staged in
// x_shared[t * n_in ..]. Every token gets the arithmetic of a one-token launch. Every thread of the block must
// call it (it synchronizes).
template <bool kShared, int NT>
__device__ __forceinline__ void stage_input(const GemvParams& p, float* x_shared, float* warp_sums /* [kMaxWarps] */,
                                            float (&scale)[NT]) {
    const float* __restrict__ norm_weight = p.norm_weight;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        scale[t] = 1.0f;
        if (NT > 1 && t >= p.n_tokens) continue;  // uniform over the block
        const float* x = p.x + int64_t(t) * p.n_in;  // coherent loads: a prior kernel wrote it
        float* xs = x_shared + int64_t(t) * p.n_in;
        const bool vec4 = float4_input(x, norm_weight, p.n_in);
        if (norm_weight) {
            if (t > 0) __syncthreads();  // every thread has read the previous token's warp_sums
            scale[t] = block_rms_scale(x, p.n_in, p.norm_eps, vec4, warp_sums);
        }
        if (kShared) {
            if (vec4) {
                float4* xs4 = reinterpret_cast<float4*>(xs);
                for (int32_t i = threadIdx.x; i < p.n_in / 4; i += blockDim.x) {
                    float4 v = reinterpret_cast<const float4*>(x)[i];
                    if (norm_weight) {
                        const float s = scale[t];
                        const float4 g = __ldg(reinterpret_cast<const float4*>(norm_weight) + i);
                        v.x = g.x * (v.x * s), v.y = g.y * (v.y * s), v.z = g.z * (v.z * s), v.w = g.w * (v.w * s);
                    }
                    xs4[i] = v;
                }
            } else {
                for (int32_t i = threadIdx.x; i < p.n_in; i += blockDim.x)
                    xs[i] = norm_weight ? norm_weight[i] * (x[i] * scale[t]) : x[i];
            }
        }
    }
    if (kShared) __syncthreads();
}

// Output o and row within it of flattened row `row` (< n_rows).
__device__ __forceinline__ int locate(const GemvParams& p, int32_t row, int32_t* local) {
    const int o = int(row >= p.row_end[0]) + int(row >= p.row_end[1]);
    *local = row - (o == 0 ? 0 : o == 1 ? p.row_end[0] : p.row_end[1]);
    return o;
}

// The flattened row of the warp's r-th row: first + r, or with rope pairs row i + r * head_dim / 2 of head g,
// where first / 2 = g * head_dim / 2 + i (first = 2 * warp). Past n_rows when the warp has no rows.
template <int R, bool kSwiglu, int NT>
__device__ __forceinline__ int64_t warp_row(const GemvParams& p, int64_t first, int r) {
    if constexpr (kRopePairs<R, kSwiglu, NT>) {
        if (p.rope_kv) {
            const int64_t half = p.rope.layout.head_dim / 2, pair = first / 2;
            return pair / half * 2 * half + pair % half + r * half;
        }
    }
    return first + r;
}

// Weight matrix and row within it of flattened row `row` (clamped to the last row, so that warps past the
// end still load valid memory) for matrix m (SwiGLU: 0 gate, 1 up; else the row's own output).
template <bool kSwiglu>
__device__ __forceinline__ const void* row_matrix(const GemvParams& p, int64_t wanted, int m, int32_t* local) {
    const int64_t last = int64_t(p.n_rows) - 1;
    const int32_t row = int32_t(wanted < last ? wanted : last);
    const int o = locate(p, row, local);
    return kSwiglu ? p.weight[m] : o == 0 ? p.weight[0] : o == 1 ? p.weight[1] : p.weight[2];
}

// Where a warp's rope pair goes, read right after the dependency wait (the position, then its block-table
// entry; the pair's frequency and bias): those loads then overlap the product instead of following it.
struct RopeKvSlot {
    int o = 0;          // 0 q, 1 k, 2 v
    int32_t local = 0;  // the pair's first row within its output (i of head local / head_dim)
    int32_t pos = 0;
    float inv_freq = 0.0f;
    bool has_bias = false;
    float bias0 = 0.0f, bias1 = 0.0f;
    int64_t offset = 0;  // k, v: the head's row in the pool
};

template <int R, bool kSwiglu, int NT>
__device__ __forceinline__ RopeKvSlot rope_kv_slot(const GemvParams& p, int64_t first) {  // lane 0's
    RopeKvSlot s;
    if constexpr (kRopePairs<R, kSwiglu, NT>) {
        if (!p.rope_kv || first >= p.n_rows) return s;
        const GemvRopeKv& rk = p.rope;
        s.o = locate(p, int32_t(warp_row<R, kSwiglu, NT>(p, first, 0)), &s.local);
        const int32_t head_dim = rk.layout.head_dim, half = head_dim / 2;
        s.pos = *rk.position;
        s.inv_freq = rk.inv_freq[s.local % head_dim];
        const float* bias = s.o == 0 ? p.bias[0] : s.o == 1 ? p.bias[1] : p.bias[2];
        if (bias) s.has_bias = true, s.bias0 = bias[s.local], s.bias1 = bias[s.local + half];
        if (s.o > 0)
            s.offset = pool_row(rk.layout, rk.layer, s.o - 1, rk.block_table, s.pos) +
                       int64_t(s.local / head_dim) * head_dim;
    }
    return s;
}

// What the epilogue of a one-token launch reads from memory, read by lane 0 right after the dependency wait:
// the rope pair's slot, or the residual (out before the add) of the warp's rows when accumulating (the O and
// down projections). The same values it would read at the end - no other thread writes them - so the same
// bits, with the round trips overlapping the product.
template <int R>
struct EarlyReads {
    RopeKvSlot rope;
    float prior[R] = {};
};

template <int R, bool kSwiglu, int NT>
__device__ __forceinline__ EarlyReads<R> early_reads(const GemvParams& p, int64_t first, int lane) {
    EarlyReads<R> e;
    if (NT != 1 || kSwiglu || lane != 0) return e;
    e.rope = rope_kv_slot<R, kSwiglu, NT>(p, first);
    if (p.accumulate) {
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (first + r >= p.n_rows) break;
            int32_t local;
            const int o = locate(p, int32_t(first + r), &local);
            e.prior[r] = (o == 0 ? p.out[0] : o == 1 ? p.out[1] : p.out[2])[local];
        }
    }
    return e;
}

// GemvRopeKv's end of a pair: v0 and v1 are the dot products of the slot's rows i and i + head_dim / 2.
__device__ __forceinline__ void finish_rope_pair(const GemvParams& p, const RopeKvSlot& slot, float v0, float v1) {
    const GemvRopeKv& rk = p.rope;
    const int32_t head_dim = rk.layout.head_dim, half = head_dim / 2, i = slot.local % head_dim;
    if (slot.has_bias) v0 += slot.bias0, v1 += slot.bias1;
    const float2 r = slot.o < 2 ? rope_rotate(v0, v1, slot.pos, slot.inv_freq) : make_float2(v0, v1);
    if (slot.o == 0) {
        p.out[0][slot.local] = r.x;
        p.out[0][slot.local + half] = r.y;
        return;
    }
    const int64_t offset = slot.offset;
    const auto store = [&](auto* kv) {
        store_f32(kv + offset, i, r.x);
        store_f32(kv + offset, i + half, r.y);
    };
    if (rk.layout.dtype == DType::f32) store(static_cast<float*>(rk.kv));
    else if (rk.layout.dtype == DType::f16) store(static_cast<__half*>(rk.kv));
    else store(static_cast<__nv_bfloat16*>(rk.kv));
}

// Butterfly-sums each lane's partial dot products acc[t][NR]: every lane ends with the warp's totals. Every
// lane of the warp must call it (full-mask shuffles).
template <int NT, int NR>
__device__ __forceinline__ void sum_lanes(float (&acc)[NT][NR]) {
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int k = 0; k < NR; k++)
            for (int offset = 16; offset > 0; offset /= 2) acc[t][k] += __shfl_xor_sync(0xffffffffu, acc[t][k], offset);
}

// The epilogue, lane 0's: from the dot products acc[t][NR] (rows warp_row(.., r), then for SwiGLU the up
// rows, of token t) writes silu(gate) * up, or [out +] dot [+ bias], or finishes a rope pair.
template <int R, bool kSwiglu, int NT, int NR>
__device__ __forceinline__ void write_rows(const GemvParams& p, int64_t first, const float (&acc)[NT][NR],
                                           const EarlyReads<R>& early) {
    if constexpr (kRopePairs<R, kSwiglu, NT>) {
        if (p.rope_kv) {
            if (first < p.n_rows) finish_rope_pair(p, early.rope, acc[0][0], acc[0][1]);
            return;
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
        if (NT > 1 && t >= p.n_tokens) break;
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (first + r >= p.n_rows) break;
            const int32_t row = int32_t(first + r);
            if (kSwiglu) {
                const float g = acc[t][r], u = acc[t][R + r];
                p.out[0][int64_t(t) * p.out_stride[0] + row] = g / (1.0f + expf(-g)) * u;  // silu(gate) * up, as swiglu_kernel
            } else {
                int32_t local;
                const int o = locate(p, row, &local);
                const int32_t stride = o == 0 ? p.out_stride[0] : o == 1 ? p.out_stride[1] : p.out_stride[2];
                float* out = (o == 0 ? p.out[0] : o == 1 ? p.out[1] : p.out[2]) + int64_t(t) * stride;
                const float* bias = o == 0 ? p.bias[0] : o == 1 ? p.bias[1] : p.bias[2];
                float v = acc[t][r];
                if (bias) v += bias[local];
                if (p.accumulate) v = (NT == 1 ? early.prior[r] : out[local]) + v;
                out[local] = v;
            }
        }
    }
}

// Both, for a warp that owns its rows whole. Every lane of the warp must call it.
template <int R, bool kSwiglu, int NT, int NR>
__device__ __forceinline__ void finish_rows(const GemvParams& p, int64_t first, float (&acc)[NT][NR], int lane,
                                            const EarlyReads<R>& early) {
    sum_lanes(acc);
    if (lane == 0) write_rows<R, kSwiglu>(p, first, acc, early);
}

// Rows per warp, threads per block (see kFillBlocks) and warps per row group: `splits` warps share each
// group's rows, warp s of a group taking lane chunks s * 32 + lane, + 32 * splits, ... (splits 1: a warp owns
// its rows whole).
struct LaunchShape {
    int rows_per_warp;
    int threads;
    int splits = 1;
};
// set_gemv_launch_rules's values (cuda_ops.h; 0: the rule below), read by every launch of the process.
int gemv_rows_per_warp_override();
int gemv_threads_override();
int gemv_split_warps_per_sm();
bool gemv_stage_x();
// n_rows output rows of row_bytes weight bytes each (both matrices' for SwiGLU; 0: the launch cannot split).
// The split depends on n_rows and row_bytes only, never on the rows per warp, so that a matrix's launches
// with RoPE pairs, with several tokens and plain all sum in one order.
inline LaunchShape launch_shape(int64_t n_rows, int64_t row_bytes, bool swiglu) {
    auto blocks = [&](int64_t rows_per_block) { return (n_rows + rows_per_block - 1) / rows_per_block; };
    const int max_r = swiglu ? 2 : 4;  // SwiGLU rows already read two weight rows each
    int r = 1;
    while (r < max_r && blocks(int64_t(2 * r) * kMaxWarps) >= kFillBlocks) r *= 2;
    int threads = r > 1 || blocks(kMaxWarps) >= 2 * kSms ? kMaxWarps * 32 : kMaxWarps * 16;
    int splits = 1;
    const int64_t most_warps = gemv_split_warps_per_sm() * kSms;
    while (splits < 4 && n_rows * (2 * splits) <= most_warps && row_bytes / (2 * splits) >= kStepBytes) splits *= 2;
    if (splits > 1) threads = kMaxWarps * 32;  // several row groups per block
    if (const int forced = gemv_rows_per_warp_override()) r = std::min(forced, max_r);
    if (const int forced = gemv_threads_override()) threads = forced;
    return {r, threads, splits};
}

// GemvRopeKv's pairs: two rows per warp, and the block size and split of the plain launch
// (launch_shape(n_rows, row_bytes, false)), whose rms reduction order - hence x_hat - and summation order it
// must share.
inline LaunchShape launch_shape_for(const GemvParams& p, int64_t row_bytes, bool swiglu) {
    if (p.rope_kv) {
        const LaunchShape plain = launch_shape(p.n_rows, row_bytes, false);
        return {2, plain.threads, plain.splits};
    }
    return launch_shape(p.n_rows, row_bytes, swiglu);
}

inline unsigned launch_blocks(int64_t n_rows, const LaunchShape& shape) {
    const int64_t rows_per_block = int64_t(shape.rows_per_warp) * (shape.threads / 32 / shape.splits);
    return unsigned((n_rows + rows_per_block - 1) / rows_per_block);
}

// gemv_quantized.cu: launches p (weight/out/bias/row_end/n_rows/x/norm set) for quantized weights. Throws when
// n_in is not a whole number of blocks or a matrix is not as aligned as its type's blocks (QuantBlock::kAlign).
void launch_gemv_quantized(const GemvParams& p, DType dtype, int n_weights, bool swiglu, cudaStream_t stream);

}  // namespace kvlm::gemv_detail
