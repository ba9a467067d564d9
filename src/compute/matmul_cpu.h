// CPU dot products and matrix products for every weight type, through the kernel set of the SIMD path chosen
// at start-up (compute/cpu_features.h, compute/cpu_kernels.h for the canonical order every path follows):
// each output element is the same bits whatever the batch size, tiling, thread split or path.
#pragma once
#include <cstdint>
#include <string>

#include "compute/cpu_features.h"
#include "format/dtype.h"

namespace kvlm {

class ThreadPool;

// The path the kernels take: the best the CPU has, or a lower one named by KVLM_CPU_PATH (scalar, avx2,
// avx512). Throws Error when KVLM_CPU_PATH names an unknown path or one this CPU lacks.
CpuPath cpu_path();
// The chosen path with its features ("avx512 (f/bw/vl/dq, vnni, bf16)"), for the backend's device line.
std::string cpu_path_text();
// Switches the path (tests compare paths); throws Error when the CPU lacks it.
void set_cpu_path(CpuPath path);

struct CpuKernels;
// The kernel set of the current path (compute/cpu_kernels.h), for loops that call a kernel per key or row
// and should not look the path up every time.
const CpuKernels& cpu_kernels();

// The canonical dot product of a (n elements of a_dtype: f32, f16 or bf16) and b (n floats).
float dot_cpu(const void* a, DType a_dtype, const float* b, int64_t n);
// y[i] = fma(alpha, x[i], y[i]) for i < n (x converted from x_dtype: f32, f16 or bf16).
void axpy_cpu(float* y, float alpha, const void* x, DType x_dtype, int64_t n);

// out[t, r] = dot(w[r, :], x[t, :]) for any weight type (quantized: n_in a multiple of 32). Rows are split
// over the pool's threads (pool may be null). Weights are streamed once per tile of tokens.
void matmul_cpu(float* out,      // [n, n_out]
                const float* x,  // [n, n_in]
                const void* w,   // [n_out, n_in] in w_dtype
                DType w_dtype, int64_t n, int64_t n_in, int64_t n_out, ThreadPool* pool);

// One weight matrix of a matmul_cpu_shared_input call.
struct MatmulOutput {
    float* out;       // [n, n_out]
    const void* w;    // [n_out, n_in] in w_dtype
    DType w_dtype;
    int64_t n_out;
};
// matmul_cpu for several matrices that read the same input (q, k and v; gate and up): one split of all
// their rows over the threads (one wake-up instead of one per matrix), the input quantized once. Each
// output element is the same bits as matmul_cpu gives.
void matmul_cpu_shared_input(const MatmulOutput* outputs, int n_outputs, const float* x, int64_t n, int64_t n_in,
                             ThreadPool* pool);

}  // namespace kvlm
