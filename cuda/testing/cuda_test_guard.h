// Internals shared by the cuda_test_api*.cpp files: guarded device buffers and the launch epilogue.
#pragma once
#include <cuda_runtime.h>

#include <cstring>
#include <string>
#include <vector>

#include "runtime/cuda_check.h"
#include "runtime/programmatic_launch.h"
#include "testing/cuda_test_api.h"
#include "util/error.h"

namespace kvlm::cuda_test {

constexpr size_t kGuardBytes = 4096;

// `bytes` of device memory between two guard bands, all filled with 0xFF.
class GuardedBuffer {
public:
    GuardedBuffer(const char* name, size_t bytes) : name_(name), bytes_(bytes) {
        CUDA_CHECK(cudaMalloc(&base_, bytes_ + 2 * kGuardBytes));
        CUDA_CHECK(cudaMemset(base_, 0xFF, bytes_ + 2 * kGuardBytes));
    }
    ~GuardedBuffer() { cudaFree(base_); }
    GuardedBuffer(const GuardedBuffer&) = delete;
    GuardedBuffer& operator=(const GuardedBuffer&) = delete;

    template <typename T = void>
    T* get() const { return reinterpret_cast<T*>(static_cast<char*>(base_) + kGuardBytes); }
    void upload(const void* src) {
        if (bytes_) CUDA_CHECK(cudaMemcpy(get(), src, bytes_, cudaMemcpyHostToDevice));
    }
    // Weights: kernels only read them (programmatic launches may before their wait).
    void upload_immutable(const void* src) {
        upload(src);
        declare_immutable(base_);
    }
    // Throws naming the buffer when a kernel wrote into either guard band (copies only the bands back).
    void check_guards() const {
        std::vector<unsigned char> before(kGuardBytes), after(kGuardBytes);
        CUDA_CHECK(cudaMemcpy(before.data(), base_, kGuardBytes, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(after.data(), static_cast<char*>(base_) + kGuardBytes + bytes_, kGuardBytes,
                              cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < kGuardBytes; i++) {
            if (before[i] != 0xFF) throw_error("{}: guard band before the buffer written at byte -{}", name_, kGuardBytes - i);
            if (after[i] != 0xFF) throw_error("{}: guard band after the buffer written at byte +{}", name_, i);
        }
    }
    // Copies the contents to dst after checking both guard bands are intact.
    void download(void* dst) const {
        check_guards();
        if (bytes_) CUDA_CHECK(cudaMemcpy(dst, get(), bytes_, cudaMemcpyDeviceToHost));
    }

private:
    const char* name_;
    size_t bytes_;
    void* base_ = nullptr;
};

// Waits for the launches and surfaces any asynchronous fault.
inline void finish() {
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
}

inline void require_device() {
    std::string why;
    if (!device_available(&why)) throw_error("cuda_test: no usable CUDA device: {}", why);
    CUDA_CHECK(cudaSetDevice(0));
}

}  // namespace kvlm::cuda_test
