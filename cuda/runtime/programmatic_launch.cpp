// programmatic_launch.cuh's host side: which kernels are launched programmatically.
#include "runtime/programmatic_launch.h"

#include <cuda_runtime.h>

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "runtime/cuda_check.h"

namespace kvlm {

namespace {
std::atomic<bool> g_programmatic{true};

// Compute capability 9.0 or later on the current device (asked once: kvlm uses device 0 only).
bool device_supports() {
    static const bool supports = [] {
        int device = 0, major = 0;
        CUDA_CHECK(cudaGetDevice(&device));
        CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
        return major >= 9;
    }();
    return supports;
}
}  // namespace

void set_programmatic_launches(bool on) { g_programmatic.store(on); }
void declare_immutable([[maybe_unused]] const void* device_allocation) {
#ifdef KVLM_CUDA_EMU
    ::kvlm_emu::declare_immutable(device_allocation);
#endif
}
bool programmatic_launches() { return g_programmatic.load(); }
bool programmatic_launches_on_device() { return programmatic_launches() && device_supports(); }

bool programmatic_launch(const void* kernel) {
    if (!programmatic_launches_on_device()) return false;
    // The binary the device runs for this kernel must have been compiled from PTX that has the wait
    // (griddepcontrol, PTX ISA for sm_90): a kernel JIT-compiled from the compute_80 PTX would not wait.
    static std::mutex mutex;
    static std::unordered_map<const void*, bool> known;
    const std::lock_guard<std::mutex> lock(mutex);
    const auto it = known.find(kernel);
    if (it != known.end()) return it->second;
    cudaFuncAttributes attributes{};
    CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
    const bool waits = attributes.ptxVersion >= 90 && attributes.binaryVersion >= 90;
    known.emplace(kernel, waits);
    return waits;
}

}  // namespace kvlm
