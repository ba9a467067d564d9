// Canonical dot product kernels (AVX2/FMA/F16C and portable scalar) and the tiled, threaded matmul.
// Every kernel computes each (row, token) pair with its own 8-lane accumulator in the canonical order.
#include "compute/matmul_cpu.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "util/thread_pool.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define KVLM_HAVE_AVX2 1
#include <immintrin.h>
#endif

namespace kvlm {

namespace {

#ifdef KVLM_HAVE_AVX2
std::atomic<bool> g_simd_enabled{true};
#else
std::atomic<bool> g_simd_enabled{false};
#endif

constexpr int64_t kTokenTile = 32;  // tokens per pass over a row tile
constexpr int64_t kRowTile = 16;    // weight rows kept hot in cache while a token tile runs over them
// Below this many multiply-adds a matmul runs on the calling thread: waking workers costs more.
constexpr int64_t kMinParallelWork = 1 << 16;

template <DType D>
inline float load_scalar(const void* p, int64_t i) {
    if constexpr (D == DType::f32) return static_cast<const float*>(p)[i];
    if constexpr (D == DType::f16) return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    if constexpr (D == DType::bf16) return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
}

template <DType D>
inline const void* advance(const void* p, int64_t n_elements) {
    constexpr size_t size = D == DType::f32 ? 4 : 2;
    return static_cast<const char*>(p) + n_elements * int64_t(size);
}

inline float reduce_lanes(const float* l) {
    float s0 = l[0] + l[4], s1 = l[1] + l[5], s2 = l[2] + l[6], s3 = l[3] + l[7];
    return (s0 + s2) + (s1 + s3);
}

// Scalar kernel: R weight rows x T tokens, each pair in the canonical order.
template <DType D, int R, int T>
void kernel_scalar(const void* w, int64_t w_stride, const float* x, int64_t x_stride, int64_t n_in, float* out,
                   int64_t out_stride) {
    float acc[T][R][8] = {};
    for (int64_t i0 = 0; i0 < n_in; i0 += 8) {
        for (int lane = 0; lane < 8; lane++) {
            int64_t i = i0 + lane;
            for (int t = 0; t < T; t++) {
                float xv = i < n_in ? x[t * x_stride + i] : 0.0f;
                for (int r = 0; r < R; r++) {
                    float wv = i < n_in ? load_scalar<D>(advance<D>(w, r * w_stride), i) : 0.0f;
                    acc[t][r][lane] = std::fma(wv, xv, acc[t][r][lane]);
                }
            }
        }
    }
    for (int t = 0; t < T; t++)
        for (int r = 0; r < R; r++) out[t * out_stride + r] = reduce_lanes(acc[t][r]);
}

#ifdef KVLM_HAVE_AVX2
template <DType D>
inline __m256 load8(const void* p, int64_t i) {
    if constexpr (D == DType::f32) return _mm256_loadu_ps(static_cast<const float*>(p) + i);
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
    if constexpr (D == DType::f16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// Elements i..n-1 (fewer than 8) zero-padded to 8 lanes.
template <DType D>
inline __m256 load_tail(const void* p, int64_t i, int64_t n) {
    alignas(32) float buffer[8] = {};
    for (int64_t j = i; j < n; j++) buffer[j - i] = load_scalar<D>(p, j);
    return _mm256_load_ps(buffer);
}

inline float reduce_lanes(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // l0+l4, l1+l5, l2+l6, l3+l7
    __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));                                  // s0+s2, s1+s3
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

template <DType D, int R, int T>
void kernel_avx2(const void* w, int64_t w_stride, const float* x, int64_t x_stride, int64_t n_in, float* out,
                 int64_t out_stride) {
    __m256 acc[T][R];
    for (int t = 0; t < T; t++)
        for (int r = 0; r < R; r++) acc[t][r] = _mm256_setzero_ps();
    const void* rows[R];
    for (int r = 0; r < R; r++) rows[r] = advance<D>(w, r * w_stride);
    int64_t i = 0;
    for (; i + 8 <= n_in; i += 8) {
        __m256 xv[T];
        for (int t = 0; t < T; t++) xv[t] = _mm256_loadu_ps(x + t * x_stride + i);
        for (int r = 0; r < R; r++) {
            __m256 wv = load8<D>(rows[r], i);
            for (int t = 0; t < T; t++) acc[t][r] = _mm256_fmadd_ps(wv, xv[t], acc[t][r]);
        }
    }
    if (i < n_in) {
        __m256 xv[T];
        for (int t = 0; t < T; t++) xv[t] = load_tail<DType::f32>(x + t * x_stride, i, n_in);
        for (int r = 0; r < R; r++) {
            __m256 wv = load_tail<D>(rows[r], i, n_in);
            for (int t = 0; t < T; t++) acc[t][r] = _mm256_fmadd_ps(wv, xv[t], acc[t][r]);
        }
    }
    for (int t = 0; t < T; t++)
        for (int r = 0; r < R; r++) out[t * out_stride + r] = reduce_lanes(acc[t][r]);
}
#endif

template <DType D, int R, int T>
inline void kernel(bool simd, const void* w, int64_t w_stride, const float* x, int64_t x_stride, int64_t n_in,
                   float* out, int64_t out_stride) {
#ifdef KVLM_HAVE_AVX2
    if (simd) return kernel_avx2<D, R, T>(w, w_stride, x, x_stride, n_in, out, out_stride);
#endif
    kernel_scalar<D, R, T>(w, w_stride, x, x_stride, n_in, out, out_stride);
}

// Rows [r0, r1) of out for tokens [t0, t1): 4x3 register tiles, remainders with smaller ones.
template <DType D>
void matmul_tile(float* out, const float* x, const void* w, int64_t n_in, int64_t n_out, int64_t t0, int64_t t1,
                 int64_t r0, int64_t r1, bool simd) {
    int64_t t = t0;
    for (; t + 3 <= t1; t += 3) {
        int64_t r = r0;
        for (; r + 4 <= r1; r += 4)
            kernel<D, 4, 3>(simd, advance<D>(w, r * n_in), n_in, x + t * n_in, n_in, n_in, out + t * n_out + r, n_out);
        for (; r < r1; r++)
            kernel<D, 1, 3>(simd, advance<D>(w, r * n_in), n_in, x + t * n_in, n_in, n_in, out + t * n_out + r, n_out);
    }
    for (; t + 2 <= t1; t += 2) {
        int64_t r = r0;
        for (; r + 4 <= r1; r += 4)
            kernel<D, 4, 2>(simd, advance<D>(w, r * n_in), n_in, x + t * n_in, n_in, n_in, out + t * n_out + r, n_out);
        for (; r < r1; r++)
            kernel<D, 1, 2>(simd, advance<D>(w, r * n_in), n_in, x + t * n_in, n_in, n_in, out + t * n_out + r, n_out);
    }
    for (; t < t1; t++) {
        int64_t r = r0;
        for (; r + 4 <= r1; r += 4)
            kernel<D, 4, 1>(simd, advance<D>(w, r * n_in), n_in, x + t * n_in, n_in, n_in, out + t * n_out + r, n_out);
        for (; r < r1; r++)
            kernel<D, 1, 1>(simd, advance<D>(w, r * n_in), n_in, x + t * n_in, n_in, n_in, out + t * n_out + r, n_out);
    }
}

// dst[i] = src[i] converted to f32 (exact for f16/bf16).
template <DType D>
void convert_rows(float* dst, const void* src, int64_t n, bool simd) {
    int64_t i = 0;
#ifdef KVLM_HAVE_AVX2
    if (simd)
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load8<D>(src, i));
#endif
    for (; i < n; i++) dst[i] = load_scalar<D>(src, i);
}

// Rows [row_begin, row_end) of out = x w^T for all n tokens. For batches, f16/bf16 row tiles are first
// converted to f32 (exactly) once per token tile, so the conversion is not repeated for every token.
template <DType D>
void matmul_rows(float* out, const float* x, const void* w, int64_t n, int64_t n_in, int64_t n_out,
                 int64_t row_begin, int64_t row_end, bool simd) {
    thread_local std::vector<float> converted;  // [kRowTile, n_in]; grows once
    for (int64_t t0 = 0; t0 < n; t0 += kTokenTile) {
        int64_t t1 = std::min(n, t0 + kTokenTile);
        for (int64_t r0 = row_begin; r0 < row_end; r0 += kRowTile) {
            int64_t r1 = std::min(row_end, r0 + kRowTile);
            if (D == DType::f32 || t1 - t0 < 4) {
                matmul_tile<D>(out, x, w, n_in, n_out, t0, t1, r0, r1, simd);
                continue;
            }
            size_t n_tile = size_t((r1 - r0) * n_in);
            if (converted.size() < n_tile) converted.resize(n_tile);
            convert_rows<D>(converted.data(), advance<D>(w, r0 * n_in), int64_t(n_tile), simd);
            // The tile's rows start at 0 in `converted`: shift `out` so that row r0 lands at column r0.
            matmul_tile<DType::f32>(out + r0, x, converted.data(), n_in, n_out, t0, t1, 0, r1 - r0, simd);
        }
    }
}

template <DType D>
void axpy_typed(float* y, float alpha, const void* x, int64_t n, bool simd) {
    int64_t i = 0;
#ifdef KVLM_HAVE_AVX2
    if (simd) {
        __m256 a = _mm256_set1_ps(alpha);
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a, load8<D>(x, i), _mm256_loadu_ps(y + i)));
    }
#endif
    for (; i < n; i++) y[i] = std::fma(alpha, load_scalar<D>(x, i), y[i]);
}

}  // namespace

