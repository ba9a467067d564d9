// Decode GEMVs over quantized weights (every quantized type: q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl and the
// 256-element q2_k .. q6_k and iq4_xs): the blocks are read as they sit in device memory, dequantized in
// registers and multiplied with the f32 activation x_hat in f32 (the activation is not quantized: the GPU is
// memory-bound at batch 1, so the f32 products cost nothing and stay closer to the exact result than the
// CPU's q8 activations). Same launch variants, shapes and epilogue as gemv.cu (gemv_shared.cuh): fused
// rmsnorm, up to 3 outputs, residual accumulate, the SwiGLU pair. Deterministic.
//
// Loads: blocks of 18 to 210 bytes sit at every 2-byte or 4-byte offset (QuantBlock::kAlign), so no 16-byte
// load lines up with them without restaging the row through shared memory. Instead 4 lanes share a 32-element
// chunk, each reading one quarter of it (8 elements, gemv_quarters.cuh) with 2- and 4-byte loads, and a warp
// covers 8 consecutive chunks of a row per load step (8 blocks of 32, or one super-block of 256): every
// warp-wide load instruction reads within those contiguous bytes, so DRAM moves each of the row's 32-byte
// sectors once (a sector shared by two steps is an L1 hit the second time), the bytes 16-byte loads would
// move; the cost is more load instructions per byte (q8_0: 5 per 8 elements, q4_0: 3, q4_1: 2), not more
// traffic. The super-block types' lanes also load their block's scale words (the same few bytes for the
// warp: one sector).
#include <string>

#include "kernels/cuda_ops.h"
#include "kernels/dtype_cuda.cuh"
#include "kernels/gemv_quarters.cuh"
#include "kernels/gemv_shared.cuh"
#include "kernels/programmatic_launch.cuh"
#include "kernels/quant_cuda.cuh"
#include "runtime/cuda_check.h"

namespace kvlm {

namespace gemv_detail {

namespace {

// One load step: quarter `k` of chunk base + u * 8 + sub of each of the warp's NR rows; past the row's end
// nothing is loaded (the compute loop skips those).
template <DType Q, int U, int NR>
__device__ __forceinline__ void load_step(Quarter (&w)[U][NR], const uint8_t* const (&rows)[NR], int64_t base,
                                          int64_t n_chunks, int sub, int k) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int64_t b = base + u * 8 + sub;
#pragma unroll
        for (int r = 0; r < NR; r++)
            if (b < n_chunks) w[u][r] = load_quarter<Q>(rows[r], b, k);
    }
}

// As gemv_kernel (gemv.cu) - warp per R rows, NT token slots, x_hat staged in shared memory or read from
// global memory and normalised on the fly, the first step's loads issued before x_hat exists - but lane l
// works on quarter l % 4 of block base + u * 8 + l / 4 (U blocks of 8 per row per step, 8 quarters in flight
// per lane). A super-block type's step covers one super-block of each row per u, lane l its chunk l / 4.
template <DType Q, int R, bool kSwiglu, bool kShared, int NT>
__global__ void __launch_bounds__(kMaxWarps * 32) gemv_quantized_kernel(const GemvParams p) {
    extern __shared__ float4 x_shared4[];  // [n_tokens, n_in] when kShared
    float* x_shared = reinterpret_cast<float*>(x_shared4);
    __shared__ float warp_sums[kMaxWarps];
    constexpr int kMats = kSwiglu ? 2 : 1;
    constexpr int NR = R * kMats;
    constexpr int U = 8 / NR;
    const int lane = threadIdx.x % 32, sub = lane / 4, k = lane % 4;
    const int32_t n_in = p.n_in;
    const int64_t n_chunks = n_in / kQuantBlock;
    const int64_t row_bytes = int64_t(n_in) / QuantBlock<Q>::kElements * QuantBlock<Q>::kBytes;
    const float* x = p.x;  // written by the prior kernel: coherent loads (programmatic_launch.cuh)
    const float* __restrict__ norm_weight = p.norm_weight;
    const bool norm = norm_weight != nullptr;
    const int64_t first = (int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32) * R;
    const bool has_rows = first < p.n_rows;  // warp-uniform

    const uint8_t* rows[NR];
#pragma unroll
    for (int r = 0; r < R; r++) {
#pragma unroll
        for (int m = 0; m < kMats; m++) {
            int32_t local;
            const void* w = row_matrix<kSwiglu>(p, warp_row<R, kSwiglu, NT>(p, first, r), m, &local);
            rows[m * R + r] = static_cast<const uint8_t*>(w) + int64_t(local) * row_bytes;
        }
    }
    Quarter wq[U][NR] = {};
    if (has_rows) load_step<Q>(wq, rows, 0, n_chunks, sub, k);
    wait_for_prior_kernel();  // the weights above are immutable; x and out are not
    allow_next_kernel();
    const EarlyReads<R> early = early_reads<R, kSwiglu, NT>(p, first, lane);

    float scale[NT];
    stage_input<kShared>(p, x_shared, warp_sums, scale);
    // No block-wide synchronization below: warps without rows may leave.
    if (!has_rows) return;

    float acc[NT][NR];
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int r = 0; r < NR; r++) acc[t][r] = 0.0f;
    for (int64_t base = 0; base < n_chunks; base += U * 8) {
        if (base > 0) load_step<Q>(wq, rows, base, n_chunks, sub, k);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t b = base + u * 8 + sub;
            if (b >= n_chunks) continue;
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (NT > 1 && t >= p.n_tokens) break;
                const int64_t xt = int64_t(t) * n_in;  // token t's x, in floats (a multiple of 32)
                const int64_t at[2] = {xt + b * kQuantBlock + first_run<Q>(k), xt + b * kQuantBlock + second_run<Q>(k)};
                float xv[8];
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    if (kShared) {
                        const float4 f = x_shared4[at[h] / 4];
                        xv[4 * h] = f.x, xv[4 * h + 1] = f.y, xv[4 * h + 2] = f.z, xv[4 * h + 3] = f.w;
                    } else {
#pragma unroll
                        for (int i = 0; i < 4; i++) {
                            const int64_t j = at[h] + i;
                            xv[4 * h + i] = norm ? __ldg(norm_weight + (j - xt)) * (x[j] * scale[t]) : x[j];
                        }
                    }
                }
#pragma unroll
                for (int r = 0; r < NR; r++) acc[t][r] = quarter_dot<Q>(wq[u][r], k, sub, xv, acc[t][r]);
            }
        }
    }
    // Every lane of the warp gets here (the loops above only predicate), as the full-mask shuffles need.
    finish_rows<R, kSwiglu>(p, first, acc, lane, early);
}

