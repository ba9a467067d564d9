// Scalar dtype conversions (f16 by bit manipulation so results do not depend on the CPU's F16C).
#include "format/dtype.h"

#include <algorithm>
#include <cmath>

#include "format/quant_blocks.h"
#include "format/quantize_blocks.h"
#include "util/error.h"

namespace kvlm {

bool dtype_is_quantized(DType dtype) { return dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16; }

int64_t dtype_block_elements(DType dtype) {
    switch (dtype) {
        case DType::f32:
        case DType::f16:
        case DType::bf16: return 1;
        case DType::q2_k:
        case DType::q3_k:
        case DType::q4_k:
        case DType::q5_k:
        case DType::q6_k:
        case DType::iq4_xs: return kSuperBlock;
        default: return kQuantBlock;
    }
}

size_t dtype_block_bytes(DType dtype) {
    switch (dtype) {
        case DType::f32: return 4;
        case DType::f16: return 2;
        case DType::bf16: return 2;
        case DType::q8_0: return 34;
        case DType::q4_0: return 18;
        case DType::q4_1: return 20;
        case DType::q5_0: return 22;
        case DType::q5_1: return 24;
        case DType::q2_k: return 84;
        case DType::q3_k: return 110;
        case DType::q4_k: return 144;
        case DType::q5_k: return 176;
        case DType::q6_k: return 210;
        case DType::iq4_nl: return 18;
        case DType::iq4_xs: return 136;
    }
    KVLM_ASSERT(false, "unknown dtype");
    return 0;
}

uint64_t dtype_bytes(DType dtype, uint64_t n) {
    uint64_t block = uint64_t(dtype_block_elements(dtype));
    KVLM_ASSERT(n % block == 0, "dtype_bytes: element count is not a whole number of blocks");
    return n / block * dtype_block_bytes(dtype);
}

bool kv_dtype_is_supported(DType dtype) {
    return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16 || dtype == DType::q8_0;
}

size_t dtype_size(DType dtype) {
    KVLM_ASSERT(!dtype_is_quantized(dtype), "dtype_size of a block-quantized type");
    return dtype_block_bytes(dtype);
}

const char* dtype_name(DType dtype) {
    switch (dtype) {
        case DType::f32: return "f32";
        case DType::f16: return "f16";
        case DType::bf16: return "bf16";
        case DType::q8_0: return "q8_0";
        case DType::q4_0: return "q4_0";
        case DType::q4_1: return "q4_1";
        case DType::q5_0: return "q5_0";
        case DType::q5_1: return "q5_1";
        case DType::q2_k: return "q2_k";
        case DType::q3_k: return "q3_k";
        case DType::q4_k: return "q4_k";
        case DType::q5_k: return "q5_k";
        case DType::q6_k: return "q6_k";
        case DType::iq4_nl: return "iq4_nl";
        case DType::iq4_xs: return "iq4_xs";
    }
    return "unknown";
}

bool dtype_from_name(const std::string& name, DType* out) {
    for (uint32_t raw = 0; dtype_is_known(raw); raw++)
        if (name == dtype_name(DType(raw))) {
            *out = DType(raw);
            return true;
        }
    return false;
}

bool dtype_is_known(uint32_t raw) { return raw <= uint32_t(DType::iq4_xs); }

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

namespace {

uint16_t load_u16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return h;
}
void store_u16(uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); }

}  // namespace

// Sources may be unaligned (safetensors and GGUF data start at arbitrary offsets): load through memcpy.
void convert_to_f32(DType from, const void* src, float* dst, size_t n) {
    const auto* bytes = static_cast<const uint8_t*>(src);
    switch (from) {
        case DType::f32: std::memcpy(dst, src, n * 4); return;
        case DType::f16:
            for (size_t i = 0; i < n; i++) dst[i] = f16_to_f32(load_u16(bytes + 2 * i));
            return;
        case DType::bf16:
            for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(load_u16(bytes + 2 * i));
            return;
        default:
            dequantize_blocks(from, src, dst, int64_t(n));
            return;
    }
}

void convert_from_f32(DType to, const float* src, void* dst, size_t n) {
    auto* bytes = static_cast<uint8_t*>(dst);
    switch (to) {
        case DType::f32: std::memcpy(dst, src, n * 4); return;
        case DType::f16:
            for (size_t i = 0; i < n; i++) store_u16(bytes + 2 * i, f32_to_f16(src[i]));
            return;
        case DType::bf16:
            for (size_t i = 0; i < n; i++) store_u16(bytes + 2 * i, f32_to_bf16(src[i]));
            return;
        default: quantize_blocks(to, src, dst, int64_t(n)); return;
    }
}

}  // namespace kvlm
