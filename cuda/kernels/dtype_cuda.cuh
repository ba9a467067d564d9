// Device-side element loads and stores for the DTypes (f32, f16, bf16) of weights and the KV cache.
// Conversions round to nearest even, as convert_from_f32 does on the CPU.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "format/dtype.h"
#include "util/error.h"

namespace kvlm {

__device__ __forceinline__ float load_f32(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load_f32(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ float load_f32(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }

__device__ __forceinline__ void store_f32(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store_f32(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }
__device__ __forceinline__ void store_f32(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

// A 16-byte load of data read once, not allocated in L1 (which stays for what is reused). kWrittenBefore:
// data a prior kernel may have written (K/V rows in paged_attention.cu) takes the coherent path; the
// non-coherent read-only path (weights in gemv.cu) is only for memory no kernel writes while this one may
// run, and with programmatic launches (programmatic_launch.cuh) the prior kernel may still be running. p must
// be 16-byte aligned. The emulator (which rewrites inline PTX only in .cu files) gets its twin of the load.
template <bool kWrittenBefore = false>
__device__ __forceinline__ uint4 load_streaming16(const uint4* p) {
    uint4 v;
#ifdef KVLM_CUDA_EMU
    ::kvlm_emu::ptx_ld_global_nc_v4_u32(v.x, v.y, v.z, v.w, p);
#else
    if constexpr (kWrittenBefore)
        asm volatile("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(p));
    else
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(p));
#endif
    return v;
}

}  // namespace kvlm

// Calls F<T>(args...) with T the device type of `dtype` (a host-side switch over the three DTypes).
#define KVLM_DISPATCH_DTYPE(dtype, T, ...)                           \
    do {                                                             \
        switch (dtype) {                                             \
        case ::kvlm::DType::f32: { using T = float; __VA_ARGS__; break; }          \
        case ::kvlm::DType::f16: { using T = __half; __VA_ARGS__; break; }         \
        case ::kvlm::DType::bf16: { using T = __nv_bfloat16; __VA_ARGS__; break; } \
        default: /* quantized types are refused when the backend is created */     \
            ::kvlm::throw_error("cuda: no kernel for {} data", ::kvlm::dtype_name(dtype)); \
        }                                                            \
    } while (0)
