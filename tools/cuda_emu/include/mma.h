// nvcuda::wmma for the emulated build: 16x16x16 fragments of __half / __nv_bfloat16 with f32 accumulators.
// Each lane holds only what its share of the result needs (accumulator: row-major elements 8 lane ..
// 8 lane + 7, i.e. row lane / 2; A: that row; B: those columns), so a lane that skips a collective or reads
// another lane's stores before a __syncwarp gets wrong numbers, as on the GPU. Pointers must be 256-bit
// aligned and ldm a multiple of 16 bytes; inside dynamic shared memory the whole 16 x 16 footprint must fit.
#pragma once
#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include "cuda_runtime.h"

namespace nvcuda::wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment;
template <typename T, typename Layout>
struct fragment<matrix_a, 16, 16, 16, T, Layout> {
    float row[16];  // A[lane / 2][0..15]
};
template <typename T, typename Layout>
struct fragment<matrix_b, 16, 16, 16, T, Layout> {
    float cols[16][8];  // B[0..15][8 (lane % 2) .. + 7]
};
template <>
struct fragment<accumulator, 16, 16, 16, float, void> {
    static constexpr int num_elements = 8;
    float x[8];  // C[lane / 2][8 (lane % 2) .. + 7]
};

namespace detail {
inline float to_float(__half v) { return __half2float(v); }
inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
void check(const T* p, unsigned ldm, bool row_major_layout, const char* what) {
    kvlm_emu::count_wmma_op();
    if (reinterpret_cast<uintptr_t>(p) % 32 != 0) kvlm_emu::die("%s: pointer %p is not 256-bit aligned", what, (const void*)p);
    if (ldm * sizeof(T) % 16 != 0) kvlm_emu::die("%s: ldm %u is not a multiple of 16 bytes", what, ldm);
    // Last element of the 16 x 16 footprint either way round.
    const T* last = p + 15 * size_t(ldm) + 15;
    (void)row_major_layout;
    kvlm_emu::check_smem_range(p, reinterpret_cast<const char*>(last + 1) - 1, what);
}
inline int lane() { return kvlm_emu::g_lane; }
}  // namespace detail

template <typename T, typename Layout>
void load_matrix_sync(fragment<matrix_a, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm) {
    constexpr bool row = std::is_same<Layout, row_major>::value;
    detail::check(p, ldm, row, "wmma::load_matrix_sync(matrix_a)");
    const int i = detail::lane() / 2;
    for (int k = 0; k < 16; k++) f.row[k] = detail::to_float(row ? p[i * ldm + k] : p[i + k * ldm]);
}
template <typename T, typename Layout>
void load_matrix_sync(fragment<matrix_b, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm) {
    constexpr bool row = std::is_same<Layout, row_major>::value;
    detail::check(p, ldm, row, "wmma::load_matrix_sync(matrix_b)");
    const int j0 = detail::lane() % 2 * 8;
    for (int k = 0; k < 16; k++)
        for (int j = 0; j < 8; j++) f.cols[k][j] = detail::to_float(row ? p[k * ldm + j0 + j] : p[k + (j0 + j) * ldm]);
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm, layout_t layout) {
    detail::check(p, ldm, layout == mem_row_major, "wmma::load_matrix_sync(accumulator)");
    const int i = detail::lane() / 2, j0 = detail::lane() % 2 * 8;
    for (int j = 0; j < 8; j++) f.x[j] = layout == mem_row_major ? p[i * ldm + j0 + j] : p[i + (j0 + j) * ldm];
}
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm, layout_t layout) {
    detail::check(p, ldm, layout == mem_row_major, "wmma::store_matrix_sync");
    const int i = detail::lane() / 2, j0 = detail::lane() % 2 * 8;
    for (int j = 0; j < 8; j++) (layout == mem_row_major ? p[i * ldm + j0 + j] : p[i + (j0 + j) * ldm]) = f.x[j];
}
inline void fill_fragment(fragment<accumulator, 16, 16, 16, float>& f, float v) {
    kvlm_emu::count_wmma_op();
    for (float& e : f.x) e = v;
}
// d = a b + c, f32 accumulation in k order (the tensor cores' internal order and precision differ slightly).
template <typename T, typename LA, typename LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, T, LA>& a,
              const fragment<matrix_b, 16, 16, 16, T, LB>& b, const fragment<accumulator, 16, 16, 16, float>& c) {
    kvlm_emu::count_wmma_op();
    for (int j = 0; j < 8; j++) {
        float s = c.x[j];
        for (int k = 0; k < 16; k++) s = std::fma(a.row[k], b.cols[k][j], s);
        d.x[j] = s;
    }
}

}  // namespace nvcuda::wmma
