// Block layouts of the quantized types, read as QuantChunks (docs/FORMAT.md lists the same layouts).
#include "format/quant_blocks.h"

#include <cstring>

#include "format/quant_scale_bits.h"
#include "util/error.h"

namespace kvlm {

const int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

namespace {

float f16_at(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return f16_to_f32(h);
}

// 32 low (high) nibbles of bytes qs[0 .. 15] then their high (low) ones: the 32-element blocks' order.
void split_nibbles16(const uint8_t* qs, int16_t* w) {
    for (int j = 0; j < 16; j++) {
        w[j] = int16_t(qs[j] & 0x0f);
        w[j + 16] = int16_t(qs[j] >> 4);
    }
}

void one_scale(QuantChunk* out, float scale, float min) {
    out->scale[0] = out->scale[1] = scale;
    out->min[0] = out->min[1] = min;
}

}  // namespace

bool quant_scale_per_16(DType dtype) { return dtype == DType::q2_k || dtype == DType::q3_k || dtype == DType::q6_k; }

bool quant_has_min(DType dtype) {
    return dtype == DType::q4_1 || dtype == DType::q5_1 || dtype == DType::q2_k || dtype == DType::q4_k ||
           dtype == DType::q5_k;
}

void decode_quant_chunk(DType dtype, const uint8_t* b, int c, QuantChunk* out) {
    switch (dtype) {
        case DType::q8_0:
            for (int j = 0; j < 32; j++) out->w[j] = int8_t(b[2 + j]);
            one_scale(out, f16_at(b), 0.0f);
            return;
        case DType::q4_0:
            split_nibbles16(b + 2, out->w);
            for (int j = 0; j < 32; j++) out->w[j] = int16_t(out->w[j] - 8);
            one_scale(out, f16_at(b), 0.0f);
            return;
        case DType::q4_1:
            split_nibbles16(b + 4, out->w);
            one_scale(out, f16_at(b), f16_at(b + 2));
            return;
        case DType::q5_0:
        case DType::q5_1: {  // f16 d, [f16 m], u32 qh (bit j: element j's fifth bit), qs[16]
            const bool has_m = dtype == DType::q5_1;
            const uint8_t* qh = b + (has_m ? 4 : 2);
            uint32_t high;
            std::memcpy(&high, qh, 4);
            split_nibbles16(qh + 4, out->w);
            for (int j = 0; j < 32; j++) out->w[j] = int16_t((out->w[j] | ((high >> j & 1) << 4)) - (has_m ? 0 : 16));
            one_scale(out, f16_at(b), has_m ? f16_at(b + 2) : 0.0f);
            return;
        }
        case DType::iq4_nl:  // f16 d, qs[16]: element j is d * kIq4Values[nibble(j)]
            split_nibbles16(b + 2, out->w);
            for (int j = 0; j < 32; j++) out->w[j] = kIq4Values[out->w[j]];
            one_scale(out, f16_at(b), 0.0f);
            return;
        case DType::iq4_xs:  // f16 d, u16 scales_h, scales_l[4], qs[128]: 8 sub-blocks of 32, 6-bit scales - 32
            split_nibbles16(b + 8 + 16 * c, out->w);
            for (int j = 0; j < 32; j++) out->w[j] = kIq4Values[out->w[j]];
            one_scale(out, f16_at(b) * float(iq4_xs_scale(b, c)), 0.0f);
            return;
        case DType::q4_k:
        case DType::q5_k: {  // f16 d, f16 dmin, scales[12], [qh[32]], qs[128]: 8 sub-blocks of 32
            const bool five = dtype == DType::q5_k;
            const uint8_t* qs = b + (five ? 48 : 16) + 32 * (c / 2);
            for (int l = 0; l < 32; l++) {
                int q = c % 2 ? qs[l] >> 4 : qs[l] & 0x0f;
                if (five) q |= ((b[16 + l] >> c) & 1) << 4;
                out->w[l] = int16_t(q);
            }
            int scale, min;
            k4_scale_min(b + 4, c, &scale, &min);
            one_scale(out, f16_at(b) * float(scale), -(f16_at(b + 2) * float(min)));
            return;
        }
        case DType::q6_k: {  // ql[128], qh[64], int8 scales[16], f16 d: 16 sub-blocks of 16, q - 32
            const int group = c / 4, k = c % 4;
            const uint8_t* ql = b + 64 * group + 32 * (k % 2);
            const uint8_t* qh = b + 128 + 32 * group;
            for (int l = 0; l < 32; l++) {
                const int low = k < 2 ? ql[l] & 0x0f : ql[l] >> 4;
                out->w[l] = int16_t((low | (((qh[l] >> (2 * k)) & 3) << 4)) - 32);
            }
            const float d = f16_at(b + 208);
            for (int h = 0; h < 2; h++) {
                out->scale[h] = d * float(int8_t(b[192 + 2 * c + h]));
                out->min[h] = 0.0f;
            }
            return;
        }
        case DType::q3_k: {  // hmask[32], qs[64], scales[12], f16 d: 16 sub-blocks of 16, q - 4 where hmask is 0
            const uint8_t* qs = b + 32 + 32 * (c / 4);
            for (int l = 0; l < 32; l++) {
                const int low = (qs[l] >> (2 * (c % 4))) & 3;
                out->w[l] = int16_t(low - ((b[l] >> c) & 1 ? 0 : 4));
            }
            const float d = f16_at(b + 108);
            for (int h = 0; h < 2; h++) {
                out->scale[h] = d * float(k3_scale(b + 96, 2 * c + h));
                out->min[h] = 0.0f;
            }
            return;
        }
        case DType::q2_k: {  // scales[16] (low 4 bits scale, high 4 min), qs[64], f16 d, f16 dmin: sub-blocks of 16
            const uint8_t* qs = b + 16 + 32 * (c / 4);
            for (int l = 0; l < 32; l++) out->w[l] = int16_t((qs[l] >> (2 * (c % 4))) & 3);
            const float d = f16_at(b + 80), dmin = f16_at(b + 82);
            for (int h = 0; h < 2; h++) {
                const uint8_t s = b[2 * c + h];
                out->scale[h] = d * float(s & 0x0f);
                out->min[h] = -(dmin * float(s >> 4));
            }
            return;
        }
        case DType::f32:
        case DType::f16:
        case DType::bf16:
            break;
    }
    KVLM_ASSERT(false, "decode_quant_chunk of an unquantized type");
}

void dequantize_blocks(DType dtype, const void* src, float* dst, int64_t n) {
    const int64_t block_elements = dtype_block_elements(dtype);
    KVLM_ASSERT(n % block_elements == 0, "dequantize_blocks: not a whole number of blocks");
    const size_t block_bytes = dtype_block_bytes(dtype);
    const auto* bytes = static_cast<const uint8_t*>(src);
    const bool has_min = quant_has_min(dtype);
    QuantChunk chunk;
    for (int64_t b = 0; b < n / block_elements; b++)
        for (int c = 0; c < block_elements / 32; c++) {
            decode_quant_chunk(dtype, bytes + size_t(b) * block_bytes, c, &chunk);
            float* out = dst + b * block_elements + c * 32;
            // The product is exact, so the one rounding is the add of the min (d * q + m); types without one
            // add nothing (a -0.0 product stays -0.0, as ggml's d * q leaves it).
            for (int j = 0; j < 32; j++) {
                const float product = chunk.scale[j / 16] * float(chunk.w[j]);
                out[j] = has_min ? product + chunk.min[j / 16] : product;
            }
        }
}

}  // namespace kvlm
