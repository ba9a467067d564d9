// Quantizers for every block type. The layouts are format/quant_blocks.cpp's (docs/FORMAT.md); this file
// writes what that one reads, and tests/format/test_quantize_blocks.cpp checks each against it.
#include "format/quantize_blocks.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cmath>
#include <cstring>

#include "format/quant_blocks.h"
#include "util/error.h"

namespace kvlm {

namespace {

void store_u16(uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); }
void store_f16(uint8_t* p, float v) { store_u16(p, f32_to_f16(v)); }
float f16_rounded(float v) { return f16_to_f32(f32_to_f16(v)); }

int round_clamped(float v, int lo, int hi) {
    if (!(v > float(lo))) return lo;  // NaN included: a code, never undefined behaviour
    if (v >= float(hi)) return hi;
    return int(std::lrintf(v));
}

// Element with the largest magnitude, with its sign (the first one on ties).
float signed_max(const float* x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < n; i++)
        if (std::fabs(x[i]) > amax) {
            amax = std::fabs(x[i]);
            max = x[i];
        }
    return max;
}

// Writes 32 4-bit codes as the 32-element blocks store them: element j in the low nibble of byte j, element
// j + 16 in the high one.
void pack_nibbles32(const uint8_t* code, uint8_t* qs) {
    for (int j = 0; j < 16; j++) qs[j] = uint8_t((code[j] & 15) | ((code[j + 16] & 15) << 4));
}

// ---- The reference quantizers (round to nearest), 32-element blocks ----

void quantize_q8_0(const float* x, uint8_t* b) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(b, d);
    for (int j = 0; j < 32; j++) b[2 + j] = uint8_t(int8_t(std::round(x[j] * id)));
}

// q4_0 / q5_0: d = max / -2^(bits-1), the largest element at the lowest code; codes offset by 2^(bits-1).
void quantize_symmetric_ref(const float* x, int bits, uint8_t* code, float* d_out) {
    const float max = signed_max(x, 32);
    const int half = 1 << (bits - 1);
    const float d = max / float(-half), id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; j++) code[j] = uint8_t(std::min(2 * half - 1, int(x[j] * id + float(half) + 0.5f)));
    *d_out = d;
}

// q4_1 / q5_1: d = (max - min) / (2^bits - 1), min stored.
void quantize_min_ref(const float* x, int bits, uint8_t* code, float* d_out, float* min_out) {
    float min = x[0], max = x[0];
    for (int j = 1; j < 32; j++) {
        min = std::min(min, x[j]);
        max = std::max(max, x[j]);
    }
    const int top = (1 << bits) - 1;
    const float d = (max - min) / float(top), id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; j++) code[j] = uint8_t(std::min(top, int((x[j] - min) * id + 0.5f)));
    *d_out = d;
    *min_out = min;
}

void pack_q5_bits(const uint8_t* code, uint8_t* qh_then_qs) {
    uint32_t high = 0;
    for (int j = 0; j < 32; j++) high |= uint32_t(code[j] >> 4) << j;
    std::memcpy(qh_then_qs, &high, 4);
    pack_nibbles32(code, qh_then_qs + 4);
}

// ---- Fits: a (sub-)block's scale (and min) by weighted least squares over candidate scales ----

// x ~ scale * q with integer q in [qmin, qmax] (qmin = -qmax - 1: the extra level takes the largest element).
// Weights w. Returns the scale (of either sign; 0 for an all-zero block).
float fit_symmetric(const float* x, const float* w, int n, int qmin, int qmax) {
    const float max = signed_max(x, n);
    if (std::fabs(max) < 1e-30f) return 0.0f;
    float best_scale = 0.0f, best_score = 0.0f;  // score: (sum w x q)^2 / sum w q^2, the error removed
    for (int k = -9; k <= 9; k++) {
        const float iscale = -(float(-qmin) + 0.1f * float(k)) / max;
        float sxq = 0.0f, sqq = 0.0f;
        for (int i = 0; i < n; i++) {
            const float q = float(round_clamped(iscale * x[i], qmin, qmax));
            sxq += w[i] * x[i] * q;
            sqq += w[i] * q * q;
        }
        if (sqq > 0.0f && sxq * sxq > best_score * sqq) {
            best_score = sxq * sxq / sqq;
            best_scale = sxq / sqq;
        }
    }
    return best_scale;
}

