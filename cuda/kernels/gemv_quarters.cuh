// What the quantized decode GEMV (gemv_quantized.cu) knows of each block layout: a lane's quarter of a
// 32-element chunk - 8 elements - loaded as raw words (so the loads of a step are all in flight before any is
// used), then dotted with 8 elements of x. Chunks are the blocks themselves for the 32-element types, and the
// 8 sub-blocks of 32 of a 256-element super-block for the k-quants and iq4_xs (chunk c of block b / 8 is the
// kernel's chunk b). Which 8 elements a quarter holds (first_run, second_run) follows the layout: 4 + 4
// (elements 4k.. and 16 + 4k..) where a byte holds elements j and j + 16, else 8 in a row.
// Device helpers only: no __shared__ declarations and no launches (the emulator's prep.py rewrites .cu files).
#pragma once
#include "kernels/quant_cuda.cuh"

namespace kvlm::gemv_detail {

// A quarter's raw words. q0, q1: the low bits of its 8 elements; h0, h1: high bits kept apart (q5_0/q5_1's qh,
// q5_k's and q6_k's qh, q3_k's hmask); s0 .. s3: the block's scale words. Each type fills what it uses (the
// compiler drops the rest).
struct Quarter {
    uint32_t q0, q1, h0, h1, s0, s1, s2, s3;
};

// A 32-bit word at p, which is A-byte aligned (A 2 or 4).
template <int A>
__device__ __forceinline__ uint32_t load_word(const uint8_t* p) {
    if constexpr (A >= 4) {
        return __ldg(reinterpret_cast<const uint32_t*>(p));
    } else {
        const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
        return uint32_t(__ldg(h)) | uint32_t(__ldg(h + 1)) << 16;
    }
}
__device__ __forceinline__ uint32_t load_half(const uint8_t* p) { return __ldg(reinterpret_cast<const uint16_t*>(p)); }

// Bytes of up to three words, indexable as format/quant_scale_bits.h reads packed scales.
struct WordBytes {
    uint32_t w0, w1, w2;
    __device__ __forceinline__ int operator[](int i) const {
        const uint32_t w = i < 4 ? w0 : i < 8 ? w1 : w2;
        return int((w >> (8 * (i & 3))) & 0xffu);
    }
};

template <DType Q>
constexpr bool kSuper = QuantBlock<Q>::kElements == 256;

// 4 + 4 layouts: a byte holds elements j and j + 16 of the 32-element block.
template <DType Q>
constexpr bool kSplitRuns = Q == DType::q4_0 || Q == DType::q4_1 || Q == DType::q5_0 || Q == DType::q5_1 ||
                            Q == DType::iq4_nl;

// Offsets within the chunk of the quarter's two runs of 4 elements (x is read as two float4).
template <DType Q>
__device__ __forceinline__ int first_run(int k) {
    return kSplitRuns<Q> ? 4 * k : 8 * k;
}
template <DType Q>
__device__ __forceinline__ int second_run(int k) {
    return kSplitRuns<Q> ? 16 + 4 * k : 8 * k + 4;
}

// Quarter k (0..3) of chunk b of a row.
template <DType Q>
__device__ __forceinline__ Quarter load_quarter(const uint8_t* row, int64_t b, int k) {
    constexpr int A = QuantBlock<Q>::kAlign;
    const uint8_t* p = row + (kSuper<Q> ? b / 8 : b) * QuantBlock<Q>::kBytes;
    const int c = int(b % 8);  // the chunk within a super-block
    Quarter r{};
    if constexpr (Q == DType::q8_0) {
        r.s0 = load_half(p), r.q0 = load_word<2>(p + 2 + 8 * k), r.q1 = load_word<2>(p + 6 + 8 * k);
    } else if constexpr (Q == DType::q4_0 || Q == DType::iq4_nl) {
        r.s0 = load_half(p), r.q0 = load_word<2>(p + 2 + 4 * k);
    } else if constexpr (Q == DType::q4_1) {
        r.s0 = load_word<4>(p), r.q0 = load_word<4>(p + 4 + 4 * k);
    } else if constexpr (Q == DType::q5_0) {
        r.s0 = load_half(p), r.h0 = load_word<2>(p + 2), r.q0 = load_word<2>(p + 6 + 4 * k);
    } else if constexpr (Q == DType::q5_1) {
        r.s0 = load_word<4>(p), r.h0 = load_word<4>(p + 4), r.q0 = load_word<4>(p + 8 + 4 * k);
    } else if constexpr (Q == DType::iq4_xs) {
        const uint8_t* qs = p + 8 + 16 * c + 8 * (k % 2);
        r.s0 = load_word<4>(p), r.s1 = load_word<4>(p + 4), r.q0 = load_word<4>(qs), r.q1 = load_word<4>(qs + 4);
    } else if constexpr (Q == DType::q4_k || Q == DType::q5_k) {
        const uint8_t* qs = p + (Q == DType::q5_k ? 48 : 16) + 32 * (c / 2) + 8 * k;
        r.s0 = load_word<4>(p), r.s1 = load_word<4>(p + 4), r.s2 = load_word<4>(p + 8), r.s3 = load_word<4>(p + 12);
        r.q0 = load_word<4>(qs), r.q1 = load_word<4>(qs + 4);
        if (Q == DType::q5_k) r.h0 = load_word<4>(p + 16 + 8 * k), r.h1 = load_word<4>(p + 20 + 8 * k);
    } else if constexpr (Q == DType::q6_k) {
        const uint8_t* ql = p + 64 * (c / 4) + 32 * (c % 2) + 8 * k;
        const uint8_t* qh = p + 128 + 32 * (c / 4) + 8 * k;
        r.q0 = load_word<2>(ql), r.q1 = load_word<2>(ql + 4), r.h0 = load_word<2>(qh), r.h1 = load_word<2>(qh + 4);
        r.s0 = load_half(p + 192 + 2 * c), r.s1 = load_half(p + 208);
    } else if constexpr (Q == DType::q3_k) {
        const uint8_t* qs = p + 32 + 32 * (c / 4) + 8 * k;
        r.q0 = load_word<2>(qs), r.q1 = load_word<2>(qs + 4);
        r.h0 = load_word<2>(p + 8 * k), r.h1 = load_word<2>(p + 4 + 8 * k);
        r.s0 = load_half(p + 108);
        r.s1 = load_word<2>(p + 96), r.s2 = load_word<2>(p + 100), r.s3 = load_word<2>(p + 104);
    } else if constexpr (Q == DType::q2_k) {
        const uint8_t* qs = p + 16 + 32 * (c / 4) + 8 * k;
        r.q0 = load_word<4>(qs), r.q1 = load_word<4>(qs + 4);
        r.s0 = load_word<4>(p + 80), r.s1 = load_half(p + 2 * c);
    }
    static_assert(A == 2 || A == 4, "blocks are 2- or 4-byte aligned");
    return r;
}

// The integer of element i (0..7, in the order of first_run then second_run) of quarter k of chunk c.
template <DType Q>
__device__ __forceinline__ int quarter_element(const Quarter& r, int i, int k, int c) {
    if constexpr (kSplitRuns<Q>) {
        const int shift = 8 * (i % 4) + 4 * (i / 4);  // low nibbles then high ones
        const int nibble = int((r.q0 >> shift) & 15u);
        if constexpr (Q == DType::q4_0) return nibble - 8;
        if constexpr (Q == DType::q4_1) return nibble;
        if constexpr (Q == DType::iq4_nl) return iq4_value(uint32_t(nibble));
        const int q = nibble | int((r.h0 >> (16 * (i / 4) + 4 * k + i % 4)) & 1u) << 4;  // q5_0, q5_1
        return Q == DType::q5_0 ? q - 16 : q;
    } else {
        const uint32_t byte = ((i < 4 ? r.q0 : r.q1) >> (8 * (i % 4))) & 0xffu;
        const uint32_t high = ((i < 4 ? r.h0 : r.h1) >> (8 * (i % 4))) & 0xffu;
        if constexpr (Q == DType::q8_0) return int(int8_t(byte));
        if constexpr (Q == DType::iq4_xs) return iq4_value((byte >> (4 * (k / 2))) & 15u);
        if constexpr (Q == DType::q4_k) return int((byte >> (4 * (c % 2))) & 15u);
        if constexpr (Q == DType::q5_k) return int((byte >> (4 * (c % 2))) & 15u) | int((high >> c) & 1u) << 4;
        if constexpr (Q == DType::q6_k)
            return (int((byte >> (4 * (c % 4 / 2))) & 15u) | int((high >> (2 * (c % 4))) & 3u) << 4) - 32;
        if constexpr (Q == DType::q3_k) return int((byte >> (2 * (c % 4))) & 3u) - ((high >> c) & 1u ? 0 : 4);
        if constexpr (Q == DType::q2_k) return int((byte >> (2 * (c % 4))) & 3u);
    }
    return 0;  // not reached: every type returned above
}

// The quarter's scale and min (0 for types without mins): one each, since a quarter never straddles the 16-element
// sub-blocks of q2_k, q3_k and q6_k.
template <DType Q>
__device__ __forceinline__ void quarter_scale(const Quarter& r, int k, int c, float* scale, float* min) {
    *min = 0.0f;
    if constexpr (Q == DType::q8_0 || Q == DType::q4_0 || Q == DType::q5_0 || Q == DType::iq4_nl) {
        *scale = f16_bits_to_f32(r.s0);
    } else if constexpr (Q == DType::q4_1 || Q == DType::q5_1) {
        *scale = f16_bits_to_f32(r.s0), *min = f16_bits_to_f32(r.s0 >> 16);
    } else if constexpr (Q == DType::iq4_xs) {
        *scale = f16_bits_to_f32(r.s0) * float(iq4_xs_scale(WordBytes{r.s0, r.s1, 0}, c));
    } else if constexpr (Q == DType::q4_k || Q == DType::q5_k) {
        int sc, m;
        k4_scale_min(WordBytes{r.s1, r.s2, r.s3}, c, &sc, &m);
        *scale = f16_bits_to_f32(r.s0) * float(sc), *min = -(f16_bits_to_f32(r.s0 >> 16) * float(m));
    } else if constexpr (Q == DType::q6_k) {
        *scale = f16_bits_to_f32(r.s1) * float(int8_t(uint8_t(r.s0 >> (8 * (k / 2)))));
    } else if constexpr (Q == DType::q3_k) {
        *scale = f16_bits_to_f32(r.s0) * float(k3_scale(WordBytes{r.s1, r.s2, r.s3}, 2 * c + k / 2));
    } else if constexpr (Q == DType::q2_k) {
        const uint32_t s = (r.s1 >> (8 * (k / 2))) & 0xffu;
        *scale = f16_bits_to_f32(r.s0) * float(s & 15u), *min = -(f16_bits_to_f32(r.s0 >> 16) * float(s >> 4));
    }
}

// acc + sum_j w_j x[j] over the quarter's 8 elements, as scale * sum(q_j x_j) (+ min * sum(x_j)): the scale is
// applied once per quarter. c: the chunk's index within its super-block (0 for 32-element blocks).
template <DType Q>
__device__ __forceinline__ float quarter_dot(const Quarter& r, int k, int c, const float (&x)[8], float acc) {
    float scale, min;
    quarter_scale<Q>(r, k, c, &scale, &min);
    constexpr bool kHasMin = Q == DType::q4_1 || Q == DType::q5_1 || Q == DType::q2_k || Q == DType::q4_k ||
                             Q == DType::q5_k;
    float s = 0.0f, sum_x = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        s = fmaf(float(quarter_element<Q>(r, i, k, c)), x[i], s);
        if (kHasMin) sum_x += x[i];
    }
    acc = fmaf(scale, s, acc);
    return kHasMin ? fmaf(min, sum_x, acc) : acc;
}

}  // namespace kvlm::gemv_detail
