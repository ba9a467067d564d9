// __half for the emulated build: conversions round to nearest even, as the hardware's __float2half_rn and
// src/format/dtype.cpp do (own code, checked against src/format/dtype.cpp by tools/cuda_emu/test_emu.cpp).
#pragma once
#include "cuda_runtime.h"

struct __half {
    uint16_t x;
};
struct __half2 {
    __half x, y;
};

namespace kvlm_emu {
inline float half_bits_to_float(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
    if (exponent == 0) return from_bits<float>(to_bits(float(mantissa) * 5.9604644775390625e-08f) | sign);  // 2^-24
    if (exponent == 31) return from_bits<float>(sign | 0x7f800000u | (mantissa << 13));
    return from_bits<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));  // rebias 15 -> 127
}
inline uint16_t float_to_half_bits(float f) {
    const uint32_t bits = uint32_t(to_bits(f)), sign = (bits >> 16) & 0x8000u, abs_bits = bits & 0x7fffffffu;
    if (abs_bits > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
    const float a = std::fabs(f);
    if (a >= 65520.0f) return uint16_t(sign | 0x7c00u);           // rounds past the largest f16 (65504)
    if (a < 6.103515625e-05f)                                       // below 2^-14: subnormal, units of 2^-24
        return uint16_t(sign | uint32_t(std::nearbyint(a * 16777216.0f)));  // exact scaling, RNE (default mode)
    // Normal: rebias the exponent, then round the 23-bit mantissa to 10 bits, to nearest even (a carry
    // into the exponent is the correct result).
    const uint32_t rebiased = abs_bits - (112u << 23);
    return uint16_t(sign | ((rebiased + 0xfffu + ((rebiased >> 13) & 1u)) >> 13));
}
}  // namespace kvlm_emu

inline float __half2float(__half h) { return kvlm_emu::half_bits_to_float(h.x); }
inline __half __float2half_rn(float f) { return {kvlm_emu::float_to_half_bits(f)}; }
inline __half __float2half(float f) { return __float2half_rn(f); }
inline __half __ushort_as_half(unsigned short u) { return {u}; }
inline unsigned short __half_as_ushort(__half h) { return h.x; }
inline __half2 __halves2half2(__half a, __half b) { return {a, b}; }
inline float2 __half22float2(__half2 h) { return {__half2float(h.x), __half2float(h.y)}; }
inline __half2 __float22half2_rn(float2 f) { return {__float2half_rn(f.x), __float2half_rn(f.y)}; }
inline __half __low2half(__half2 h) { return h.x; }
inline __half __high2half(__half2 h) { return h.y; }
