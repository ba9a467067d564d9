// The dense (f32/f16/bf16) decode GEMV's inner loop, shared by gemv.cu's kernels and the persistent decode
// kernel (decode_persistent.cu), so that a row's dot product has the same bits whichever runs it: lane l of
// a row group owns 16-byte chunks (elements on the scalar path) l, l + 32 * splits, ..., accumulated in
// increasing order. Device helpers only (no __shared__ declarations and no launches: the emulator's prep.py
// rewrites those in .cu files).
#pragma once
#include <cstdint>

#include "kernels/dtype_cuda.cuh"
#include "kernels/gemv_shared.cuh"

namespace kvlm::gemv_detail {

// Two consecutive 16-bit elements packed in a 32-bit word (little-endian: element 2k in the low half).
__device__ __forceinline__ float2 unpack2(uint32_t word, __half) {
    return __half22float2(__halves2half2(__ushort_as_half((unsigned short)(word & 0xffffu)),
                                         __ushort_as_half((unsigned short)(word >> 16))));
}
__device__ __forceinline__ float2 unpack2(uint32_t word, __nv_bfloat16) {  // bf16 is the top half of an f32
    return make_float2(__uint_as_float(word << 16), __uint_as_float(word & 0xffff0000u));
}

// acc + sum_j w_j * x[j] over the 16 / sizeof(T) elements of w, in element order.
template <typename T>
__device__ __forceinline__ float dot16(const uint4& w, const float* x, float acc) {
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        if constexpr (sizeof(T) == 4) {
            acc = fmaf(__uint_as_float(words[k]), x[k], acc);
        } else {
            float2 f = unpack2(words[k], T());
            acc = fmaf(f.x, x[2 * k], acc);
            acc = fmaf(f.y, x[2 * k + 1], acc);
        }
    }
    return acc;
}

// One step of a warp's weight loads: U 16-byte chunks (vector path) or U elements (scalar path) of each of
// its NR rows, the warp's group lane l (lane + 32 * its split) taking chunk/element base + u * stride + l
// (stride: 32 x the group's warps); past the row's end it loads zeros.
template <typename T, int U, int NR>
__device__ __forceinline__ void load_step(uint4 (&w)[U][NR], const T* const (&rows)[NR], int64_t base, int64_t n_chunks,
                                          int lane, int stride) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int64_t c = base + u * stride + lane;
#pragma unroll
        for (int k = 0; k < NR; k++)
            w[u][k] =
                c < n_chunks ? load_streaming16(reinterpret_cast<const uint4*>(rows[k]) + c) : make_uint4(0, 0, 0, 0);
    }
}
template <typename T, int U, int NR>
__device__ __forceinline__ void load_step(float (&w)[U][NR], const T* const (&rows)[NR], int64_t base, int64_t n_in,
                                          int lane, int stride) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int64_t i = base + u * stride + lane;
#pragma unroll
        for (int k = 0; k < NR; k++) w[u][k] = i < n_in ? load_f32(rows[k], i) : 0.0f;
    }
}

// The weight rows of the group whose first flattened row is `first`: R rows (warp_row), then for SwiGLU the
// up matrix's R rows.
template <typename T, int R, bool kSwiglu, int NT>
__device__ __forceinline__ void row_pointers(const GemvParams& p, int64_t first,
                                             const T* (&rows)[R * (kSwiglu ? 2 : 1)]) {
#pragma unroll
    for (int r = 0; r < R; r++) {
#pragma unroll
        for (int m = 0; m < (kSwiglu ? 2 : 1); m++) {
            int32_t local;
            const void* w = row_matrix<kSwiglu>(p, warp_row<R, kSwiglu, NT>(p, first, r), m, &local);
            rows[m * R + r] = static_cast<const T*>(w) + int64_t(local) * p.n_in;
        }
    }
}

template <int NT, int NR>
__device__ __forceinline__ void zero_rows(float (&acc)[NT][NR]) {
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int k = 0; k < NR; k++) acc[t][k] = 0.0f;
}

// acc[t][k] = the group lane's share of row k's dot product with token t's x_hat. wv holds the first step's
// chunks on the vector path (loaded before x_hat existed). x_hat is x_shared (kShared) or p.x normalised on
// the fly with scale[t] and p.norm_weight, with the same arithmetic.
template <typename T, int U, int NR, int NT, bool kShared>
__device__ __forceinline__ void accumulate_rows(const GemvParams& p, const T* const (&rows)[NR], uint4 (&wv)[U][NR],
                                                int group_lane, int stride, const float* x_shared,
                                                const float (&scale)[NT], float (&acc)[NT][NR]) {
    constexpr int V = 16 / int(sizeof(T));  // elements per 16-byte chunk
    const int32_t n_in = p.n_in;
    const int64_t n_chunks = n_in / V;
    const float* x = p.x;  // written by a prior kernel or stage: coherent loads
    const float* __restrict__ norm_weight = p.norm_weight;
    const bool norm = norm_weight != nullptr;
    const float4* x_shared4 = reinterpret_cast<const float4*>(x_shared);
    zero_rows(acc);
    if (p.vec) {
        for (int64_t base = 0; base < n_chunks; base += U * stride) {
            if (base > 0) load_step(wv, rows, base, n_chunks, group_lane, stride);
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int64_t c = base + u * stride + group_lane;
                if (c >= n_chunks) continue;
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    if (NT > 1 && t >= p.n_tokens) break;
                    const int64_t xt = int64_t(t) * n_in;  // token t's x, in floats
                    float xv[V];
#pragma unroll
                    for (int j = 0; j < V / 4; j++) {
                        float4 f;
                        if (kShared) {
                            f = x_shared4[(xt / 4) + c * (V / 4) + j];
                        } else {
                            f = reinterpret_cast<const float4*>(x + xt)[c * (V / 4) + j];
                            if (norm) {
                                const float s = scale[t];
                                const float4 g = __ldg(reinterpret_cast<const float4*>(norm_weight) + c * (V / 4) + j);
                                f.x = g.x * (f.x * s), f.y = g.y * (f.y * s);
                                f.z = g.z * (f.z * s), f.w = g.w * (f.w * s);
                            }
                        }
                        xv[4 * j] = f.x, xv[4 * j + 1] = f.y, xv[4 * j + 2] = f.z, xv[4 * j + 3] = f.w;
                    }
#pragma unroll
                    for (int k = 0; k < NR; k++) acc[t][k] = dot16<T>(wv[u][k], xv, acc[t][k]);
                }
            }
        }
    } else {
        for (int64_t base = 0; base < n_in; base += U * stride) {
            float ws[U][NR];
            load_step(ws, rows, base, n_in, group_lane, stride);
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int64_t i = base + u * stride + group_lane;
                if (i >= n_in) continue;
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    if (NT > 1 && t >= p.n_tokens) break;
                    const int64_t xi_at = int64_t(t) * n_in + i;
                    float xi;
                    if (kShared)
                        xi = x_shared[xi_at];
                    else
                        xi = norm ? __ldg(norm_weight + i) * (x[xi_at] * scale[t]) : x[xi_at];
#pragma unroll
                    for (int k = 0; k < NR; k++) acc[t][k] = fmaf(ws[u][k], xi, acc[t][k]);
                }
            }
        }
    }
}

}  // namespace kvlm::gemv_detail
