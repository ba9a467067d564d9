// Device-side access to KV-cache rows of every KV dtype: f32, f16 and bf16 elements (dtype_cuda.cuh), and
// q8_0 (GGUF's 34-byte blocks of 32: f16 d, int8 q[32]; see src/format/dtype.h). KV offsets count elements
// (KvLayout); a q8_0 element e lives in block e / 32, so its address is not kv + e: every read and write of a
// KV row goes through load_kv / the stores here, which know the difference.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "compute/cpu_ops.h"
#include "kernels/dtype_cuda.cuh"
#include "kernels/quant_cuda.cuh"

namespace kvlm {

// Element offset of position pos's K (kind 0) or V (kind 1) row of `layer` in the pool: kv_write_kernel's
// arithmetic (KvLayout::row_byte_offset is host-only, and CUDA pools are unpadded).
__device__ __forceinline__ int64_t pool_row(const KvLayout& layout, int32_t layer, int32_t kind,
                                            const int32_t* block_table, int32_t pos) {
    const int64_t row = int64_t(layout.n_kv_heads) * layout.head_dim;
    const int64_t block_elements = int64_t(layout.n_layers) * 2 * layout.block_size * row;
    return int64_t(block_table[pos / layout.block_size]) * block_elements +
           ((int64_t(layer) * 2 + kind) * layout.block_size + pos % layout.block_size) * row;
}

// The element type of a q8_0 cache, for templates over the cache type: a byte of a block record.
struct KvQ8 {
    uint8_t byte;
};

template <typename T>
constexpr bool kIsQ8Kv = sizeof(T) == 1;

// Element e (counted from kv, which is a pool or row start on a block boundary) as f32. q8_0: d * q, a
// product exact in f32 (the value the CPU's attention reads).
template <typename T>
__device__ __forceinline__ float load_kv(const T* kv, int64_t e) {
    if constexpr (kIsQ8Kv<T>) {
        const uint8_t* block = reinterpret_cast<const uint8_t*>(kv) + (e >> 5) * QuantBlock<DType::q8_0>::kBytes;
        return dequant_element<DType::q8_0>(block, int(e & 31));
    } else {
        return load_f32(kv, e);
    }
}

// Byte address of element e (a multiple of 32 for q8_0) of a cache of T.
template <typename T>
__device__ __forceinline__ T* kv_at(T* kv, int64_t e) {
    if constexpr (kIsQ8Kv<T>) return kv + (e >> 5) * QuantBlock<DType::q8_0>::kBytes;
    else return kv + e;
}

// Quantizes src[0..32) into one q8_0 block at dst (2-byte aligned) with the CPU's arithmetic
// (convert_from_f32: d = amax / 127, q = round(x / d) half away from zero, d stored as f16 rounded to nearest
// even), so a block written on the GPU has the bytes the CPU would write.
__device__ __forceinline__ void store_q8_0_block(KvQ8* dst, const float* src) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(src[j]));
    const float d = __fdiv_rn(amax, 127.0f);
    const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
    *reinterpret_cast<unsigned short*>(dst) = __half_as_ushort(__float2half_rn(d));
    for (int j = 0; j < 32; j++) dst[2 + j].byte = uint8_t(int8_t(roundf(__fmul_rn(src[j], id))));
}

}  // namespace kvlm

// Calls the body with T the device element type of a KV cache of `dtype` (KvQ8 for q8_0).
#define KVLM_DISPATCH_KV_DTYPE(dtype, T, ...)                                                       \
    do {                                                                                            \
        if ((dtype) == ::kvlm::DType::q8_0) {                                                       \
            using T = ::kvlm::KvQ8;                                                                 \
            __VA_ARGS__;                                                                            \
        } else {                                                                                    \
            KVLM_DISPATCH_DTYPE(dtype, T, __VA_ARGS__);                                             \
        }                                                                                           \
    } while (0)
