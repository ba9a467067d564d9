// cuBLAS loaded at run time (dlopen of libcublas.so.13): kvlm links cudart statically and must run on
// machines without cuBLAS (CPU only), and on the GPU machines the library may live only inside a Python
// venv reached through LD_LIBRARY_PATH. Only the few functions kvlm calls are resolved.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

namespace kvlm {

constexpr const char* kCublasLibrary = "libcublas.so.13";

struct CublasApi {
    cublasStatus_t (*create)(cublasHandle_t* handle) = nullptr;
    cublasStatus_t (*destroy)(cublasHandle_t handle) = nullptr;
    cublasStatus_t (*set_stream)(cublasHandle_t handle, cudaStream_t stream) = nullptr;
    cublasStatus_t (*sgemm)(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const float* alpha, const float* a, int lda, const float* b, int ldb,
                            const float* beta, float* c, int ldc) = nullptr;
    cublasStatus_t (*gemm_ex)(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                              int k, const void* alpha, const void* a, cudaDataType a_type, int lda, const void* b,
                              cudaDataType b_type, int ldb, const void* beta, void* c, cudaDataType c_type, int ldc,
                              cublasComputeType_t compute_type, cublasGemmAlgo_t algo) = nullptr;
};

// The loaded API (loaded once, kept for the process lifetime). Throws Error naming the library,
// the loader's message and LD_LIBRARY_PATH when it or one of its functions is missing.
const CublasApi& cublas_api();
// False (with the reason) when cublas_api() would throw.
bool cublas_loadable(std::string* why_not);

[[noreturn]] void cublas_fail(cublasStatus_t status, const char* statement, const char* file, int line);

}  // namespace kvlm

#define CUBLAS_CHECK(statement)                                                        \
    do {                                                                               \
        cublasStatus_t kvlm_cublas_status_ = (statement);                              \
        if (kvlm_cublas_status_ != CUBLAS_STATUS_SUCCESS)                              \
            ::kvlm::cublas_fail(kvlm_cublas_status_, #statement, __FILE__, __LINE__);  \
    } while (0)

namespace kvlm {

// A cuBLAS handle for as long as the object lives (the backend's, or one test call's).
struct CublasHandle {
    cublasHandle_t handle = nullptr;
    CublasHandle() { CUBLAS_CHECK(cublas_api().create(&handle)); }
    ~CublasHandle() {
        if (handle) cublas_api().destroy(handle);
    }
    CublasHandle(const CublasHandle&) = delete;
    CublasHandle& operator=(const CublasHandle&) = delete;
};

}  // namespace kvlm
