// The thrower behind CUDA_CHECK (cuda_check.h): "CUDA error cudaErrorX (text) in `stmt` at file:line on
// device 0 (NVIDIA H100 ...)".
#include "runtime/cuda_check.h"

#include <string>

#include "util/error.h"

namespace kvlm {

void cuda_fail(cudaError_t status, const char* statement, const char* file, int line) {
    std::string device = "no device";
    int index = -1;
    if (cudaGetDevice(&index) == cudaSuccess) {
        cudaDeviceProp prop{};
        if (cudaGetDeviceProperties(&prop, index) == cudaSuccess) device = fmt::format("device {} ({})", index, prop.name);
        else device = fmt::format("device {}", index);
    }
    throw_error("CUDA error {} ({}) in `{}` at {}:{} on {}", cudaGetErrorName(status), cudaGetErrorString(status),
                statement, file, line, device);
}

void cuda_throw(const char* message) { throw Error(message); }

}  // namespace kvlm