// One token: R rows per warp as the shape says; several: one row per warp at the one-token block size.
template <DType Q, bool kSwiglu, bool kShared>
void launch_with(GemvParams p, const LaunchShape& shape, size_t shared_bytes, cudaStream_t stream) {
    void (*kernel)(GemvParams) = gemv_quantized_kernel<Q, 1, kSwiglu, kShared, 1>;
    LaunchShape used = shape;
    p.splits = 1;
    if (p.n_tokens > 1) {
        kernel = gemv_quantized_kernel<Q, 1, kSwiglu, kShared, kGemvTokens>;
        used.rows_per_warp = 1;
    } else if (shape.rows_per_warp == 2) {
        kernel = gemv_quantized_kernel<Q, 2, kSwiglu, kShared, 1>;
    } else if constexpr (!kSwiglu) {
        if (shape.rows_per_warp == 4) kernel = gemv_quantized_kernel<Q, 4, kSwiglu, kShared, 1>;
    }
    launch_kernel("gemv_quantized_kernel", kernel, launch_blocks(p.n_rows, used), used.threads, shared_bytes, stream,
                  p);
}

template <DType Q>
void launch_typed(const GemvParams& p, int n_weights, bool swiglu, cudaStream_t stream) {
    for (int i = 0; i < n_weights; i++)
        if (reinterpret_cast<uintptr_t>(p.weight[i]) % QuantBlock<Q>::kAlign != 0)
            cuda_throw((std::string("launch_gemv: ") + dtype_name(Q) + " weights must be " +
                        std::to_string(QuantBlock<Q>::kAlign) + "-byte aligned")
                           .c_str());
    const bool shared = gemv_stage_x() && int64_t(p.n_tokens) * p.n_in <= kMaxSharedIn;
    const LaunchShape shape = launch_shape_for(p, /*row_bytes=*/0, swiglu);  // warps own their rows whole
    const size_t shared_bytes = shared ? size_t(p.n_tokens) * size_t(p.n_in) * sizeof(float) : 0;
    if (swiglu) {
        if (shared)
            launch_with<Q, true, true>(p, shape, shared_bytes, stream);
        else
            launch_with<Q, true, false>(p, shape, shared_bytes, stream);
    } else {
        if (shared)
            launch_with<Q, false, true>(p, shape, shared_bytes, stream);
        else
            launch_with<Q, false, false>(p, shape, shared_bytes, stream);
    }
}

}  // namespace

void launch_gemv_quantized(const GemvParams& p, DType dtype, int n_weights, bool swiglu, cudaStream_t stream) {
    if (p.n_in % dtype_block_elements(dtype) != 0)
        cuda_throw((std::string("launch_gemv: ") + dtype_name(dtype) + " rows must be whole " +
                    std::to_string(dtype_block_elements(dtype)) + "-element blocks")
                       .c_str());
    KVLM_DISPATCH_QUANT(dtype, Q, launch_typed<Q>(p, n_weights, swiglu, stream));
}

}  // namespace gemv_detail

}  // namespace kvlm
