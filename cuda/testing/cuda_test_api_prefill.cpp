// Test entry point (see cuda_test_api.h) for tensor-core prefill attention: guarded device copies around
// launch_prefill_attention, checking afterwards that the read-only KV pool is unchanged.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "kernels/cuda_ops.h"
#include "runtime/cuda_check.h"
#include "testing/cuda_test_api.h"
#include "testing/cuda_test_guard.h"
#include "util/error.h"

namespace kvlm::cuda_test {

void prefill_attention(float* out, const float* q, const void* kv, int32_t n_blocks, const KvLayout& layout,
                       int32_t layer, const int32_t* block_table, int32_t n_table, const int32_t* positions, int32_t n,
                       int32_t n_heads) {
    require_device();
    // The launcher's contract; a test passing anything else has a bug of its own.
    for (int32_t t = 1; t < n; t++)
        if (positions[t] != positions[0] + t)
            throw_error("cuda_test::prefill_attention: positions[{}] = {} is not positions[0] + {}", t, positions[t],
                        t);
    const size_t q_bytes = size_t(std::max(n, 0)) * size_t(std::max(n_heads, 0)) * size_t(layout.head_dim) * 4;
    const size_t pool_bytes = size_t(n_blocks) * layout.block_bytes();
    GuardedBuffer d_out("prefill_attention out", q_bytes), d_q("prefill_attention q", q_bytes),
        d_kv("prefill_attention pool", pool_bytes), d_table("prefill_attention block_table", size_t(n_table) * 4),
        d_pos("prefill_attention positions", size_t(std::max(n, 0)) * 4);
    d_q.upload(q);
    d_kv.upload(kv);
    d_table.upload(block_table);
    d_pos.upload(positions);
    launch_prefill_attention(d_out.get<float>(), d_q.get<float>(), d_kv.get(), layout, layer, d_table.get<int32_t>(),
                             d_pos.get<int32_t>(), n, n_heads, nullptr);
    finish();
    d_out.download(out);  // checks the guard bands: nothing written outside [n, n_heads, head_dim]
    std::vector<unsigned char> pool_after(pool_bytes);
    d_kv.download(pool_after.data());
    if (!std::equal(pool_after.begin(), pool_after.end(), static_cast<const unsigned char*>(kv)))
        throw_error("prefill_attention: the KV pool changed");
}

}  // namespace kvlm::cuda_test
