// Quantizers from f32 into every block type kvlm stores (convert --dtype and its recipes).
#pragma once
#include <cstdint>

#include "format/dtype.h"

namespace kvlm {

// n f32 values (a whole number of dtype's blocks) into dst, dtype_bytes(dtype, n) bytes.
// q8_0, q4_0, q4_1, q5_0 and q5_1 round to nearest as ggml's reference quantizers do (the same bytes as the
// gguf package); iq4_nl, the k-quants and iq4_xs fit each (sub-)block's scale and min by a weighted
// least-squares search, store the scales in their integer fields, then choose every code again for the
// stored scales. Their bar is perplexity (bench/RESULTS.md), not llama-quantize's bytes.
void quantize_blocks(DType dtype, const float* x, void* dst, int64_t n);

}  // namespace kvlm
