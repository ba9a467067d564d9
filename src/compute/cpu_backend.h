// The reference CPU backend: the Llama forward pass over a paged KV cache, shaped like llama2.c's forward,
// batched over tokens and threaded over rows/heads. Logits and K/V are bit-identical for any batching,
// block size, physical block order and thread count.
#pragma once
#include <memory>

#include "compute/backend.h"
#include "format/model_weights.h"

namespace kvlm {

// As make_cpu_backend(ModelFile, ...) but over weights held elsewhere (tests build them in memory).
// The tensors `weights` points to must outlive the backend.
std::unique_ptr<Backend> make_cpu_backend(const ModelConfig& config, const ModelWeights& weights,
                                          const BackendOptions& options);

// Tokens per forward batch: longer prompts go through in chunks of this many to bound scratch memory.
constexpr int32_t kCpuMaxBatch = 512;

}  // namespace kvlm