// x ~ scale * q - min with q in [0, qmax], scale >= 0 and min >= 0 (the block's low end, stored positive).
void fit_with_min(const float* x, const float* w, int n, int qmax, float* scale, float* min) {
    float lo = x[0], hi = x[0];
    for (int i = 1; i < n; i++) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
    }
    lo = std::min(lo, 0.0f);
    *scale = 0.0f;
    *min = -lo;
    if (!(hi > lo)) return;
    float best_err = INFINITY;
    for (int k = -1; k <= 20; k++) {  // k = -1: the plain min/max grid
        const float iscale = k < 0 ? float(qmax) / (hi - lo) : (float(qmax) - 1.0f + 0.1f * float(k)) / (hi - lo);
        double sw = 0, swq = 0, swqq = 0, swx = 0, swqx = 0;
        for (int i = 0; i < n; i++) {
            const double q = round_clamped(iscale * (x[i] - lo), 0, qmax);
            sw += w[i];
            swq += w[i] * q;
            swqq += w[i] * q * q;
            swx += w[i] * x[i];
            swqx += w[i] * q * x[i];
        }
        double s = 0, m = 0;  // x ~ s q + m
        const double det = sw * swqq - swq * swq;
        if (det > 1e-12 * sw * swqq) {
            s = (sw * swqx - swq * swx) / det;
            m = (swqq * swx - swq * swqx) / det;
        }
        // One code for every element (det 0), or a positive low end, which is not storable: m = 0 and the
        // scale alone.
        if ((m > 0 || !(det > 1e-12 * sw * swqq)) && swqq > 0) {
            m = 0;
            s = swqx / swqq;
        }
        if (!(s > 0)) continue;
        double err = 0;
        for (int i = 0; i < n; i++) {
            const double q = round_clamped(float((x[i] - m) / s), 0, qmax);
            const double e = s * q + m - x[i];
            err += w[i] * e * e;
        }
        if (err < best_err) {
            best_err = float(err);
            *scale = float(s);
            *min = float(-m);
        }
    }
}

// Index of kIq4Values nearest to v: v rounded to an integer in [-128, 127], then a table (the values are
// integers at least 9 apart, so rounding first changes the answer only at exact midpoints).
int nearest_iq4(float v) {
    static const auto table = [] {
        std::array<uint8_t, 256> t{};
        for (int i = 0; i < 256; i++) {
            int best = 0;
            for (int k = 1; k < 16; k++)
                if (std::abs(i - 128 - kIq4Values[k]) < std::abs(i - 128 - kIq4Values[best])) best = k;
            t[size_t(i)] = uint8_t(best);
        }
        return t;
    }();
    return table[size_t(round_clamped(v, -128, 127) + 128)];
}

// sum w x K / sum w K^2 and the error it removes, for the codes nearest to x / scale.
void iq4_least_squares(const float* x, const float* w, int n, float scale, float* best_scale, float* best_score) {
    const float iscale = 1.0f / scale;
    float sxq = 0.0f, sqq = 0.0f;
    for (int i = 0; i < n; i++) {
        const float q = float(kIq4Values[nearest_iq4(iscale * x[i])]);
        sxq += w[i] * x[i] * q;
        sqq += w[i] * q * q;
    }
    if (sqq > 0.0f && sxq * sxq > *best_score * sqq) {
        *best_score = sxq * sxq / sqq;
        *best_scale = sxq / sqq;
    }
}

