// Page-locked host memory (cudaMallocHost): what asynchronous copies to and from the device need to stay
// asynchronous.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "runtime/cuda_check.h"

namespace kvlm {

class PinnedBuffer {
public:
    explicit PinnedBuffer(size_t bytes) { CUDA_CHECK(cudaMallocHost(&ptr_, std::max<size_t>(bytes, 64))); }
    ~PinnedBuffer() { cudaFreeHost(ptr_); }
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;
    char* data() const { return static_cast<char*>(ptr_); }

private:
    void* ptr_ = nullptr;
};

}  // namespace kvlm
