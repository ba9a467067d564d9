// Device-side reads of the quantized weight blocks (GGUF's q8_0, q4_0, q4_1; layouts in src/format/dtype.h).
// Blocks are 34, 18 and 20 bytes, so a block is only 2-byte (q8_0, q4_0) or 4-byte (q4_1) aligned when its
// matrix starts 16-byte aligned: reads are 16- and 32-bit words, never wider.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "format/dtype.h"
#include "runtime/cuda_check.h"

namespace kvlm {

template <DType Q>
struct QuantBlock;
template <>
struct QuantBlock<DType::q8_0> {
    static constexpr int kBytes = 34, kQs = 2, kAlign = 2;  // f16 d, int8 q[32]
};
template <>
struct QuantBlock<DType::q4_0> {
    static constexpr int kBytes = 18, kQs = 2, kAlign = 2;  // f16 d, uint8 qs[16]
};
template <>
struct QuantBlock<DType::q4_1> {
    static constexpr int kBytes = 20, kQs = 4, kAlign = 4;  // f16 d, f16 m, uint8 qs[16]
};

__device__ __forceinline__ float f16_bits_to_f32(uint32_t bits) {
    return __half2float(__ushort_as_half((unsigned short)(bits & 0xffffu)));
}

// Element j (0..31) of a block, rounded exactly as dequantize_block (src/format/dtype.cpp) rounds it: the
// _rn intrinsics keep the compiler from fusing q4_1's d * nibble + m into one multiply-add.
template <DType Q>
__device__ __forceinline__ float dequant_element(const uint8_t* block, int j) {
    const uint16_t* half = reinterpret_cast<const uint16_t*>(block);
    const float d = f16_bits_to_f32(half[0]);
    if constexpr (Q == DType::q8_0) {
        return __fmul_rn(float(int8_t(block[QuantBlock<Q>::kQs + j])), d);
    } else {
        const uint8_t byte = block[QuantBlock<Q>::kQs + (j & 15)];
        const int nibble = j < 16 ? byte & 0x0f : byte >> 4;
        if constexpr (Q == DType::q4_0)
            return __fmul_rn(float(nibble - 8), d);
        else
            return __fadd_rn(__fmul_rn(float(nibble), d), f16_bits_to_f32(half[1]));
    }
}

// Calls the body with Q the quantized DType `dtype` as a compile-time constant (a host-side switch).
#define KVLM_DISPATCH_QUANT(dtype, Q, ...)                         \
    do {                                                           \
        switch (dtype) {                                           \
            case ::kvlm::DType::q8_0: {                            \
                constexpr ::kvlm::DType Q = ::kvlm::DType::q8_0;   \
                __VA_ARGS__;                                       \
                break;                                             \
            }                                                      \
            case ::kvlm::DType::q4_0: {                            \
                constexpr ::kvlm::DType Q = ::kvlm::DType::q4_0;   \
                __VA_ARGS__;                                       \
                break;                                             \
            }                                                      \
            case ::kvlm::DType::q4_1: {                            \
                constexpr ::kvlm::DType Q = ::kvlm::DType::q4_1;   \
                __VA_ARGS__;                                       \
                break;                                             \
            }                                                      \
            default:                                               \
                ::kvlm::cuda_throw("cuda: not a quantized dtype"); \
        }                                                          \
    } while (0)

}  // namespace kvlm
