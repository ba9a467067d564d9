// Test entry points (see cuda_test_api.h) for the decode step's kernels: fixed-split attention and the fused
// RoPE + KV write, as guarded device copies around the shipped launchers.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cuda_ops.h"
#include "runtime/cuda_check.h"
#include "testing/cuda_test_api.h"
#include "testing/cuda_test_guard.h"
#include "util/error.h"

namespace kvlm::cuda_test {

// Not in cuda_test_api.h (whose declarations are fixed): tests/cuda/test_decode_kernels.cpp declares it
// itself. The split count launch_paged_attention picks, with scratch_rows rows of scratch (0: none).
int32_t paged_attention_split_count(int32_t n, int32_t n_heads, int32_t n_kv_heads, int32_t max_keys, int32_t n_sms,
                                    int64_t scratch_rows) {
    AttentionScratch scratch;
    // Only the pointer's presence matters to the split choice; it is never dereferenced here.
    static float placeholder;
    if (scratch_rows > 0) scratch.partials = &placeholder, scratch.max_rows = scratch_rows;
    return kvlm::paged_attention_split_count(n, n_heads, n_kv_heads, max_keys, n_sms, scratch);
}

void paged_attention_splits(float* out, const float* q, const void* kv, int32_t n_blocks, const KvLayout& layout,
                            int32_t layer, const int32_t* block_table, int32_t n_table, const int32_t* positions,
                            int32_t n, int32_t n_heads, int32_t n_splits, int32_t n_sms) {
    require_device();
    const size_t q_bytes = size_t(n) * n_heads * layout.head_dim * 4;
    const int64_t scratch_rows = int64_t(n) * n_heads * n_splits;
    const size_t scratch_bytes = size_t(scratch_rows) * (kCudaMaxHeadDim + 2) * 4;
    GuardedBuffer d_out("attention_splits out", q_bytes), d_q("attention_splits q", q_bytes),
        d_kv("attention_splits pool", size_t(n_blocks) * layout.block_bytes()),
        d_table("attention_splits block_table", size_t(n_table) * 4),
        d_pos("attention_splits positions", size_t(n) * 4), d_scratch("attention_splits scratch", scratch_bytes);
    d_q.upload(q);
    d_kv.upload(kv);
    d_table.upload(block_table);
    d_pos.upload(positions);
    AttentionScratch scratch;
    scratch.partials = d_scratch.get<float>(), scratch.max_rows = scratch_rows;
    launch_paged_attention_splits(d_out.get<float>(), d_q.get<float>(), d_kv.get(), layout, layer,
                                  d_table.get<int32_t>(), d_pos.get<int32_t>(), n, n_heads, n_splits, n_sms, scratch,
                                  nullptr);
    finish();
    d_out.download(out);
    d_scratch.check_guards();
    if (n_splits == 1) {  // unsplit attention writes out directly and must leave the scratch alone
        std::vector<unsigned char> scratch_host(scratch_bytes);
        d_scratch.download(scratch_host.data());
        auto poisoned = [](unsigned char b) { return b == 0xFF; };
        if (!std::all_of(scratch_host.begin(), scratch_host.end(), poisoned))
            throw_error("paged_attention_splits: n_splits = 1 wrote to the scratch");
    }
}

void rope_kv_write(float* q, float* k, const float* v, void* kv, int32_t n_blocks, const KvLayout& layout,
                   int32_t layer, const int32_t* block_table, int32_t n_table, const int32_t* positions,
                   const float* inv_freq, int32_t n, int32_t n_heads) {
    require_device();
    const size_t q_bytes = size_t(n) * n_heads * layout.head_dim * 4, kv_bytes = size_t(n) * layout.row_elements() * 4;
    GuardedBuffer d_q("rope_kv_write q", q_bytes), d_k("rope_kv_write k", kv_bytes), d_v("rope_kv_write v", kv_bytes),
        d_kv("rope_kv_write pool", size_t(n_blocks) * layout.block_bytes()),
        d_table("rope_kv_write block_table", size_t(n_table) * 4), d_pos("rope_kv_write positions", size_t(n) * 4),
        d_freq("rope_kv_write inv_freq", size_t(layout.head_dim / 2) * 4);
    d_q.upload(q);
    d_k.upload(k);
    d_v.upload(v);
    d_kv.upload(kv);
    d_table.upload(block_table);
    d_pos.upload(positions);
    d_freq.upload(inv_freq);
    launch_rope_kv_write(d_q.get<float>(), d_k.get<float>(), d_v.get<float>(), d_kv.get(), layout, layer,
                         d_table.get<int32_t>(), d_pos.get<int32_t>(), d_freq.get<float>(), n, n_heads, nullptr);
    finish();
    d_q.download(q);
    d_k.download(k);
    d_kv.download(kv);
    std::vector<float> v_after(size_t(n) * layout.row_elements());
    d_v.download(v_after.data());  // checks its guard bands
    if (!std::equal(v_after.begin(), v_after.end(), v, [](float a, float b) { return std::memcmp(&a, &b, 4) == 0; }))
        throw_error("rope_kv_write: v changed");
}

}  // namespace kvlm::cuda_test
