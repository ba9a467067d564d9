// The packed sub-block scales of q4_k/q5_k and q3_k, unpacked: shared by format/quant_blocks.cpp and the CPU
// kernels. Static (internal linkage) on purpose: a kernel translation unit compiled with AVX-512 flags gets
// its own copy, never one the linker could hand to code running on a CPU without those instructions
// (compute/cpu_kernels.h).
#pragma once
#include <cstdint>

namespace kvlm {

// q4_k / q5_k: the 6-bit scale and min of sub-block i (of 8) from the 12 packed bytes.
static inline void k4_scale_min(const uint8_t* s, int i, int* scale, int* min) {
    if (i < 4) {
        *scale = s[i] & 63;
        *min = s[i + 4] & 63;
    } else {
        *scale = (s[i + 4] & 0x0f) | ((s[i - 4] >> 6) << 4);
        *min = (s[i + 4] >> 4) | ((s[i] >> 6) << 4);
    }
}

// q3_k: the 6-bit scale of sub-block i (of 16), less 32.
static inline int k3_scale(const uint8_t* s, int i) {
    const int low = i < 8 ? s[i] & 0x0f : s[i - 8] >> 4;
    const int high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
    return (low | (high << 4)) - 32;
}

// iq4_xs: the 6-bit scale of sub-block i (of 8), less 32, from scales_h (bytes 2-3) and scales_l (4-7).
static inline int iq4_xs_scale(const uint8_t* block, int i) {
    const int scales_h = block[2] | (block[3] << 8);
    return (((block[4 + i / 2] >> (4 * (i % 2))) & 0x0f) | (((scales_h >> (2 * i)) & 3) << 4)) - 32;
}

}  // namespace kvlm
