// Test entry points for the quantized-weight prefill path (cuda_test_api.h): guarded device copies around
// launch_dequantize_f16 and launch_matmul_quantized.
#include <cuda_runtime.h>

#include <vector>

#include "backend/matmul.h"
#include "kernels/cuda_ops.h"
#include "runtime/cublas_loader.h"
#include "testing/cuda_test_api.h"
#include "testing/cuda_test_guard.h"

namespace kvlm::cuda_test {

void matmul_quantized(float* out, const float* x, const void* w, DType w_dtype, int64_t n, int64_t n_in, int64_t n_out,
                      int64_t tile_rows, bool accumulate) {
    require_device();
    const CublasHandle cublas;
    cublasHandle_t handle = cublas.handle;
    GuardedBuffer d_out("matmul_quantized out", size_t(n * n_out) * 4), d_x("matmul_quantized x", size_t(n * n_in) * 4),
        d_w("matmul_quantized w", size_t(dtype_bytes(w_dtype, uint64_t(n_out * n_in)))),
        d_x16("matmul_quantized x f16", size_t(n * n_in) * 2),
        d_tile("matmul_quantized tile", size_t(tile_rows * n_in) * 2);
    if (accumulate) d_out.upload(out);
    d_x.upload(x);
    d_w.upload(w);
    launch_convert_from_f32(d_x16.get(), d_x.get<float>(), DType::f16, n * n_in, nullptr);
    launch_matmul_quantized(handle, d_out.get<float>(), d_x16.get(), d_w.get(), w_dtype, n, n_in, n_out, accumulate,
                            d_tile.get(), tile_rows, nullptr);
    finish();
    d_out.download(out);
    std::vector<char> tile(size_t(tile_rows * n_in) * 2);
    d_tile.download(tile.data());  // checks its guard bands: no tile wrote past the scratch
}

void dequantize_f16(uint16_t* out, const void* w, DType w_dtype, int64_t n_elements) {
    require_device();
    GuardedBuffer d_out("dequantize_f16 out", size_t(n_elements) * 2),
        d_w("dequantize_f16 w", size_t(dtype_bytes(w_dtype, uint64_t(n_elements))));
    d_w.upload(w);
    launch_dequantize_f16(d_out.get(), d_w.get(), w_dtype, n_elements, nullptr);
    finish();
    d_out.download(out);
}

}  // namespace kvlm::cuda_test
