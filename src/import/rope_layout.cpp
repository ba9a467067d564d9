// Row permutations between interleaved and rotate_half RoPE layouts. Within a head, rotate_half row
// j * head_dim/2 + i (j = 0 real part, 1 imaginary part) is interleaved row 2i + j.
#include "import/rope_layout.h"

#include <cstring>

#include "util/error.h"

namespace kvlm {

int64_t interleaved_source_row(int64_t row, int64_t head_dim) {
    KVLM_ASSERT(head_dim > 0 && head_dim % 2 == 0 && row >= 0, "bad RoPE row");
    const int64_t half = head_dim / 2, head = row / head_dim, r = row % head_dim;
    return head * head_dim + 2 * (r % half) + r / half;
}

void interleaved_to_rotate_half(const float* src, float* dst, int64_t n_heads, int64_t head_dim, int64_t n_cols) {
    for (int64_t row = 0; row < n_heads * head_dim; row++)
        std::memcpy(dst + row * n_cols, src + interleaved_source_row(row, head_dim) * n_cols, size_t(n_cols) * 4);
}

void rotate_half_to_interleaved(const float* src, float* dst, int64_t n_heads, int64_t head_dim, int64_t n_cols) {
    for (int64_t row = 0; row < n_heads * head_dim; row++)
        std::memcpy(dst + interleaved_source_row(row, head_dim) * n_cols, src + row * n_cols, size_t(n_cols) * 4);
}

}  // namespace kvlm
