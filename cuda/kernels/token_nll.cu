// Perplexity's scores where the logits are (cuda_ops.h, launch_token_nll): each row's negative
// log-likelihood of its target token, so that a chunk copies back one double per scored token instead of a
// row of n_vocab floats (a 512-token chunk of a 49,152-token vocabulary: 2 KB instead of 100 MB). One block
// per row computes the CPU's token_nll (src/generate/perplexity.cpp) in double: the same max, the exp sum in
// a fixed tree order where the CPU sums in a loop, NaN when the row has a non-finite logit.
#include <cmath>

#include "kernels/cuda_ops.h"
#include "kernels/programmatic_launch.cuh"
#include "runtime/cuda_check.h"

namespace kvlm {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

__global__ void __launch_bounds__(kThreads)
    token_nll_kernel(const float* logits, int32_t n_vocab, const int32_t* targets, double* out) {
    __shared__ float warp_max[kWarps];
    __shared__ double warp_sum[kWarps];
    __shared__ int warp_bad[kWarps];
    wait_for_prior_kernel();  // the logits
    allow_next_kernel();
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const float* x = logits + int64_t(blockIdx.x) * n_vocab;  // coherent loads: the head GEMM wrote them
    float max = -INFINITY;
    int bad = 0;
    for (int32_t i = threadIdx.x; i < n_vocab; i += kThreads) {
        const float l = x[i];
        bad |= !isfinite(l);
        max = fmaxf(max, l);
    }
    for (int offset = 16; offset > 0; offset /= 2) {
        max = fmaxf(max, __shfl_xor_sync(0xffffffffu, max, offset));
        bad |= __shfl_xor_sync(0xffffffffu, bad, offset);
    }
    if (lane == 0) warp_max[warp] = max, warp_bad[warp] = bad;
    __syncthreads();
    max = warp_max[0], bad = warp_bad[0];
    for (int w = 1; w < kWarps; w++) max = fmaxf(max, warp_max[w]), bad |= warp_bad[w];
    const double max_logit = max;
    double sum = 0.0;
    for (int32_t i = threadIdx.x; i < n_vocab; i += kThreads) sum += exp(double(x[i]) - max_logit);
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (lane == 0) warp_sum[warp] = sum;
    __syncthreads();
    if (threadIdx.x != 0) return;
    double total = 0.0;
    for (int w = 0; w < kWarps; w++) total += warp_sum[w];
    out[blockIdx.x] = bad ? NAN : log(total) + max_logit - double(x[targets[blockIdx.x]]);
}

}  // namespace

void launch_token_nll(const float* logits, int32_t n_rows, int32_t n_vocab, const int32_t* targets, double* out,
                      cudaStream_t stream) {
    if (n_vocab <= 0 || n_rows < 0 || n_rows > 65535) cuda_throw("launch_token_nll: n_vocab positive, 0 to 65535 rows");
    if (n_rows == 0) return;
    launch_kernel("token_nll_kernel", token_nll_kernel, n_rows, kThreads, 0, stream, logits, n_vocab, targets, out);
}

}  // namespace kvlm
