// The cuBLAS GEMMs kvlm calls (cublasSgemm, cublasGemmEx with f32/f16/bf16 inputs, f32 output and f32
// compute), emulated for the KVLM_CUDA_EMU build: column-major as in cuBLAS, arguments checked as cuBLAS
// checks them (CUBLAS_STATUS_INVALID_VALUE / NOT_SUPPORTED), operands checked to lie inside device
// allocations, and the product queued on the handle's stream like any other stream work (runtime.cpp).
// alpha and beta are read at the call (host pointer mode); beta = 0 ignores what C held, NaN included.
#include <cublas_v2.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cuda/runtime/cublas_loader.h"
#include "emu_internal.h"
#include "format/dtype.h"
#include "util/error.h"

struct cublasContext {
    cudaStream_t stream = nullptr;
};

namespace kvlm_emu {
namespace {

size_t element_bytes(cudaDataType type) { return type == CUDA_R_32F ? 4 : 2; }

float load(const void* p, cudaDataType type, size_t i) {
    switch (type) {
        case CUDA_R_32F: return static_cast<const float*>(p)[i];
        case CUDA_R_16F: return kvlm::f16_to_f32(static_cast<const uint16_t*>(p)[i]);
        case CUDA_R_16BF: return kvlm::bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    }
    return 0.0f;
}

// Bytes a column-major operand of `rows` x `cols` (as stored) with leading dimension ld spans.
size_t operand_bytes(int rows, int cols, int ld, cudaDataType type) {
    if (rows == 0 || cols == 0) return 0;
    return (size_t(cols - 1) * size_t(ld) + size_t(rows)) * element_bytes(type);
}

// op(X) as a row-major [rows][depth] float matrix: element (r, l) is X[r + l*ld] (N) or X[l + r*ld] (T).
std::vector<float> gather(const void* x, cudaDataType type, cublasOperation_t op, int rows, int depth, int ld) {
    std::vector<float> out(size_t(rows) * size_t(depth));
    for (int r = 0; r < rows; r++)
        for (int l = 0; l < depth; l++)
            out[size_t(r) * depth + l] = load(x, type, op == CUBLAS_OP_N ? size_t(r) + size_t(l) * ld : size_t(l) + size_t(r) * ld);
    return out;
}

cublasStatus_t gemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                    const float* alpha, const void* a, cudaDataType a_type, int lda, const void* b, cudaDataType b_type,
                    int ldb, const float* beta, float* c, int ldc, const char* api) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    const bool a_n = transa == CUBLAS_OP_N, b_n = transb == CUBLAS_OP_N;
    if ((transa != CUBLAS_OP_N && transa != CUBLAS_OP_T) || (transb != CUBLAS_OP_N && transb != CUBLAS_OP_T) || m < 0 ||
        n < 0 || k < 0 || lda < std::max(1, a_n ? m : k) || ldb < std::max(1, b_n ? k : n) || ldc < std::max(1, m))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    const std::string what = std::string(api) + " operand ";
    if (k > 0) {
        check_device_range(a, operand_bytes(a_n ? m : k, a_n ? k : m, lda, a_type), (what + "A").c_str());
        check_device_range(b, operand_bytes(b_n ? k : n, b_n ? n : k, ldb, b_type), (what + "B").c_str());
    }
    check_device_range(c, operand_bytes(m, n, ldc, CUDA_R_32F), (what + "C").c_str());
    const float alpha_value = *alpha, beta_value = *beta;
    submit(handle->stream, [=] {
        const std::vector<float> op_a = gather(a, a_type, transa, m, k, lda);   // [m][k]
        const std::vector<float> op_bt = gather(b, b_type, b_n ? CUBLAS_OP_T : CUBLAS_OP_N, n, k, ldb);  // [n][k]
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                const float* x = op_a.data() + size_t(i) * k;
                const float* y = op_bt.data() + size_t(j) * k;
                float sum = 0.0f;
                for (int l = 0; l < k; l++) sum += x[l] * y[l];
                float& out = c[size_t(i) + size_t(j) * ldc];
                out = beta_value == 0.0f ? alpha_value * sum : alpha_value * sum + beta_value * out;
            }
    });
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t create(cublasHandle_t* handle) {
    *handle = new cublasContext;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t destroy(cublasHandle_t handle) {
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t set_stream(cublasHandle_t handle, cudaStream_t stream) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t sgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                     const float* alpha, const float* a, int lda, const float* b, int ldb, const float* beta, float* c,
                     int ldc) {
    return gemm(handle, transa, transb, m, n, k, alpha, a, CUDA_R_32F, lda, b, CUDA_R_32F, ldb, beta, c, ldc,
                "cublasSgemm");
}
cublasStatus_t gemm_ex(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                       const void* alpha, const void* a, cudaDataType a_type, int lda, const void* b, cudaDataType b_type,
                       int ldb, const void* beta, void* c, cudaDataType c_type, int ldc, cublasComputeType_t compute_type,
                       cublasGemmAlgo_t) {
    const auto supported = [](cudaDataType t) { return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF; };
    if (!supported(a_type) || a_type != b_type || c_type != CUDA_R_32F || compute_type != CUBLAS_COMPUTE_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return gemm(handle, transa, transb, m, n, k, static_cast<const float*>(alpha), a, a_type, lda, b, b_type, ldb,
                static_cast<const float*>(beta), static_cast<float*>(c), ldc, "cublasGemmEx");
}

}  // namespace
}  // namespace kvlm_emu

namespace kvlm {

const CublasApi& cublas_api() {
    static const CublasApi api = [] {
        CublasApi a;
        a.create = kvlm_emu::create, a.destroy = kvlm_emu::destroy, a.set_stream = kvlm_emu::set_stream;
        a.sgemm = kvlm_emu::sgemm, a.gemm_ex = kvlm_emu::gemm_ex;
        return a;
    }();
    return api;
}

bool cublas_loadable(std::string*) { return true; }

void cublas_fail(cublasStatus_t status, const char* statement, const char* file, int line) {
    throw_error("cuBLAS error {} in `{}` at {}:{} (emulated cuBLAS)", int(status), statement, file, line);
}

}  // namespace kvlm
