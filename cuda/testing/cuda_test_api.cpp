// Test entry points (see cuda_test_api.h): guarded device copies around the shipped launchers.
#include "testing/cuda_test_api.h"
#include "testing/cuda_test_guard.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/matmul.h"
#include "compute/backend.h"
#include "kernels/cuda_ops.h"
#include "runtime/cublas_loader.h"
#include "runtime/cuda_check.h"
#include "util/error.h"

namespace kvlm::cuda_test {

bool device_available(std::string* why_not) {
    int n_devices = 0;
    cudaError_t status = cudaGetDeviceCount(&n_devices);
    if (status != cudaSuccess || n_devices == 0) {
        cudaGetLastError();
        if (why_not) *why_not = status != cudaSuccess ? cudaGetErrorName(status) : "no device";
        return false;
    }
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major < 8) {
        if (why_not) *why_not = "device 0 is older than compute capability 8.0";
        return false;
    }
    return true;
}

bool cublas_available(std::string* why_not) { return cublas_loadable(why_not); }

void embed(float* out, const int32_t* tokens, const void* table, DType dtype, int32_t n, int32_t dim,
           int32_t n_vocab) {
    require_device();
    GuardedBuffer d_out("embed out", size_t(n) * dim * sizeof(float)), d_tokens("embed tokens", size_t(n) * 4),
        d_table("embed table", size_t(dtype_bytes(dtype, uint64_t(n_vocab) * uint64_t(dim))));
    d_tokens.upload(tokens);
    d_table.upload(table);
    launch_embed(d_out.get<float>(), d_tokens.get<int32_t>(), d_table.get(), dtype, n, dim, nullptr);
    finish();
    d_out.download(out);
}

void rmsnorm(float* out, const float* x, const float* weight, int32_t n, int32_t dim, float eps) {
    require_device();
    size_t bytes = size_t(n) * dim * sizeof(float);
    GuardedBuffer d_out("rmsnorm out", bytes), d_x("rmsnorm x", bytes), d_w("rmsnorm weight", size_t(dim) * 4);
    d_x.upload(x);
    d_w.upload(weight);
    launch_rmsnorm(d_out.get<float>(), d_x.get<float>(), d_w.get<float>(), n, dim, eps, nullptr);
    finish();
    d_out.download(out);
    // In place (out aliasing x) must give the same result.
    std::vector<float> in_place(size_t(n) * dim);
    launch_rmsnorm(d_x.get<float>(), d_x.get<float>(), d_w.get<float>(), n, dim, eps, nullptr);
    finish();
    d_x.download(in_place.data());
    if (std::memcmp(in_place.data(), out, bytes) != 0) throw_error("rmsnorm: in-place result differs from out-of-place");
}

void rope(float* x, const int32_t* positions, const float* inv_freq, int32_t n, int32_t n_heads, int32_t head_dim) {
    require_device();
    GuardedBuffer d_x("rope x", size_t(n) * n_heads * head_dim * 4), d_pos("rope positions", size_t(n) * 4),
        d_freq("rope inv_freq", size_t(head_dim / 2) * 4);
    d_x.upload(x);
    d_pos.upload(positions);
    d_freq.upload(inv_freq);
    launch_rope(d_x.get<float>(), d_pos.get<int32_t>(), d_freq.get<float>(), n, n_heads, head_dim, nullptr);
    finish();
    d_x.download(x);
}

void kv_write(void* kv, int32_t n_blocks, const KvLayout& layout, int32_t layer, const float* k, const float* v,
              const int32_t* block_table, int32_t n_table, const int32_t* positions, int32_t n) {
    require_device();
    size_t row_bytes = size_t(n) * layout.row_elements() * 4;
    GuardedBuffer d_kv("kv_write pool", size_t(n_blocks) * layout.block_bytes()), d_k("kv_write k", row_bytes),
        d_v("kv_write v", row_bytes), d_table("kv_write block_table", size_t(n_table) * 4),
        d_pos("kv_write positions", size_t(n) * 4);
    d_kv.upload(kv);
    d_k.upload(k);
    d_v.upload(v);
    d_table.upload(block_table);
    d_pos.upload(positions);
    launch_kv_write(d_kv.get(), layout, layer, d_k.get<float>(), d_v.get<float>(), d_table.get<int32_t>(),
                    d_pos.get<int32_t>(), n, nullptr);
    finish();
    d_kv.download(kv);
}

void paged_attention(float* out, const float* q, const void* kv, int32_t n_blocks, const KvLayout& layout,
                     int32_t layer, const int32_t* block_table, int32_t n_table, const int32_t* positions, int32_t n,
                     int32_t n_heads, int32_t n_sms, int64_t scratch_rows) {
    require_device();
    size_t q_bytes = size_t(n) * n_heads * layout.head_dim * 4;
    GuardedBuffer d_out("attention out", q_bytes), d_q("attention q", q_bytes),
        d_kv("attention pool", size_t(n_blocks) * layout.block_bytes()),
        d_table("attention block_table", size_t(n_table) * 4), d_pos("attention positions", size_t(n) * 4),
        d_scratch("attention scratch", size_t(scratch_rows) * (kCudaMaxHeadDim + 2) * 4);
    d_q.upload(q);
    d_kv.upload(kv);
    d_table.upload(block_table);
    d_pos.upload(positions);
    int32_t max_keys = 0;
    for (int32_t t = 0; t < n; t++) max_keys = std::max(max_keys, positions[t] + 1);
    AttentionScratch scratch;
    if (scratch_rows > 0) scratch.partials = d_scratch.get<float>(), scratch.max_rows = scratch_rows;
    launch_paged_attention(d_out.get<float>(), d_q.get<float>(), d_kv.get(), layout, layer, d_table.get<int32_t>(),
                           d_pos.get<int32_t>(), n, n_heads, max_keys, n_sms, scratch, nullptr);
    finish();
    d_out.download(out);
    d_scratch.check_guards();
}

