// __nv_bfloat16 for the emulated build: bf16 is the top half of an f32; conversions from f32 round to
// nearest even, as __float2bfloat16_rn and src/format/dtype.cpp do (checked against it by tools/cuda_emu/test_emu.cpp).
#pragma once
#include "cuda_runtime.h"

struct __nv_bfloat16 {
    uint16_t x;
};
struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};

namespace kvlm_emu {
inline float bfloat16_bits_to_float(uint16_t h) { return from_bits<float>(uint64_t(h) << 16); }
inline uint16_t float_to_bfloat16_bits(float f) {
    if (std::isnan(f)) return uint16_t(((to_bits(f) >> 16) & 0x8000u) | 0x7fc0u);
    // Round the low 16 bits away, to nearest even; a carry into the exponent (up to inf) is correct.
    const uint32_t bits = uint32_t(to_bits(f));
    return uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}
}  // namespace kvlm_emu

inline float __bfloat162float(__nv_bfloat16 h) { return kvlm_emu::bfloat16_bits_to_float(h.x); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {kvlm_emu::float_to_bfloat16_bits(f)}; }
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return {u}; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return {__bfloat162float(h.x), __bfloat162float(h.y)}; }