// x ~ scale * kIq4Values[code]: the largest element near either end of the table, then least squares, then
// the codes chosen again for the best scale until it stops improving.
float fit_iq4(const float* x, const float* w, int n) {
    const float max = signed_max(x, n);
    if (std::fabs(max) < 1e-30f) return 0.0f;
    float best_scale = 0.0f, best_score = 0.0f;
    for (int k = -10; k <= 10; k++) {
        iq4_least_squares(x, w, n, max / float(-127 + k), &best_scale, &best_score);
        iq4_least_squares(x, w, n, max / float(113 + k), &best_scale, &best_score);
    }
    for (int iteration = 0; iteration < 3; iteration++) {
        const float before = best_score;
        iq4_least_squares(x, w, n, best_scale, &best_scale, &best_score);
        if (!(best_score > before)) break;
    }
    return best_scale;
}

// Weights: x^2 for the symmetric fits (the large values matter most), rms + |x| for those with a min.
void squares(const float* x, int n, float* w) {
    for (int i = 0; i < n; i++) w[i] = x[i] * x[i];
}
void rms_plus_abs(const float* x, int n, float* w) {
    float sum = 0.0f;
    for (int i = 0; i < n; i++) sum += x[i] * x[i];
    const float rms = std::sqrt(sum / float(n));
    for (int i = 0; i < n; i++) w[i] = rms + std::fabs(x[i]);
}

// Integer sub-scales: value / step rounded into [lo, hi]; 0 when step is 0.
int sub_scale(float value, float step, int lo, int hi) {
    return step != 0.0f ? round_clamped(value / step, lo, hi) : 0;
}

// ---- Super-blocks of 256 ----

// q4_k (bits 4) and q5_k (bits 5): 8 sub-blocks of 32, 6-bit scales and mins on f16 d and dmin.
void quantize_k4(const float* x, bool five, uint8_t* b) {
    const int qmax = five ? 31 : 15;
    float w[256], scale[8], min[8];
    rms_plus_abs(x, 256, w);
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; j++) {
        fit_with_min(x + 32 * j, w + 32 * j, 32, qmax, &scale[j], &min[j]);
        max_scale = std::max(max_scale, scale[j]);
        max_min = std::max(max_min, min[j]);
    }
    const float d = f16_rounded(max_scale / 63.0f), dmin = f16_rounded(max_min / 63.0f);
    store_f16(b, d);
    store_f16(b + 2, dmin);
    int is[8], im[8];
    for (int j = 0; j < 8; j++) {
        is[j] = sub_scale(scale[j], d, 0, 63);
        im[j] = sub_scale(min[j], dmin, 0, 63);
    }
    uint8_t* s = b + 4;  // the packing k4_scale_min (format/quant_scale_bits.h) reads
    for (int j = 0; j < 4; j++) {
        s[j] = uint8_t(is[j] | ((is[j + 4] >> 4) << 6));
        s[j + 4] = uint8_t(im[j] | ((im[j + 4] >> 4) << 6));
        s[j + 8] = uint8_t((is[j + 4] & 15) | ((im[j + 4] & 15) << 4));
    }
    uint8_t* qh = b + 16;
    uint8_t* qs = b + (five ? 48 : 16);
    if (five) std::memset(qh, 0, 32);
    std::memset(qs, 0, 128);
    for (int j = 0; j < 8; j++) {
        const float es = d * float(is[j]), em = dmin * float(im[j]);
        for (int l = 0; l < 32; l++) {
            const int q = es > 0.0f ? round_clamped((x[32 * j + l] + em) / es, 0, qmax) : 0;
            qs[32 * (j / 2) + l] |= uint8_t((q & 15) << (4 * (j % 2)));
            if (five) qh[l] |= uint8_t((q >> 4) << j);
        }
    }
}

