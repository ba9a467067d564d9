// The quantized matmul of the types without a kernel of their own on any path (q5_0, q5_1, iq4_nl, the
// k-quants, iq4_xs): one function, compiled once with the baseline flags, that every path calls, so that its
// bits are every path's. The canonical order is in compute/cpu_kernels.h.
#include <cmath>

#include "compute/cpu_kernels.h"
#include "format/quant_blocks.h"

namespace kvlm {

namespace {

// The four chunk lanes' sum, in the canonical order.
float lane_sum(const float* lane) { return (lane[0] + lane[1]) + (lane[2] + lane[3]); }

}  // namespace

float dot_quant_generic(const uint8_t* w, DType w_dtype, const ActivationBlock* x, int64_t n_blocks) {
    const int64_t chunks_per_block = dtype_block_elements(w_dtype) / 32;
    const size_t block_bytes = dtype_block_bytes(w_dtype);
    const bool per_16 = quant_scale_per_16(w_dtype), has_min = quant_has_min(w_dtype);
    // Chains [half][lane]: chunk b goes to lane b % 4; per-16 types have one set of lanes per half.
    float acc[2][4] = {}, bias[2][4] = {};
    QuantChunk chunk;
    for (int64_t b = 0; b < n_blocks; b++) {
        decode_quant_chunk(w_dtype, w + size_t(b / chunks_per_block) * block_bytes, int(b % chunks_per_block), &chunk);
        const ActivationBlock& a = x[b];
        const int lane = int(b % 4);
        if (!per_16) {
            int32_t sum = 0;
            for (int j = 0; j < 32; j++) sum += int32_t(chunk.w[j]) * int32_t(a.q[j]);
            acc[0][lane] = std::fma(float(sum), chunk.scale[0] * a.d, acc[0][lane]);
            if (has_min) bias[0][lane] = std::fma(chunk.min[0], a.s, bias[0][lane]);
            continue;
        }
        for (int h = 0; h < 2; h++) {
            int32_t sum = 0, sum_q = 0;
            for (int j = 16 * h; j < 16 * h + 16; j++) {
                sum += int32_t(chunk.w[j]) * int32_t(a.q[j]);
                sum_q += a.q[j];
            }
            acc[h][lane] = std::fma(float(sum), chunk.scale[h] * a.d, acc[h][lane]);
            if (has_min) bias[h][lane] = std::fma(chunk.min[h], a.d * float(sum_q), bias[h][lane]);
        }
    }
    if (per_16) return (lane_sum(acc[0]) + lane_sum(acc[1])) + (lane_sum(bias[0]) + lane_sum(bias[1]));
    return lane_sum(acc[0]) + lane_sum(bias[0]);
}

void matmul_quant_generic(float* out, int64_t out_stride, const ActivationBlock* x, int64_t n, const void* w,
                          DType w_dtype, int64_t n_in, int64_t r0, int64_t r1) {
    const int64_t n_blocks = n_in / 32;
    const size_t row_bytes = size_t(dtype_bytes(w_dtype, uint64_t(n_in)));
    for (int64_t t = 0; t < n; t++)
        for (int64_t r = r0; r < r1; r++)
            out[t * out_stride + r] = dot_quant_generic(static_cast<const uint8_t*>(w) + size_t(r) * row_bytes, w_dtype,
                                                        x + t * n_blocks, n_blocks);
}

}  // namespace kvlm
