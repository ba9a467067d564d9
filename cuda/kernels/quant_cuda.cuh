// Device-side reads of the quantized weight blocks (GGUF's layouts: src/format/dtype.h, format/quant_blocks.h,
// docs/FORMAT.md). Blocks are 18 to 210 bytes, so a block is only as aligned as its size allows when its
// matrix starts 16-byte aligned (kAlign below): reads are 16- and 32-bit words, never wider.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "format/dtype.h"
#include "format/quant_scale_bits.h"
#include "runtime/cuda_check.h"

namespace kvlm {

// kBytes and kElements per block; kAlign: the alignment every block of a 16-byte aligned matrix has.
template <DType Q>
struct QuantBlock;
template <>
struct QuantBlock<DType::q8_0> {
    static constexpr int kBytes = 34, kElements = 32, kAlign = 2;  // f16 d, int8 q[32]
    static constexpr int kQs = 2;                                    // where q starts (the q8_0 KV cache reads it)
};
template <>
struct QuantBlock<DType::q4_0> {
    static constexpr int kBytes = 18, kElements = 32, kAlign = 2;  // f16 d, uint8 qs[16]
};
template <>
struct QuantBlock<DType::q4_1> {
    static constexpr int kBytes = 20, kElements = 32, kAlign = 4;  // f16 d, f16 m, uint8 qs[16]
};
template <>
struct QuantBlock<DType::q5_0> {
    static constexpr int kBytes = 22, kElements = 32, kAlign = 2;  // f16 d, qh[4], qs[16]
};
template <>
struct QuantBlock<DType::q5_1> {
    static constexpr int kBytes = 24, kElements = 32, kAlign = 4;  // f16 d, f16 m, qh[4], qs[16]
};
template <>
struct QuantBlock<DType::iq4_nl> {
    static constexpr int kBytes = 18, kElements = 32, kAlign = 2;  // f16 d, qs[16]
};
template <>
struct QuantBlock<DType::q2_k> {
    static constexpr int kBytes = 84, kElements = 256, kAlign = 4;  // scales[16], qs[64], f16 d, f16 dmin
};
template <>
struct QuantBlock<DType::q3_k> {
    static constexpr int kBytes = 110, kElements = 256, kAlign = 2;  // hmask[32], qs[64], scales[12], f16 d
};
template <>
struct QuantBlock<DType::q4_k> {
    static constexpr int kBytes = 144, kElements = 256, kAlign = 4;  // f16 d, f16 dmin, scales[12], qs[128]
};
template <>
struct QuantBlock<DType::q5_k> {
    static constexpr int kBytes = 176, kElements = 256, kAlign = 4;  // ... scales[12], qh[32], qs[128]
};
template <>
struct QuantBlock<DType::q6_k> {
    static constexpr int kBytes = 210, kElements = 256, kAlign = 2;  // ql[128], qh[64], int8 scales[16], f16 d
};
template <>
struct QuantBlock<DType::iq4_xs> {
    static constexpr int kBytes = 136, kElements = 256, kAlign = 4;  // f16 d, u16 scales_h, scales_l[4], qs[128]
};

__device__ __forceinline__ float f16_bits_to_f32(uint32_t bits) {
    return __half2float(__ushort_as_half((unsigned short)(bits & 0xffffu)));
}

__device__ __forceinline__ float f16_at(const uint8_t* p) { return f16_bits_to_f32(p[0] | p[1] << 8); }

// kIq4Values (format/quant_blocks.h) of a 4-bit code, from two words of packed int8 (no table in memory).
__device__ __forceinline__ int iq4_value(uint32_t code) {
    const uint64_t half = code & 8 ? 0x7159453526190D01ull : 0xF6EADDCFBFAD9881ull;
    return int(int8_t(uint8_t(half >> (8 * (code & 7)))));
}

// The integer w and the sub-block scale and min of element j (0 .. kElements - 1) of a block, as
// decode_quant_chunk (format/quant_blocks.cpp) reads them.
template <DType Q>
__device__ __forceinline__ void decode_element(const uint8_t* b, int j, int* w, float* scale, float* min) {
    const int c = j / 32, l = j % 32;  // chunk (of 32 elements) and the element in it
    const int nibble_shift = 4 * (l / 16);
    *min = 0.0f;
    if constexpr (Q == DType::q8_0) {
        *w = int8_t(b[2 + j]), *scale = f16_at(b);
    } else if constexpr (Q == DType::q4_0) {
        *w = ((b[2 + l % 16] >> nibble_shift) & 15) - 8, *scale = f16_at(b);
    } else if constexpr (Q == DType::q4_1) {
        *w = (b[4 + l % 16] >> nibble_shift) & 15, *scale = f16_at(b), *min = f16_at(b + 2);
    } else if constexpr (Q == DType::q5_0 || Q == DType::q5_1) {
        constexpr int kQh = Q == DType::q5_1 ? 4 : 2;
        const int q = ((b[kQh + 4 + l % 16] >> nibble_shift) & 15) | ((b[kQh + l / 8] >> (l % 8)) & 1) << 4;
        *w = Q == DType::q5_1 ? q : q - 16, *scale = f16_at(b);
        if (Q == DType::q5_1) *min = f16_at(b + 2);
    } else if constexpr (Q == DType::iq4_nl) {
        *w = iq4_value((b[2 + l % 16] >> nibble_shift) & 15), *scale = f16_at(b);
    } else if constexpr (Q == DType::iq4_xs) {
        *w = iq4_value((b[8 + 16 * c + l % 16] >> nibble_shift) & 15);
        *scale = f16_at(b) * float(iq4_xs_scale(b, c));
    } else if constexpr (Q == DType::q4_k || Q == DType::q5_k) {
        constexpr bool kFive = Q == DType::q5_k;
        int q = (b[(kFive ? 48 : 16) + 32 * (c / 2) + l] >> (4 * (c % 2))) & 15;
        if (kFive) q |= ((b[16 + l] >> c) & 1) << 4;
        int sc, m;
        k4_scale_min(b + 4, c, &sc, &m);
        *w = q, *scale = f16_at(b) * float(sc), *min = -(f16_at(b + 2) * float(m));
    } else if constexpr (Q == DType::q6_k) {
        const int low = (b[64 * (c / 4) + 32 * (c % 2) + l] >> (4 * (c % 4 / 2))) & 15;
        const int high = (b[128 + 32 * (c / 4) + l] >> (2 * (c % 4))) & 3;
        *w = (low | high << 4) - 32, *scale = f16_at(b + 208) * float(int8_t(b[192 + j / 16]));
    } else if constexpr (Q == DType::q3_k) {
        const int low = (b[32 + 32 * (c / 4) + l] >> (2 * (c % 4))) & 3;
        *w = low - ((b[l] >> c) & 1 ? 0 : 4), *scale = f16_at(b + 108) * float(k3_scale(b + 96, j / 16));
    } else if constexpr (Q == DType::q2_k) {
        const int s = b[j / 16];
        *w = (b[16 + 32 * (c / 4) + l] >> (2 * (c % 4))) & 3;
        *scale = f16_at(b + 80) * float(s & 15), *min = -(f16_at(b + 82) * float(s >> 4));
    }
}

// Element j of a block, rounded exactly as dequantize_blocks (format/quant_blocks.cpp) rounds it: scale * w is
// exact, the add of the min the one rounding (the _rn intrinsics keep the compiler from fusing the two).
template <DType Q>
__device__ __forceinline__ float dequant_element(const uint8_t* block, int j) {
    int w;
    float scale, min;
    decode_element<Q>(block, j, &w, &scale, &min);
    const float product = __fmul_rn(scale, float(w));
    constexpr bool kHasMin = Q == DType::q4_1 || Q == DType::q5_1 || Q == DType::q2_k || Q == DType::q4_k ||
                             Q == DType::q5_k;
    return kHasMin ? __fadd_rn(product, min) : product;
}

// Element i of a matrix of Q blocks (rows of whole blocks, so rows need not be known).
template <DType Q>
__device__ __forceinline__ float dequant_at(const uint8_t* blocks, int64_t i) {
    constexpr int kElements = QuantBlock<Q>::kElements;
    return dequant_element<Q>(blocks + (i / kElements) * QuantBlock<Q>::kBytes, int(i % kElements));
}

#define KVLM_QUANT_CASE(Q, q, ...)                 \
    case ::kvlm::DType::q: {                       \
        constexpr ::kvlm::DType Q = ::kvlm::DType::q; \
        __VA_ARGS__;                               \
        break;                                     \
    }

// Calls the body with Q the quantized DType `dtype` as a compile-time constant (a host-side switch).
#define KVLM_DISPATCH_QUANT(dtype, Q, ...)                         \
    do {                                                           \
        switch (dtype) {                                           \
            KVLM_QUANT_CASE(Q, q8_0, __VA_ARGS__)                  \
            KVLM_QUANT_CASE(Q, q4_0, __VA_ARGS__)                  \
            KVLM_QUANT_CASE(Q, q4_1, __VA_ARGS__)                  \
            KVLM_QUANT_CASE(Q, q5_0, __VA_ARGS__)                  \
            KVLM_QUANT_CASE(Q, q5_1, __VA_ARGS__)                  \
            KVLM_QUANT_CASE(Q, iq4_nl, __VA_ARGS__)                \
            KVLM_QUANT_CASE(Q, q2_k, __VA_ARGS__)                  \
            KVLM_QUANT_CASE(Q, q3_k, __VA_ARGS__)                  \
            KVLM_QUANT_CASE(Q, q4_k, __VA_ARGS__)                  \
            KVLM_QUANT_CASE(Q, q5_k, __VA_ARGS__)                  \
            KVLM_QUANT_CASE(Q, q6_k, __VA_ARGS__)                  \
            KVLM_QUANT_CASE(Q, iq4_xs, __VA_ARGS__)                \
            default:                                               \
                ::kvlm::cuda_throw("cuda: not a quantized dtype"); \
        }                                                          \
    } while (0)

}  // namespace kvlm
