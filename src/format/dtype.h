// Element types of tensors and KV caches, and scalar conversions between them.
// Enum values are stored in .kvlm files: never renumber, only append.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace kvlm {

enum class DType : uint32_t { f32 = 0, f16 = 1, bf16 = 2 };  // q8_0 = 3 reserved for later

size_t dtype_size(DType dtype);              // bytes per element
const char* dtype_name(DType dtype);         // "f32", "f16", "bf16"
bool dtype_from_name(const std::string& name, DType* out);  // false if unknown
bool dtype_is_known(uint32_t raw);           // for validating file contents

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

// Convert n elements of src (dtype from) into dst f32.
void convert_to_f32(DType from, const void* src, float* dst, size_t n);
// Convert n f32 elements into dst of dtype to.
void convert_from_f32(DType to, const float* src, void* dst, size_t n);

}  // namespace kvlm