bool cpu_simd_enabled() { return g_simd_enabled.load(std::memory_order_relaxed); }

void set_cpu_simd_enabled(bool enabled) {
#ifdef KVLM_HAVE_AVX2
    g_simd_enabled.store(enabled, std::memory_order_relaxed);
#else
    (void)enabled;
#endif
}

float dot_cpu(const void* a, DType a_dtype, const float* b, int64_t n) {
    float result = 0.0f;
    bool simd = cpu_simd_enabled();
    switch (a_dtype) {
        case DType::f32: kernel<DType::f32, 1, 1>(simd, a, n, b, n, n, &result, 1); break;
        case DType::f16: kernel<DType::f16, 1, 1>(simd, a, n, b, n, n, &result, 1); break;
        case DType::bf16: kernel<DType::bf16, 1, 1>(simd, a, n, b, n, n, &result, 1); break;
    }
    return result;
}

void axpy_cpu(float* y, float alpha, const void* x, DType x_dtype, int64_t n) {
    bool simd = cpu_simd_enabled();
    switch (x_dtype) {
        case DType::f32: axpy_typed<DType::f32>(y, alpha, x, n, simd); break;
        case DType::f16: axpy_typed<DType::f16>(y, alpha, x, n, simd); break;
        case DType::bf16: axpy_typed<DType::bf16>(y, alpha, x, n, simd); break;
    }
}

void matmul_cpu(float* out, const float* x, const void* w, DType w_dtype, int64_t n, int64_t n_in, int64_t n_out,
                ThreadPool* pool) {
    bool simd = cpu_simd_enabled();
    auto rows = [&](int64_t begin, int64_t end) {
        switch (w_dtype) {
            case DType::f32: matmul_rows<DType::f32>(out, x, w, n, n_in, n_out, begin, end, simd); break;
            case DType::f16: matmul_rows<DType::f16>(out, x, w, n, n_in, n_out, begin, end, simd); break;
            case DType::bf16: matmul_rows<DType::bf16>(out, x, w, n, n_in, n_out, begin, end, simd); break;
        }
    };
    if (pool && n * n_in * n_out >= kMinParallelWork) pool->parallel_for(n_out, rows, 4);
    else rows(0, n_out);
}

}  // namespace kvlm
