// The portable kernel set: plain C++ in the canonical order of compute/cpu_kernels.h, the reference every
// SIMD path matches bit for bit, and the path for CPUs without AVX2.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "compute/cpu_kernels.h"

namespace kvlm {

namespace {

float load_element(const void* p, DType dtype, int64_t i) {
    if (dtype == DType::f32) return static_cast<const float*>(p)[i];
    if (dtype == DType::q8_0) {  // a KV-cache row: d * q, exact in f32
        const char* block = static_cast<const char*>(p) + (i / 32) * 34;
        uint16_t d;
        std::memcpy(&d, block, 2);
        return f16_to_f32(d) * float(int8_t(block[2 + i % 32]));
    }
    uint16_t h;
    std::memcpy(&h, static_cast<const char*>(p) + 2 * i, 2);
    return dtype == DType::f16 ? f16_to_f32(h) : bf16_to_f32(h);
}

float reduce_lanes(const float* l) {
    float s0 = l[0] + l[4], s1 = l[1] + l[5], s2 = l[2] + l[6], s3 = l[3] + l[7];
    return (s0 + s2) + (s1 + s3);
}

float dot(const void* a, DType a_dtype, const float* b, int64_t n) {
    float acc[8] = {};
    for (int64_t i0 = 0; i0 < n; i0 += 8)
        for (int lane = 0; lane < 8; lane++) {
            int64_t i = i0 + lane;
            float av = i < n ? load_element(a, a_dtype, i) : 0.0f, bv = i < n ? b[i] : 0.0f;
            acc[lane] = std::fma(av, bv, acc[lane]);
        }
    return reduce_lanes(acc);
}

void axpy(float* y, float alpha, const void* x, DType x_dtype, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = std::fma(alpha, load_element(x, x_dtype, i), y[i]);
}

void matmul_direct(float* out, int64_t out_stride, const float* x, int64_t n, const void* w, DType w_dtype,
               int64_t n_in, int64_t r0, int64_t r1) {
    const size_t element = w_dtype == DType::f32 ? 4 : 2;
    for (int64_t t = 0; t < n; t++)
        for (int64_t r = r0; r < r1; r++)
            out[t * out_stride + r] = dot(static_cast<const char*>(w) + size_t(r * n_in) * element, w_dtype,
                                          x + t * n_in, n_in);
}

void matmul_widened(float* out, int64_t out_stride, const float* x, int64_t n, const void* w, DType w_dtype,
                    int64_t n_in, int64_t n_rows, float* scratch) {
    for (int64_t i = 0; i < n_rows * n_in; i++) scratch[i] = load_element(w, w_dtype, i);
    matmul_direct(out, out_stride, x, n, scratch, DType::f32, n_in, 0, n_rows);
}

void quantize_rows(ActivationBlock* out, const float* x, int64_t n, int64_t n_in) {
    for (int64_t b = 0; b < n * n_in / 32; b++) {
        const float* v = x + b * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = std::fmax(amax, std::fabs(v[j]));
        const float d = amax / 32767.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        int32_t sum = 0;
        for (int j = 0; j < 32; j++) {
            int32_t q = int32_t(std::nearbyint(v[j] * id));  // the default rounding: to nearest even
            out[b].q[j] = int16_t(q);
            sum += q;
        }
        out[b].d = d;
        out[b].s = d * float(sum);
    }
}

// Weight element j of block b as an integer (q8_0: q; q4_0: nibble - 8; q4_1: nibble).
int32_t weight_int(const uint8_t* block, DType dtype, int j) {
    if (dtype == DType::q8_0) return int8_t(block[2 + j]);
    const uint8_t* qs = block + (dtype == DType::q4_1 ? 4 : 2);
    int32_t nibble = j < 16 ? (qs[j] & 0x0f) : (qs[j - 16] >> 4);
    return dtype == DType::q4_0 ? nibble - 8 : nibble;
}

uint16_t load_u16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return h;
}

float dot_q(const uint8_t* w, DType w_dtype, const ActivationBlock* x, int64_t n_blocks) {
    const size_t block_bytes = dtype_block_bytes(w_dtype);
    float acc = 0.0f, bias = 0.0f;
    for (int64_t b = 0; b < n_blocks; b++) {
        const uint8_t* block = w + size_t(b) * block_bytes;
        int32_t sum = 0;
        for (int j = 0; j < 32; j++) sum += weight_int(block, w_dtype, j) * int32_t(x[b].q[j]);
        acc = std::fma(float(sum), f16_to_f32(load_u16(block)) * x[b].d, acc);
        if (w_dtype == DType::q4_1) bias = std::fma(f16_to_f32(load_u16(block + 2)), x[b].s, bias);
    }
    return acc + bias;
}

void matmul_q(float* out, int64_t out_stride, const ActivationBlock* x, int64_t n, const void* w, DType w_dtype,
              int64_t n_in, int64_t r0, int64_t r1, void* scratch) {
    if (w_dtype != DType::q8_0 && w_dtype != DType::q4_0 && w_dtype != DType::q4_1)
        return matmul_quant_generic(out, out_stride, x, n, w, w_dtype, n_in, r0, r1);
    const int64_t n_blocks = n_in / 32;
    const size_t row_bytes = size_t(n_blocks) * dtype_block_bytes(w_dtype);
    for (int64_t t = 0; t < n; t++)
        for (int64_t r = r0; r < r1; r++)
            out[t * out_stride + r] =
                dot_q(static_cast<const uint8_t*>(w) + size_t(r) * row_bytes, w_dtype, x + t * n_blocks, n_blocks);
}

float exp_c(float x) {
    x = x < kExpMin ? kExpMin : (x > kExpMax ? kExpMax : x);
    const float n = std::nearbyint(x * kExpLog2e);
    float r = std::fma(n, -kExpLn2Hi, x);
    r = std::fma(n, -kExpLn2Lo, r);
    const float z = r * r;
    float p = kExpP[0];
    for (int i = 1; i < 6; i++) p = std::fma(p, r, kExpP[i]);
    const float y = std::fma(p, z, r) + 1.0f;
    const uint32_t bits = uint32_t(int32_t(n) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, 4);
    return y * scale;
}

void attend_block(const AttentionQueries& qs, const AttentionKeys& keys) {
    for (int32_t i = 0; i < qs.n_q; i++) {
        const float* q = qs.q + int64_t(i) * qs.head_dim;
        float* o = qs.o + int64_t(i) * qs.head_dim;
        const int32_t n_valid = std::min(keys.n_keys, qs.last[i] - keys.key0 + 1);
        float block_max = -INFINITY;
        for (int32_t j = 0; j < n_valid; j++) {
            qs.scores[j] = dot(keys.k[j], keys.dtype, q, qs.head_dim) * qs.scale;
            block_max = std::fmax(block_max, qs.scores[j]);
        }
        const float m = std::fmax(qs.m[i], block_max);
        const float alpha = qs.m[i] == -INFINITY ? 0.0f : exp_c(qs.m[i] - m);
        qs.m[i] = m;
        float l = qs.l[i] * alpha;
        for (int32_t j = 0; j < n_valid; j++) {
            qs.scores[j] = exp_c(qs.scores[j] - m);
            l += qs.scores[j];
        }
        qs.l[i] = l;
        for (int32_t d = 0; d < qs.head_dim; d++) o[d] *= alpha;
        for (int32_t j = 0; j < n_valid; j++) axpy(o, qs.scores[j], keys.v[j], keys.dtype, qs.head_dim);
    }
}

void swiglu(float* out, const float* gate, const float* up, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = gate[i] / (1.0f + exp_c(-gate[i])) * up[i];
}

}  // namespace

double exp_sum(const float* x, int64_t n, float shift) {
    double total = 0.0;
    for (int64_t i = 0; i < n; i++) total += exp_c(x[i] - shift);
    return total;
}

const CpuKernels kScalarKernels = {dot,      axpy,         matmul_direct, matmul_widened, quantize_rows,
                                   matmul_q, attend_block, swiglu,        exp_sum};

}  // namespace kvlm
