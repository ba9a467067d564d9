// The quantized block layouts (GGUF's, byte for byte), each read as 32-element chunks of one common form that
// dequantization and the CPU's generic kernels share: element j of a chunk is scale[h] * w[j] + min[h], with
// h = j / 16 where the type has a scale per 16 elements (q2_k, q3_k, q6_k) and h = 0 otherwise. The product
// scale * w is exact in f32 for every type (an f16 scale times a sub-scale of at most 8 bits times an integer
// of at most 7 bits fits f32's 24-bit significand), so the one rounding is the add of the min: the values are
// what the gguf package's (and ggml's) dequantization gives, bit for bit.
#pragma once
#include <cstdint>

#include "format/dtype.h"

namespace kvlm {

struct QuantChunk {
    int16_t w[32];
    float scale[2];  // scale[1] == scale[0] unless the type has a scale per 16 elements
    float min[2];    // 0 for types without mins
};

// Layout facts the kernels branch on.
bool quant_scale_per_16(DType dtype);  // q2_k, q3_k, q6_k
bool quant_has_min(DType dtype);       // q4_1, q5_1, q2_k, q4_k, q5_k

// Chunk `chunk` (0 .. dtype_block_elements / 32 - 1) of the block at `block` (dtype_block_bytes bytes, any
// alignment).
void decode_quant_chunk(DType dtype, const uint8_t* block, int chunk, QuantChunk* out);

// n elements (a whole number of blocks) of quantized src into f32.
void dequantize_blocks(DType dtype, const void* src, float* dst, int64_t n);

// The 16 values of iq4_nl and iq4_xs's 4-bit codes (ggml's kvalues_iq4nl).
extern const int8_t kIq4Values[16];

}  // namespace kvlm
