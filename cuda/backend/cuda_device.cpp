// CUDA device discovery: cuda_available() is true when device 0 exists, is new enough for the kernels
// kvlm ships (compute 8.0+; sm_90 machine code plus compute_80 PTX) and cuBLAS can be loaded, i.e. when
// make_cuda_backend can be expected to succeed. Otherwise it says why, so --device auto can say why it
// runs on the CPU and --device cuda can fail with the reason.
#include <cuda_runtime.h>

#include <string>

#include "compute/backend.h"
#include "runtime/cublas_loader.h"
#include "util/error.h"

namespace kvlm {

static bool cuda_device_present(std::string* description) {
    int n_devices = 0;
    cudaError_t status = cudaGetDeviceCount(&n_devices);
    if (status == cudaErrorInsufficientDriver || status == cudaErrorNoDevice) {
        *description = std::string("no CUDA driver or device found (") + cudaGetErrorName(status) + ")";
        cudaGetLastError();
        return false;
    }
    if (status != cudaSuccess) {
        *description = std::string("CUDA runtime: ") + cudaGetErrorName(status) + ": " + cudaGetErrorString(status);
        cudaGetLastError();
        return false;
    }
    if (n_devices == 0) {
        *description = "no CUDA device found";
        return false;
    }
    cudaDeviceProp prop{};
    status = cudaGetDeviceProperties(&prop, 0);
    if (status != cudaSuccess) {
        *description = std::string("CUDA runtime: cudaGetDeviceProperties: ") + cudaGetErrorName(status);
        return false;
    }
    *description = fmt::format("{} (compute {}.{}, {:.1f} GiB)", prop.name, prop.major, prop.minor,
                               double(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
    if (prop.major < 8) {
        *description = "found " + *description + ", but kvlm's CUDA kernels need compute capability 8.0 or newer";
        return false;
    }
    return true;
}

bool cuda_available(std::string* why_not) {
    std::string description;
    if (!cuda_device_present(&description)) {
        if (why_not) *why_not = description;
        return false;
    }
    std::string cublas_error;
    if (!cublas_loadable(&cublas_error)) {
        if (why_not) *why_not = "found " + description + ", but " + cublas_error;
        return false;
    }
    return true;
}

}  // namespace kvlm