// q2_k: 16 sub-blocks of 16, 2-bit codes, 4-bit scales and mins on f16 d and dmin.
void quantize_q2_k(const float* x, uint8_t* b) {
    float w[256], scale[16], min[16];
    rms_plus_abs(x, 256, w);
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 16; j++) {
        fit_with_min(x + 16 * j, w + 16 * j, 16, 3, &scale[j], &min[j]);
        max_scale = std::max(max_scale, scale[j]);
        max_min = std::max(max_min, min[j]);
    }
    const float d = f16_rounded(max_scale / 15.0f), dmin = f16_rounded(max_min / 15.0f);
    store_f16(b + 80, d);
    store_f16(b + 82, dmin);
    uint8_t* qs = b + 16;
    std::memset(qs, 0, 64);
    for (int j = 0; j < 16; j++) {
        const int is = sub_scale(scale[j], d, 0, 15), im = sub_scale(min[j], dmin, 0, 15);
        b[j] = uint8_t(is | (im << 4));
        const float es = d * float(is), em = dmin * float(im);
        for (int l = 0; l < 16; l++) {
            const int e = 16 * j + l;  // element e: chunk e / 32, lane e % 32
            const int q = es > 0.0f ? round_clamped((x[e] + em) / es, 0, 3) : 0;
            qs[32 * (e / 128) + e % 32] |= uint8_t(q << (2 * ((e / 32) % 4)));
        }
    }
}

// q3_k and q6_k: 16 sub-blocks of 16, symmetric codes in [qmin, -qmin - 1], signed sub-scales in
// [scale_min, -scale_min - 1] on one f16 d (returned; the largest sub-scale gets scale_min).
float symmetric_sub_scales(const float* x, int qmin, int scale_min, float* scale) {
    float w[256];
    squares(x, 256, w);
    for (int j = 0; j < 16; j++) scale[j] = fit_symmetric(x + 16 * j, w + 16 * j, 16, qmin, -qmin - 1);
    return f16_rounded(signed_max(scale, 16) / float(scale_min));
}

void quantize_q3_k(const float* x, uint8_t* b) {
    float scale[16];
    const float d = symmetric_sub_scales(x, -4, -32, scale);
    store_f16(b + 108, d);
    uint8_t* hmask = b;
    uint8_t* qs = b + 32;
    uint8_t* s = b + 96;
    std::memset(b, 0, 108);
    for (int j = 0; j < 16; j++) {
        const int is = sub_scale(scale[j], d, -32, 31);
        const int v = is + 32;  // the packing k3_scale reads
        s[j % 8] |= uint8_t((v & 15) << (4 * (j / 8)));
        s[8 + j % 4] |= uint8_t((v >> 4) << (2 * (j / 4)));
        const float es = d * float(is);
        for (int l = 0; l < 16; l++) {
            const int e = 16 * j + l, c = e / 32, lane = e % 32;
            const int u = (es != 0.0f ? round_clamped(x[e] / es, -4, 3) : 0) + 4;  // 0..7
            qs[32 * (c / 4) + lane] |= uint8_t((u & 3) << (2 * (c % 4)));
            hmask[lane] |= uint8_t((u >> 2) << c);
        }
    }
}

void quantize_q6_k(const float* x, uint8_t* b) {
    float scale[16];
    const float d = symmetric_sub_scales(x, -32, -128, scale);
    store_f16(b + 208, d);
    std::memset(b, 0, 192);
    for (int j = 0; j < 16; j++) {
        const int is = sub_scale(scale[j], d, -128, 127);
        b[192 + j] = uint8_t(int8_t(is));
        const float es = d * float(is);
        for (int l = 0; l < 16; l++) {
            const int e = 16 * j + l, c = e / 32, lane = e % 32, group = c / 4, k = c % 4;
            const int u = (es != 0.0f ? round_clamped(x[e] / es, -32, 31) : 0) + 32;  // 0..63
            b[64 * group + 32 * (k % 2) + lane] |= uint8_t((u & 15) << (k < 2 ? 0 : 4));
            b[128 + 32 * group + lane] |= uint8_t((u >> 4) << (2 * k));
        }
    }
}

