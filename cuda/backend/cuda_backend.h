// The CUDA backend's factory over in-memory weights (plain C++: tests include it without CUDA headers).
// make_cuda_backend(ModelFile, ...) and cuda_available() are declared in src/compute/backend.h.
#pragma once
#include <memory>

#include "compute/backend.h"
#include "format/model_weights.h"

namespace kvlm {

// As make_cuda_backend(ModelFile, ...) but over host weights held elsewhere (tests build them in memory);
// they are uploaded during the call and not referenced afterwards. Throws Error when no device is usable,
// cuBLAS cannot be loaded, or the weights or KV pool do not fit in device memory.
std::unique_ptr<Backend> make_cuda_backend(const ModelConfig& config, const ModelWeights& weights,
                                           const BackendOptions& options, bool show_progress = false);

}  // namespace kvlm
