// Decode GEMVs: out = W x_hat for a single token. Memory-bound, so each weight byte is read exactly once
// (16-byte streaming loads when rows are 16-byte aligned) and accumulated in f32; nothing allocates or syncs,
// so launches can be captured in CUDA graphs. Deterministic: fixed summation orders, no atomics; a row's dot
// product does not depend on the rows per warp. Quantized weights go to gemv_quantized.cu from the launchers here.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <string>

#include "kernels/cuda_ops.h"
#include "kernels/dtype_cuda.cuh"
#include "kernels/gemv_rows.cuh"
#include "kernels/gemv_shared.cuh"
#include "kernels/programmatic_launch.cuh"
#include "runtime/cuda_check.h"

namespace kvlm {

namespace {

using namespace gemv_detail;

// Each row group owns R consecutive flattened rows (clamped to the last row for the loads; only valid rows
// are written) and computes their dot products with x_hat together, so one x_hat chunk serves R rows (2R
// weight rows for SwiGLU: gate then up), and each weight chunk serves the launch's NT token slots (p.n_tokens
// used). A group is p.splits warps (usually 1): group lane l (lane + 32 x the warp's split) owns 16-byte
// chunks l, l + 32 * splits, ... of each row (elements on the scalar path), accumulated in increasing order;
// U chunks per row are in flight per step; then a butterfly reduction per warp and, when split, the group's
// first warp adds its warps' sums in split order. A token's sums depend on the split but not on R or NT, so
// every token gets the bits of a one-token launch. On the vector path the first step's loads are issued
// before x_hat exists (they do not depend on it), so for small, latency-bound matrices the HBM round trip
// overlaps the norm and staging.
// kShared: x_hat staged in dynamic shared memory ([n_tokens, n_in] floats); otherwise x (and norm_weight)
// read from global memory and normalised on the fly, with the same arithmetic.
// kSplit: the launch's groups may be several warps (p.splits); without it a group is one warp, and the code
// that of a kernel without groups.
template <typename T, int R, bool kSwiglu, bool kShared, int NT, bool kSplit>
__global__ void __launch_bounds__(kMaxWarps * 32) gemv_kernel(const GemvParams p) {
    extern __shared__ float4 x_shared4[];  // [n_tokens, n_in] when kShared
    float* x_shared = reinterpret_cast<float*>(x_shared4);
    __shared__ float warp_sums[kMaxWarps];
    __shared__ float split_sums[kSplit ? kMaxWarps * kMaxPartials : 1];  // [warp][t * NR + k] when split
    constexpr int kMats = kSwiglu ? 2 : 1;
    constexpr int NR = R * kMats;           // weight rows this warp reads
    constexpr int U = 8 / NR;               // chunks per row per step: 8 loads in flight per lane
    constexpr int V = 16 / int(sizeof(T));  // elements per 16-byte chunk
    static_assert(NT * NR <= kMaxPartials, "split_sums holds a warp's partial sums");
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int splits = kSplit ? p.splits : 1, split = warp % splits;
    const int group_lane = split * 32 + lane, stride = 32 * splits;
    const int64_t n_chunks = p.n_in / V;
    const int64_t first = (int64_t(blockIdx.x) * (blockDim.x / 32 / splits) + warp / splits) * R;
    const bool has_rows = first < p.n_rows;  // uniform over the group

    const T* rows[NR];
    row_pointers<T, R, kSwiglu, NT>(p, first, rows);
    uint4 wv[U][NR];  // vector path: the current step's chunks (the scalar fallback is not prefetched)
    if (has_rows && p.vec) load_step(wv, rows, 0, n_chunks, group_lane, stride);
    wait_for_prior_kernel();  // the weights above are immutable; x and out are not
    allow_next_kernel();
    const EarlyReads<R> early = early_reads<R, kSwiglu, NT>(p, first, split == 0 ? lane : 1);

    float scale[NT];
    stage_input<kShared>(p, x_shared, warp_sums, scale);
    // No block-wide synchronization below but a split's: unsplit warps without rows may leave.
    if (!has_rows && splits == 1) return;

    float acc[NT][NR];
    if (has_rows)
        accumulate_rows<T, U, NR, NT, kShared>(p, rows, wv, group_lane, stride, x_shared, scale, acc);
    else
        zero_rows(acc);

    // Every lane of the warp gets here (the loops above only predicate), as the full-mask shuffles need.
    sum_lanes(acc);
    if (kSplit && splits > 1) {
        if (lane == 0)
#pragma unroll
            for (int t = 0; t < NT; t++)
#pragma unroll
                for (int k = 0; k < NR; k++) split_sums[warp * kMaxPartials + t * NR + k] = acc[t][k];
        __syncthreads();  // every warp of the block gets here: none has left
        if (split != 0 || !has_rows) return;
#pragma unroll
        for (int t = 0; t < NT; t++)
#pragma unroll
            for (int k = 0; k < NR; k++)
                for (int s = 1; s < splits; s++) acc[t][k] += split_sums[(warp + s) * kMaxPartials + t * NR + k];
    }
    if (lane == 0) write_rows<R, kSwiglu>(p, first, acc, early);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// One token: R rows per warp as the shape says. Several (p.n_tokens <= kGemvTokens): one row per warp, the
// one-token launch's block size (its rms reduction order depends on it). Split rows (kSplit): one row per
// group, or a RoPE pair.
template <typename T, bool kSwiglu, bool kShared, bool kSplit>
void launch_with(GemvParams p, const LaunchShape& shape, size_t shared_bytes, cudaStream_t stream) {
    void (*kernel)(GemvParams) = gemv_kernel<T, 1, kSwiglu, kShared, 1, kSplit>;
    LaunchShape used = shape;
    p.splits = shape.splits;
    if (p.n_tokens > 1) {
        kernel = gemv_kernel<T, 1, kSwiglu, kShared, kGemvTokens, kSplit>;
        used.rows_per_warp = 1;
    } else if constexpr (kSplit) {
        used.rows_per_warp = 1;
        if constexpr (!kSwiglu) {
            if (p.rope_kv) {
                kernel = gemv_kernel<T, 2, false, kShared, 1, true>;
                used.rows_per_warp = 2;
            }
        }
    } else if (shape.rows_per_warp == 2) {
        kernel = gemv_kernel<T, 2, kSwiglu, kShared, 1, false>;
    } else if constexpr (!kSwiglu) {
        if (shape.rows_per_warp == 4) kernel = gemv_kernel<T, 4, kSwiglu, kShared, 1, false>;
    }
    launch_kernel("gemv_kernel", kernel, launch_blocks(p.n_rows, used), used.threads, shared_bytes, stream, p);
}

template <typename T, bool kSwiglu, bool kShared>
void launch_shaped(const GemvParams& p, const LaunchShape& shape, size_t shared_bytes, cudaStream_t stream) {
    if (shape.splits > 1)
        launch_with<T, kSwiglu, kShared, true>(p, shape, shared_bytes, stream);
    else
        launch_with<T, kSwiglu, kShared, false>(p, shape, shared_bytes, stream);
}

// Fills in vec and the shape from the rest of p, and launches. p's weights, outputs, rows and tokens are set.
template <typename T>
void launch_gemv_typed(GemvParams p, int n_weights, bool swiglu, cudaStream_t stream) {
    const bool shared = gemv_stage_x() && int64_t(p.n_tokens) * p.n_in <= kMaxSharedIn;
    bool vec = int64_t(p.n_in) * int64_t(sizeof(T)) % 16 == 0;
    for (int i = 0; i < n_weights; i++) vec = vec && aligned16(p.weight[i]);
    if (!shared) vec = vec && aligned16(p.x) && (p.norm_weight == nullptr || aligned16(p.norm_weight));
    p.vec = vec;
    const LaunchShape shape = launch_shape_for(p, int64_t(p.n_in) * int64_t(sizeof(T)) * (swiglu ? 2 : 1), swiglu);
    const size_t shared_bytes = shared ? size_t(p.n_tokens) * size_t(p.n_in) * sizeof(float) : 0;
    if (swiglu) {
        if (shared)
            launch_shaped<T, true, true>(p, shape, shared_bytes, stream);
        else
            launch_shaped<T, true, false>(p, shape, shared_bytes, stream);
    } else {
        if (shared)
            launch_shaped<T, false, true>(p, shape, shared_bytes, stream);
        else
            launch_shaped<T, false, false>(p, shape, shared_bytes, stream);
    }
}

void launch_gemv_params(const GemvParams& p, DType dtype, int n_weights, bool swiglu, cudaStream_t stream) {
    switch (dtype) {
        case DType::f32:
            launch_gemv_typed<float>(p, n_weights, swiglu, stream);
            break;
        case DType::f16:
            launch_gemv_typed<__half>(p, n_weights, swiglu, stream);
            break;
        case DType::bf16:
            launch_gemv_typed<__nv_bfloat16>(p, n_weights, swiglu, stream);
            break;
        default:
            if (!dtype_is_quantized(dtype)) throw_error("cuda: no GEMV kernel for {} weights", dtype_name(dtype));
            launch_gemv_quantized(p, dtype, n_weights, swiglu, stream);
    }
}

bool known_dtype(DType dtype) {
    return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16 || dtype_is_quantized(dtype);
}

// Quantized rows are whole blocks (32 or 256 elements): checked for every output before anything launches.
void check_quantized_n_in(DType dtype, int32_t n_in, const char* launcher) {
    if (dtype_is_quantized(dtype) && n_in % dtype_block_elements(dtype) != 0)
        cuda_throw((std::string(launcher) + ": " + dtype_name(dtype) + " rows must be whole " +
                    std::to_string(dtype_block_elements(dtype)) + "-element blocks (n_in " + std::to_string(n_in) + ")")
                       .c_str());
}

bool overlaps(const float* a, int64_t n_a, const float* b, int64_t n_b) {
    const uintptr_t pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
    return pa < pb + uintptr_t(n_b) * sizeof(float) && pb < pa + uintptr_t(n_a) * sizeof(float);
}

GemvParams base_params(const float* x, int32_t n_in, const float* norm_weight, float norm_eps, bool accumulate) {
    GemvParams p{};
    for (int i = 0; i < kMaxOutputs; i++) p.row_end[i] = INT32_MAX;
    p.x = x, p.n_in = n_in, p.norm_weight = norm_weight, p.norm_eps = norm_eps, p.accumulate = accumulate;
    p.n_tokens = 1;
    return p;
}

// Output i of p: o's rows end at flattened row `end`.
void set_output(GemvParams& p, int i, const GemvOutput& o, int32_t end) {
    p.weight[i] = o.weight, p.out[i] = o.out, p.bias[i] = o.bias, p.row_end[i] = end;
    p.out_stride[i] = o.n_out;
}

// Launches p for tokens [0, n_tokens) in groups of kGemvTokens (one launch for a single token).
void launch_token_groups(GemvParams p, int32_t n_tokens, DType dtype, int n_weights, bool swiglu, cudaStream_t stream) {
    const float* x = p.x;
    float* out[kMaxOutputs] = {p.out[0], p.out[1], p.out[2]};
    for (int32_t t0 = 0; t0 < n_tokens; t0 += kGemvTokens) {
        p.n_tokens = std::min<int32_t>(kGemvTokens, n_tokens - t0);
        p.x = x + int64_t(t0) * p.n_in;
        for (int i = 0; i < n_weights && i < kMaxOutputs; i++)
            if (out[i]) p.out[i] = out[i] + int64_t(t0) * p.out_stride[i];
        launch_gemv_params(p, dtype, n_weights, swiglu, stream);
    }
}

// set_gemv_launch_rules's values, GemvLaunchRules' defaults until a backend sets them; relaxed: set before
// any launch of the backend that reads them.
constexpr GemvLaunchRules kDefaultRules{};
std::atomic<int> g_rows_per_warp{kDefaultRules.rows_per_warp}, g_threads{kDefaultRules.threads},
    g_split_warps{kDefaultRules.split_warps_per_sm}, g_stage_x{kDefaultRules.stage_x};

}  // namespace

int gemv_detail::gemv_rows_per_warp_override() { return g_rows_per_warp.load(std::memory_order_relaxed); }
int gemv_detail::gemv_threads_override() { return g_threads.load(std::memory_order_relaxed); }
int gemv_detail::gemv_split_warps_per_sm() { return g_split_warps.load(std::memory_order_relaxed); }
bool gemv_detail::gemv_stage_x() { return g_stage_x.load(std::memory_order_relaxed) != 0; }

void set_gemv_launch_rules(const GemvLaunchRules& rules) {
    const auto bad = [](const std::string& what) { cuda_throw(("set_gemv_launch_rules: " + what).c_str()); };
    const int rows = rules.rows_per_warp, threads = rules.threads, split = rules.split_warps_per_sm;
    if (rows != 0 && rows != 1 && rows != 2 && rows != 4)
        bad("rows per warp " + std::to_string(rows) + " must be 1, 2 or 4 (0: the default)");
    if (threads != 0 && threads != 128 && threads != 256)
        bad("threads " + std::to_string(threads) + " must be 128 or 256 (0: the default)");
    if (split < 0 || split > 64)
        bad("split up to " + std::to_string(split) + " warps per SM must be 0 to 64 (0: never split)");
    if (rules.stage_x != 0 && rules.stage_x != 1)
        bad("stage x " + std::to_string(rules.stage_x) + " must be 0 or 1 (1: the default)");
    g_rows_per_warp.store(rows), g_threads.store(threads), g_split_warps.store(split), g_stage_x.store(rules.stage_x);
}

int gemv_split_count(int64_t n_rows, int32_t n_in, DType dtype, bool swiglu) {
    if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16) return 1;
    return launch_shape(n_rows, int64_t(n_in) * int64_t(dtype_size(dtype)) * (swiglu ? 2 : 1), swiglu).splits;
}

void launch_gemv_tokens(const GemvOutput* outputs, int32_t n_outputs, const float* x, int32_t n_tokens, int32_t n_in,
                        const float* norm_weight, float norm_eps, bool accumulate, cudaStream_t stream) {
    if (n_outputs < 1 || n_outputs > kMaxOutputs) cuda_throw("launch_gemv: n_outputs must be 1, 2 or 3");
    if (outputs == nullptr || x == nullptr) cuda_throw("launch_gemv: null outputs or x");
    if (n_in < 1) cuda_throw("launch_gemv: n_in must be at least 1");
    if (n_tokens < 0) cuda_throw("launch_gemv: negative n_tokens");
    int64_t n_rows = 0;
    for (int32_t i = 0; i < n_outputs; i++) {
        const GemvOutput& o = outputs[i];
        if (o.n_out < 0) cuda_throw("launch_gemv: negative n_out");
        if (!known_dtype(o.dtype)) cuda_throw("launch_gemv: unknown weight dtype");
        if (o.n_out == 0) continue;
        check_quantized_n_in(o.dtype, n_in, "launch_gemv");
        if (o.out == nullptr || o.weight == nullptr) cuda_throw("launch_gemv: null out or weight");
        if (overlaps(o.out, int64_t(n_tokens) * o.n_out, x, int64_t(n_tokens) * n_in))
            cuda_throw("launch_gemv: out overlaps x");
        n_rows += o.n_out;
    }
    if (n_rows > INT32_MAX) cuda_throw("launch_gemv: more than INT32_MAX output rows in one launch");
    if (n_rows == 0 || n_tokens == 0) return;
    // One launch per weight dtype present (one in total in the usual case of equal dtypes).
    for (uint32_t raw = 0; dtype_is_known(raw); raw++) {
        const DType dtype = DType(raw);
        GemvParams p = base_params(x, n_in, norm_weight, norm_eps, accumulate);
        int n = 0;
        int32_t end = 0;
        for (int32_t i = 0; i < n_outputs; i++) {
            const GemvOutput& o = outputs[i];
            if (o.dtype != dtype || o.n_out == 0) continue;
            end += o.n_out;
            set_output(p, n++, o, end);
        }
        if (n == 0) continue;
        p.n_rows = end;
        launch_token_groups(p, n_tokens, dtype, n, false, stream);
    }
}

bool gemv_rope_kv_supported(const GemvOutput* qkv, const KvLayout& layout) {
    if (layout.dtype != DType::f32 && layout.dtype != DType::f16 && layout.dtype != DType::bf16) return false;
    if (layout.head_dim < 2 || layout.head_dim % 2 != 0) return false;
    for (int i = 0; i < 3; i++)
        if (qkv[i].dtype != qkv[0].dtype || qkv[i].n_out <= 0 || qkv[i].n_out % layout.head_dim != 0) return false;
    return qkv[1].n_out == layout.n_kv_heads * layout.head_dim && qkv[2].n_out == qkv[1].n_out;
}

void launch_gemv_rope_kv(const GemvOutput* qkv, const float* x, int32_t n_in, const float* norm_weight, float norm_eps,
                         void* kv, const KvLayout& layout, int32_t layer, const int32_t* block_table,
                         const int32_t* position, const float* inv_freq, cudaStream_t stream) {
    if (!gemv_rope_kv_supported(qkv, layout))
        cuda_throw("launch_gemv_rope_kv: q, k and v need one dtype, whole heads and an f32, f16 or bf16 pool");
    if (x == nullptr || kv == nullptr || block_table == nullptr || position == nullptr || inv_freq == nullptr)
        cuda_throw("launch_gemv_rope_kv: null x, pool, table, position or inv_freq");
    if (n_in < 1) cuda_throw("launch_gemv_rope_kv: n_in must be at least 1");
    check_quantized_n_in(qkv[0].dtype, n_in, "launch_gemv_rope_kv");
    GemvParams p = base_params(x, n_in, norm_weight, norm_eps, false);
    int32_t end = 0;
    for (int i = 0; i < 3; i++) {
        if (qkv[i].weight == nullptr || (i == 0 && qkv[i].out == nullptr)) cuda_throw("launch_gemv_rope_kv: null q out or weight");
        end += qkv[i].n_out;
        set_output(p, i, qkv[i], end);
    }
    if (overlaps(qkv[0].out, qkv[0].n_out, x, n_in)) cuda_throw("launch_gemv_rope_kv: out overlaps x");
    p.n_rows = end;
    p.rope_kv = true;
    p.rope = GemvRopeKv{kv, layout, layer, block_table, position, inv_freq};
    launch_gemv_params(p, qkv[0].dtype, 3, false, stream);
}

void launch_gemv(const GemvOutput* outputs, int32_t n_outputs, const float* x, int32_t n_in, const float* norm_weight,
                 float norm_eps, bool accumulate, cudaStream_t stream) {
    launch_gemv_tokens(outputs, n_outputs, x, 1, n_in, norm_weight, norm_eps, accumulate, stream);
}

void launch_gemv_swiglu_tokens(float* out, const float* x, int32_t n_tokens, const void* w_gate, const void* w_up,
                               DType dtype, int32_t n_in, int32_t n_ff, const float* norm_weight, float norm_eps,
                               cudaStream_t stream) {
    if (out == nullptr || x == nullptr || w_gate == nullptr || w_up == nullptr)
        cuda_throw("launch_gemv_swiglu: null out, x or weight");
    if (n_in < 1) cuda_throw("launch_gemv_swiglu: n_in must be at least 1");
    if (n_ff < 0 || n_tokens < 0) cuda_throw("launch_gemv_swiglu: negative n_ff or n_tokens");
    if (!known_dtype(dtype)) cuda_throw("launch_gemv_swiglu: unknown weight dtype");
    check_quantized_n_in(dtype, n_in, "launch_gemv_swiglu");
    if (overlaps(out, int64_t(n_tokens) * n_ff, x, int64_t(n_tokens) * n_in))
        cuda_throw("launch_gemv_swiglu: out overlaps x");
    if (n_ff == 0 || n_tokens == 0) return;
    GemvParams p = base_params(x, n_in, norm_weight, norm_eps, false);
    p.weight[0] = w_gate, p.weight[1] = w_up, p.out[0] = out, p.row_end[0] = n_ff, p.n_rows = n_ff;
    p.out_stride[0] = n_ff;
    launch_token_groups(p, n_tokens, dtype, 2, true, stream);
}

void launch_gemv_swiglu(float* out, const float* x, const void* w_gate, const void* w_up, DType dtype, int32_t n_in,
                        int32_t n_ff, const float* norm_weight, float norm_eps, cudaStream_t stream) {
    launch_gemv_swiglu_tokens(out, x, 1, w_gate, w_up, dtype, n_in, n_ff, norm_weight, norm_eps, stream);
}

}  // namespace kvlm
