// __nv_bfloat16 for the emulated build: bf16 is the top half of an f32; conversions from f32 round to
// nearest even (as __float2bfloat16_rn and src/dtype.cpp), written independently of src/dtype.cpp.
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
    const float a = std::fabs(f);
    if (a == 0.0f || std::isinf(a)) return uint16_t(to_bits(f) >> 16);
    // Keep 8 significant bits: the sum a + c rounds (RNE) exactly at bf16's last bit, where c = 2^(e+16)
    // makes the f32 ulp of the sum equal bf16's ulp of a, except below the normal range, handled by
    // scaling (bf16 subnormals share f32's exponent range, so truncating there is the same rounding).
    int e;
    std::frexp(a, &e);  // a in [2^(e-1), 2^e)
    const double ulp = std::ldexp(1.0, std::max(e - 8, -133));  // bf16 spacing at a (subnormals: 2^-133)
    const double rounded = std::nearbyint(double(a) / ulp) * ulp;  // exact in double, RNE
    const uint32_t sign = uint32_t(to_bits(f) >> 16) & 0x8000u;
    if (rounded >= 3.3961775292304611e38) return uint16_t(sign | 0x7f80u);  // past bf16's largest finite
    return uint16_t(sign | (uint32_t(to_bits(float(rounded))) >> 16));
}
}  // namespace kvlm_emu

inline float __bfloat162float(__nv_bfloat16 h) { return kvlm_emu::bfloat16_bits_to_float(h.x); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {kvlm_emu::float_to_bfloat16_bits(f)}; }
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return {u}; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return {__bfloat162float(h.x), __bfloat162float(h.y)}; }
