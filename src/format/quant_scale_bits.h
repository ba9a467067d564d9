// The packed sub-block scales of q4_k/q5_k, q3_k and iq4_xs, unpacked: shared by format/quant_blocks.cpp, the
// CPU kernels and the CUDA kernels. `s` is anything indexable by byte: a pointer into the block on the CPU,
// or a few 32-bit words already loaded into registers in the CUDA GEMVs (cuda/kernels/gemv_quarters.cuh).
// Static (internal linkage) on purpose: a kernel translation unit compiled with AVX-512 flags gets its own
// copy, never one the linker could hand to code running on a CPU without those instructions
// (compute/cpu_kernels.h).
#pragma once
#include <cstdint>

#ifdef __CUDACC__
#define KVLM_HOST_DEVICE __host__ __device__
#else
#define KVLM_HOST_DEVICE
#endif

namespace kvlm {

// q4_k / q5_k: the 6-bit scale and min of sub-block i (of 8) from the 12 packed bytes.
template <class Bytes>
KVLM_HOST_DEVICE static inline void k4_scale_min(const Bytes& s, int i, int* scale, int* min) {
    if (i < 4) {
        *scale = s[i] & 63;
        *min = s[i + 4] & 63;
    } else {
        *scale = (s[i + 4] & 0x0f) | ((s[i - 4] >> 6) << 4);
        *min = (s[i + 4] >> 4) | ((s[i] >> 6) << 4);
    }
}

// q3_k: the 6-bit scale of sub-block i (of 16), less 32, from the 12 packed bytes.
template <class Bytes>
KVLM_HOST_DEVICE static inline int k3_scale(const Bytes& s, int i) {
    const int low = i < 8 ? s[i] & 0x0f : s[i - 8] >> 4;
    const int high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
    return (low | (high << 4)) - 32;
}

// iq4_xs: the 6-bit scale of sub-block i (of 8), less 32, from scales_h (bytes 2-3) and scales_l (4-7) of the
// block.
template <class Bytes>
KVLM_HOST_DEVICE static inline int iq4_xs_scale(const Bytes& block, int i) {
    const int scales_h = block[2] | (block[3] << 8);
    return (((block[4 + i / 2] >> (4 * (i % 2))) & 0x0f) | (((scales_h >> (2 * i)) & 3) << 4)) - 32;
}

}  // namespace kvlm
