// Element types of tensors and KV caches, and scalar conversions between them.
// Enum values are stored in .kvlm files: never renumber, only append.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace kvlm {

// The quantized types are GGUF's block layouts, byte for byte (so GGUF blocks are copied as they are); a row
// is a whole number of blocks. 32-element blocks:
//   q8_0 (34 bytes): f16 d, int8 q[32];                  x[j] = d * q[j]
//   q4_0 (18 bytes): f16 d, uint8 qs[16];                x[j] = d * (nibble(j) - 8)
//   q4_1 (20 bytes): f16 d, f16 m, uint8 qs[16];         x[j] = d * nibble(j) + m
// where nibble(j) is the low 4 bits of qs[j] for j < 16 and the high 4 bits of qs[j - 16] for j >= 16; q5_0,
// q5_1 and iq4_nl, and the 256-element k-quants (q2_k .. q6_k) and iq4_xs: format/quant_blocks.h and
// docs/FORMAT.md give their layouts.
enum class DType : uint32_t {
    f32 = 0,
    f16 = 1,
    bf16 = 2,
    q8_0 = 3,
    q4_0 = 4,
    q4_1 = 5,
    q5_0 = 6,
    q5_1 = 7,
    q2_k = 8,
    q3_k = 9,
    q4_k = 10,
    q5_k = 11,
    q6_k = 12,
    iq4_nl = 13,
    iq4_xs = 14,
};

constexpr int64_t kQuantBlock = 32;      // elements per block of q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl; and a chunk
constexpr int64_t kSuperBlock = 256;     // elements per block of the k-quants and iq4_xs

bool dtype_is_quantized(DType dtype);
int64_t dtype_block_elements(DType dtype);   // 1, kQuantBlock or kSuperBlock
size_t dtype_block_bytes(DType dtype);       // bytes per block (per element for f32/f16/bf16)
// Bytes of n elements; n must be a multiple of dtype_block_elements (checked by the callers that parse shapes).
uint64_t dtype_bytes(DType dtype, uint64_t n);
size_t dtype_size(DType dtype);              // bytes per element of f32/f16/bf16 (not defined for quantized types)
const char* dtype_name(DType dtype);         // "f32", "f16", "bf16", "q8_0", "q4_0", ..., "q4_k", "iq4_xs"
bool dtype_from_name(const std::string& name, DType* out);  // false if unknown
bool dtype_is_known(uint32_t raw);           // for validating file contents
// The element types a KV cache may have: f32, f16, bf16 and q8_0 (per-head rows of whole 32-element blocks).
bool kv_dtype_is_supported(DType dtype);

inline float bf16_to_f32(uint16_t h) {
    uint32_t bits = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}
inline uint16_t f32_to_bf16(float f) {  // round to nearest even; NaN stays NaN
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return uint16_t(bits >> 16);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);  // round to nearest even, overflow to inf

// Convert n elements of src (dtype from) into dst f32 (dequantize: n a multiple of the type's block).
void convert_to_f32(DType from, const void* src, float* dst, size_t n);
// Convert n f32 elements into dst of dtype to (quantize: n a multiple of the type's block; format/quantize_blocks.h).
void convert_from_f32(DType to, const float* src, void* dst, size_t n);

}  // namespace kvlm