void iq4_codes(const float* x, float scale, uint8_t* code) {
    const float iscale = scale != 0.0f ? 1.0f / scale : 0.0f;
    for (int l = 0; l < 32; l++) code[l] = uint8_t(nearest_iq4(iscale * x[l]));
}

void quantize_iq4_nl(const float* x, uint8_t* b) {
    float w[32];
    rms_plus_abs(x, 32, w);
    const float d = f16_rounded(fit_iq4(x, w, 32));
    store_f16(b, d);
    uint8_t code[32];
    iq4_codes(x, d, code);
    pack_nibbles32(code, b + 2);
}

// iq4_xs: 8 sub-blocks of 32 on the iq4 table, signed 6-bit sub-scales on one f16 d.
void quantize_iq4_xs(const float* x, uint8_t* b) {
    float w[256], scale[8];
    rms_plus_abs(x, 256, w);
    for (int j = 0; j < 8; j++) scale[j] = fit_iq4(x + 32 * j, w + 32 * j, 32);
    const float d = f16_rounded(signed_max(scale, 8) / -32.0f);
    store_f16(b, d);
    uint16_t scales_h = 0;
    std::memset(b + 4, 0, 4);
    for (int j = 0; j < 8; j++) {
        const int is = sub_scale(scale[j], d, -32, 31), v = is + 32;  // the packing iq4_xs_scale reads
        b[4 + j / 2] |= uint8_t((v & 15) << (4 * (j % 2)));
        scales_h = uint16_t(scales_h | ((v >> 4) << (2 * j)));
        uint8_t code[32];
        iq4_codes(x + 32 * j, d * float(is), code);
        pack_nibbles32(code, b + 8 + 16 * j);
    }
    store_u16(b + 2, scales_h);
}

// q4_0, q4_1, q5_0, q5_1: f16 d, [f16 min], then 4-bit codes (and q5's fifth bits).
void quantize_ref_block(const float* x, int bits, bool with_min, uint8_t* b) {
    uint8_t code[32];
    float d = 0.0f, min = 0.0f;
    if (with_min) quantize_min_ref(x, bits, code, &d, &min);
    else quantize_symmetric_ref(x, bits, code, &d);
    store_f16(b, d);
    if (with_min) store_f16(b + 2, min);
    uint8_t* codes = b + (with_min ? 4 : 2);
    if (bits == 5) pack_q5_bits(code, codes);
    else pack_nibbles32(code, codes);
}

void quantize_block(DType dtype, const float* x, uint8_t* b) {
    switch (dtype) {
        case DType::q8_0: quantize_q8_0(x, b); return;
        case DType::q4_0: quantize_ref_block(x, 4, false, b); return;
        case DType::q4_1: quantize_ref_block(x, 4, true, b); return;
        case DType::q5_0: quantize_ref_block(x, 5, false, b); return;
        case DType::q5_1: quantize_ref_block(x, 5, true, b); return;
        case DType::iq4_nl: quantize_iq4_nl(x, b); return;
        case DType::q2_k: quantize_q2_k(x, b); return;
        case DType::q3_k: quantize_q3_k(x, b); return;
        case DType::q4_k: quantize_k4(x, false, b); return;
        case DType::q5_k: quantize_k4(x, true, b); return;
        case DType::q6_k: quantize_q6_k(x, b); return;
        case DType::iq4_xs: quantize_iq4_xs(x, b); return;
        case DType::f32:
        case DType::f16:
        case DType::bf16: break;
    }
    KVLM_ASSERT(false, "quantize_block of an unquantized type");
}

}  // namespace

void quantize_blocks(DType dtype, const float* x, void* dst, int64_t n) {
    const int64_t block = dtype_block_elements(dtype);
    KVLM_ASSERT(dtype_is_quantized(dtype) && n % block == 0, "quantize_blocks: not a whole number of blocks");
    const size_t block_bytes = dtype_block_bytes(dtype);
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n / block; i++) quantize_block(dtype, x + i * block, out + size_t(i) * block_bytes);
}

}  // namespace kvlm