void swiglu(float* out, const float* gate, const float* up, int32_t n, int32_t n_ff) {
    require_device();
    size_t bytes = size_t(n) * n_ff * 4;
    GuardedBuffer d_out("swiglu out", bytes), d_gate("swiglu gate", bytes), d_up("swiglu up", bytes);
    d_gate.upload(gate);
    d_up.upload(up);
    launch_swiglu(d_out.get<float>(), d_gate.get<float>(), d_up.get<float>(), n, n_ff, nullptr);
    finish();
    d_out.download(out);
}

void rmsnorm_to(void* out, const float* x, const float* weight, int32_t n, int32_t dim, float eps, DType out_dtype) {
    require_device();
    GuardedBuffer d_out("rmsnorm_to out", size_t(n) * dim * dtype_size(out_dtype)),
        d_x("rmsnorm_to x", size_t(n) * dim * 4), d_w("rmsnorm_to weight", size_t(dim) * 4);
    d_x.upload(x);
    d_w.upload(weight);
    launch_rmsnorm_to(d_out.get(), d_x.get<float>(), d_w.get<float>(), n, dim, eps, out_dtype, nullptr);
    finish();
    d_out.download(out);
}

void swiglu_to(void* out, const float* gate, const float* up, int32_t n, int32_t n_ff, DType out_dtype) {
    require_device();
    size_t bytes = size_t(n) * n_ff * 4;
    GuardedBuffer d_out("swiglu_to out", size_t(n) * n_ff * dtype_size(out_dtype)), d_gate("swiglu_to gate", bytes),
        d_up("swiglu_to up", bytes);
    d_gate.upload(gate);
    d_up.upload(up);
    launch_swiglu_to(d_out.get(), d_gate.get<float>(), d_up.get<float>(), n, n_ff, out_dtype, nullptr);
    finish();
    d_out.download(out);
}

void add(float* x, const float* y, int64_t n) {
    require_device();
    GuardedBuffer d_x("add x", size_t(n) * 4), d_y("add y", size_t(n) * 4);
    d_x.upload(x);
    d_y.upload(y);
    launch_add(d_x.get<float>(), d_y.get<float>(), n, nullptr);
    finish();
    d_x.download(x);
}

void add_bias(float* x, const float* bias, int32_t n, int32_t dim) {
    require_device();
    GuardedBuffer d_x("add_bias x", size_t(n) * dim * 4), d_b("add_bias bias", size_t(dim) * 4);
    d_x.upload(x);
    d_b.upload(bias);
    launch_add_bias(d_x.get<float>(), d_b.get<float>(), n, dim, nullptr);
    finish();
    d_x.download(x);
}

void matmul(float* out, const float* x, const void* w, DType w_dtype, int64_t n, int64_t n_in, int64_t n_out) {
    require_device();
    static cublasHandle_t handle = [] {
        cublasHandle_t h = nullptr;
        CUBLAS_CHECK(cublas_api().create(&h));
        return h;  // kept for the process lifetime
    }();
    GuardedBuffer d_out("matmul out", size_t(n * n_out) * 4), d_x("matmul x", size_t(n * n_in) * 4),
        d_w("matmul w", size_t(n_out * n_in) * dtype_size(w_dtype)), d_conv("matmul x_converted", size_t(n * n_in) * 2);
    d_x.upload(x);
    d_w.upload(w);
    launch_matmul(handle, d_out.get<float>(), d_x.get<float>(), d_w.get(), w_dtype, n, n_in, n_out, d_conv.get(),
                  nullptr);
    finish();
    d_out.download(out);
    std::vector<char> conv(size_t(n * n_in) * 2);
    d_conv.download(conv.data());
}

void matmul_accumulate(float* out, const float* x, const void* w, DType w_dtype, int64_t n, int64_t n_in,
                       int64_t n_out) {
    require_device();
    const CublasHandle cublas;
    cublasHandle_t handle = cublas.handle;
    GuardedBuffer d_out("matmul_accumulate out", size_t(n * n_out) * 4), d_x("matmul_accumulate x", size_t(n * n_in) * 4),
        d_w("matmul_accumulate w", size_t(n_out * n_in) * dtype_size(w_dtype)),
        d_conv("matmul_accumulate x_converted", size_t(n * n_in) * dtype_size(w_dtype));
    d_out.upload(out);
    d_x.upload(x);
    d_w.upload(w);
    const void* in = d_x.get();
    if (w_dtype != DType::f32) {
        launch_convert_from_f32(d_conv.get(), d_x.get<float>(), w_dtype, n * n_in, nullptr);
        in = d_conv.get();
    }
    launch_matmul_prepared(handle, d_out.get<float>(), in, d_w.get(), w_dtype, n, n_in, n_out, true, nullptr);
    finish();
    d_out.download(out);
}

}  // namespace kvlm::cuda_test
