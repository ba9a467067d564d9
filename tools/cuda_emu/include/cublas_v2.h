// The cuBLAS types cuda/cublas_loader.h and cuda/matmul.h name, for the emulated build; the functions kvlm
// calls are emulated in tools/cuda_emu/cublas.cpp (reached through cublas_api(), as the real library is).
#pragma once
#include "cuda_runtime.h"

using cublasHandle_t = struct cublasContext*;
enum cublasStatus_t {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cudaDataType { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68 };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1 };
