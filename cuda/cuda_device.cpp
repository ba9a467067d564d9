// CUDA device discovery (host code, compiled only when kvlm is built with CUDA). The kernels and the
// CUDA backend proper land with the CUDA issue; until then a CUDA build reports the device it sees and
// refuses --device cuda with a clear message instead of silently running on the CPU.
#include <cuda_runtime.h>

#include <string>

#include "backend.h"
#include "error.h"

namespace kvlm {

static bool cuda_device_present(std::string* description) {
    int n_devices = 0;
    cudaError_t status = cudaGetDeviceCount(&n_devices);
    if (status == cudaErrorInsufficientDriver || status == cudaErrorNoDevice) {
        *description = "no CUDA driver or device found";
        return false;
    }
    if (status != cudaSuccess) {
        *description = std::string("CUDA runtime: ") + cudaGetErrorName(status) + ": " + cudaGetErrorString(status);
        return false;
    }
    if (n_devices == 0) {
        *description = "no CUDA device found";
        return false;
    }
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    *description = fmt::format("{} (compute {}.{}, {:.1f} GiB)", prop.name, prop.major, prop.minor,
                               double(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
    return true;
}

bool cuda_available(std::string* why_not) {
    std::string description;
    if (!cuda_device_present(&description)) {
        if (why_not) *why_not = description;
        return false;
    }
    if (why_not) *why_not = "found " + description + ", but this kvlm version has no CUDA kernels yet";
    return false;
}

std::unique_ptr<Backend> make_cuda_backend(const ModelFile&, const BackendOptions&) {
    std::string why;
    cuda_available(&why);
    throw_error("the CUDA backend is not available: {}", why);
}

}  // namespace kvlm
