// Error checks for CUDA runtime calls and kernel launches. Every runtime call goes through CUDA_CHECK;
// every launch is followed by CUDA_CHECK_LAUNCH(). Failures throw kvlm::Error naming the statement,
// file:line, the error name and the device (the thrower lives in cuda_check.cpp, so kernels' .cu files
// need no fmt).
#pragma once
#include <cuda_runtime.h>

namespace kvlm {

[[noreturn]] void cuda_fail(cudaError_t status, const char* statement, const char* file, int line);
// Throws kvlm::Error(message): for launchers' argument checks (keeps fmt out of nvcc-compiled files).
[[noreturn]] void cuda_throw(const char* message);

}  // namespace kvlm

#define CUDA_CHECK(statement)                                                          \
    do {                                                                               \
        cudaError_t kvlm_cuda_status_ = (statement);                                   \
        if (kvlm_cuda_status_ != cudaSuccess)                                          \
            ::kvlm::cuda_fail(kvlm_cuda_status_, #statement, __FILE__, __LINE__);      \
    } while (0)

// After a <<<...>>> launch: configuration errors show up here, asynchronous faults at the next sync.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
