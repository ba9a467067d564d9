// KV-cache sizing: bytes one token occupies in the cache (K and V, every layer), used to plan budgets.
#include "compute/backend.h"

namespace kvlm {

size_t kv_bytes_per_token(const ModelConfig& config, DType kv_dtype) {
    return size_t(dtype_bytes(kv_dtype, uint64_t(config.n_layers) * 2 * uint64_t(config.n_kv_heads) *
                                            uint64_t(config.head_dim)));
}

}  // namespace kvlm
