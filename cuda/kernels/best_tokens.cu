// A beam-search step's best tokens of each row, where the logits are, so that a step of N beams copies back
// N x 2N (score, token) pairs instead of N rows of logits (cuda_ops.h, launch_best_tokens). One block per
// row: the max and the log of the exp sum (fixed tree orders), then n rounds, each taking the best token worse
// than the last one taken ((score desc, token asc): every thread scans its strided logits, the block reduces).
// n is small (2 x beams) and the row sits in L2, so n scans cost less than sorting.
#include <climits>
#include <cmath>

#include "kernels/cuda_ops.h"
#include "kernels/programmatic_launch.cuh"
#include "runtime/cuda_check.h"

namespace kvlm {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ bool better(float sa, int32_t ta, float sb, int32_t tb) {
    return sa > sb || (sa == sb && ta < tb);
}

// The block's best (s, t) by better(); every thread gets it. Every thread must call it.
__device__ void block_best(float* s, int32_t* t, float* warp_s, int32_t* warp_t) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int offset = 16; offset > 0; offset /= 2) {
        const float os = __shfl_xor_sync(0xffffffffu, *s, offset);
        const int32_t ot = __shfl_xor_sync(0xffffffffu, *t, offset);
        if (better(os, ot, *s, *t)) *s = os, *t = ot;
    }
    if (lane == 0) warp_s[warp] = *s, warp_t[warp] = *t;
    __syncthreads();
    *s = warp_s[0], *t = warp_t[0];
    for (int w = 1; w < kWarps; w++)
        if (better(warp_s[w], warp_t[w], *s, *t)) *s = warp_s[w], *t = warp_t[w];
    __syncthreads();  // warp_s, warp_t are reused right after
}

// The block's sum of v (or max, when `max`), in one order whatever the data; every thread gets it.
__device__ float block_reduce(float v, bool max, float* warp_v) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int offset = 16; offset > 0; offset /= 2) {
        const float o = __shfl_xor_sync(0xffffffffu, v, offset);
        v = max ? fmaxf(v, o) : v + o;
    }
    if (lane == 0) warp_v[warp] = v;
    __syncthreads();
    float total = warp_v[0];
    for (int w = 1; w < kWarps; w++) total = max ? fmaxf(total, warp_v[w]) : total + warp_v[w];
    __syncthreads();
    return total;
}

__global__ void __launch_bounds__(kThreads)
    best_tokens_kernel(const float* logits, int32_t n_vocab, int32_t n, const BestTokensBases bases, TokenScore* out,
                       int32_t out_stride) {
    __shared__ float warp_s[kWarps];
    __shared__ int32_t warp_t[kWarps];
    wait_for_prior_kernel();  // the logits
    allow_next_kernel();
    const float* x = logits + int64_t(blockIdx.x) * n_vocab;  // coherent loads: the head GEMV wrote them
    TokenScore* row_out = out + int64_t(blockIdx.x) * out_stride;
    float max = -INFINITY;
    for (int32_t i = threadIdx.x; i < n_vocab; i += kThreads) max = fmaxf(max, x[i]);
    max = block_reduce(max, true, warp_s);
    float sum = 0.0f;
    for (int32_t i = threadIdx.x; i < n_vocab; i += kThreads) sum += expf(x[i] - max);
    const float log_sum = logf(block_reduce(sum, false, warp_s));
    const float base = bases.base[blockIdx.x];
    float last_s = INFINITY;  // the last token taken: every score is worse than (+inf, -1) at first
    int32_t last_t = -1;
    for (int32_t k = 0; k < n; k++) {
        float best_s = -INFINITY;  // sentinel: any score (-inf included) with a token below INT_MAX beats it
        int32_t best_t = INT_MAX;
        for (int32_t i = threadIdx.x; i < n_vocab; i += kThreads) {
            float s = x[i] - max - log_sum;  // best_tokens_cpu's order of operations
            s = s + base;
            if (better(last_s, last_t, s, i) && better(s, i, best_s, best_t)) best_s = s, best_t = i;
        }
        block_best(&best_s, &best_t, warp_s, warp_t);
        if (threadIdx.x == 0) row_out[k] = TokenScore{best_s, best_t == INT_MAX ? -1 : best_t};
        last_s = best_s, last_t = best_t;
    }
}

}  // namespace

void launch_best_tokens(const float* logits, int32_t n_vocab, int32_t n_rows, int32_t n, const BestTokensBases& bases,
                        TokenScore* out, int32_t out_stride, cudaStream_t stream) {
    if (n_vocab <= 0 || n < 1 || n > kMaxDeviceBest || n_rows < 1 || n_rows > kMaxBestRows || out_stride < n)
        cuda_throw(
            "launch_best_tokens: n_vocab must be positive, n 1 to kMaxDeviceBest, rows 1 to kMaxBestRows, "
            "out_stride at least n");
    launch_kernel("best_tokens_kernel", best_tokens_kernel, n_rows, kThreads, 0, stream, logits, n_vocab, n, bases, out,
                  out_stride);
}

}  // namespace kvlm
