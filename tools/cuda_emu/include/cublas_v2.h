// The cuBLAS types cuda/cublas_loader.h and cuda/matmul.h name, for the emulated build. cuBLAS itself is
// not emulated: tools/cuda_emu/emu.cpp's cublas_loadable() is false and cublas_api() throws.
#pragma once
#include "cuda_runtime.h"

using cublasHandle_t = struct cublasContext*;
enum cublasStatus_t { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1 };
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cudaDataType { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68 };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1 };
