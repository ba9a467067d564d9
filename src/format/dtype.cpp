// Scalar dtype conversions (f16 by bit manipulation so results do not depend on the CPU's F16C).
#include "format/dtype.h"

#include "util/error.h"

namespace kvlm {

size_t dtype_size(DType dtype) {
    switch (dtype) {
        case DType::f32: return 4;
        case DType::f16: return 2;
        case DType::bf16: return 2;
    }
    KVLM_ASSERT(false, "unknown dtype");
    return 0;
}

const char* dtype_name(DType dtype) {
    switch (dtype) {
        case DType::f32: return "f32";
        case DType::f16: return "f16";
        case DType::bf16: return "bf16";
    }
    return "unknown";
}

bool dtype_from_name(const std::string& name, DType* out) {
    if (name == "f32") *out = DType::f32;
    else if (name == "f16") *out = DType::f16;
    else if (name == "bf16") *out = DType::bf16;
    else return false;
    return true;
}

bool dtype_is_known(uint32_t raw) { return raw <= uint32_t(DType::bf16); }

float f16_to_f32(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exponent = (h >> 10) & 0x1fu;
    uint32_t mantissa = h & 0x3ffu;
    uint32_t bits;
    if (exponent == 0) {
        if (mantissa == 0) {
            bits = sign;
        } else {  // subnormal: normalize
            exponent = 127 - 15 + 1;
            while ((mantissa & 0x400u) == 0) {
                mantissa <<= 1;
                exponent--;
            }
            mantissa &= 0x3ffu;
            bits = sign | (exponent << 23) | (mantissa << 13);
        }
    } else if (exponent == 31) {
        bits = sign | 0x7f800000u | (mantissa << 13);
    } else {
        bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

uint16_t f32_to_f16(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    uint32_t sign = (bits >> 16) & 0x8000u;
    uint32_t abs_bits = bits & 0x7fffffffu;
    if (abs_bits > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
    if (abs_bits >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow (rounds to >= 65520) -> inf
    if (abs_bits < 0x38800000u) {  // subnormal or zero in f16
        if (abs_bits < 0x33000000u) return uint16_t(sign);  // < half the smallest subnormal
        // f16 subnormal = value / 2^-24 = mantissa * 2^(exponent - 126), rounded to nearest even
        uint32_t exponent = abs_bits >> 23;
        uint32_t mantissa = (abs_bits & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - exponent;  // 14..24 here
        uint32_t result = mantissa >> shift;
        uint32_t remainder = mantissa & ((1u << shift) - 1);
        uint32_t halfway = 1u << (shift - 1);
        if (remainder > halfway || (remainder == halfway && (result & 1u))) result++;
        return uint16_t(sign | result);
    }
    uint32_t rounded = abs_bits + 0xfffu + ((abs_bits >> 13) & 1u);
    uint32_t exponent = (rounded >> 23) - 127 + 15;
    uint32_t mantissa = (rounded >> 13) & 0x3ffu;
    return uint16_t(sign | (exponent << 10) | mantissa);
}

// Sources may be unaligned (safetensors and GGUF data start at arbitrary offsets): load through memcpy.
void convert_to_f32(DType from, const void* src, float* dst, size_t n) {
    const auto* bytes = static_cast<const uint8_t*>(src);
    switch (from) {
        case DType::f32: std::memcpy(dst, src, n * 4); return;
        case DType::f16:
            for (size_t i = 0; i < n; i++) {
                uint16_t h;
                std::memcpy(&h, bytes + 2 * i, 2);
                dst[i] = f16_to_f32(h);
            }
            return;
        case DType::bf16:
            for (size_t i = 0; i < n; i++) {
                uint16_t h;
                std::memcpy(&h, bytes + 2 * i, 2);
                dst[i] = bf16_to_f32(h);
            }
            return;
    }
}

void convert_from_f32(DType to, const float* src, void* dst, size_t n) {
    auto* bytes = static_cast<uint8_t*>(dst);
    switch (to) {
        case DType::f32: std::memcpy(dst, src, n * 4); return;
        case DType::f16:
            for (size_t i = 0; i < n; i++) {
                uint16_t h = f32_to_f16(src[i]);
                std::memcpy(bytes + 2 * i, &h, 2);
            }
            return;
        case DType::bf16:
            for (size_t i = 0; i < n; i++) {
                uint16_t h = f32_to_bf16(src[i]);
                std::memcpy(bytes + 2 * i, &h, 2);
            }
            return;
    }
}

}  // namespace kvlm
