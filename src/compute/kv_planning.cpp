// KV-cache sizing: bytes one token occupies in the cache (K and V, every layer), used to plan budgets.
#include "compute/backend.h"

namespace kvlm {

size_t kv_bytes_per_token(const ModelConfig& config, DType kv_dtype) {
    return size_t(config.n_layers) * 2 * size_t(config.n_kv_heads) * size_t(config.head_dim) * dtype_size(kv_dtype);
}

}  // namespace kvlm
