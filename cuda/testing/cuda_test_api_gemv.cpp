// Test entry points for the decode GEMVs (cuda_test_api.h): guarded device copies around launch_gemv and
// launch_gemv_swiglu. Argument errors are left to the launchers, so tests see their exceptions.
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/cuda_ops.h"
#include "testing/cuda_test_api.h"
#include "testing/cuda_test_guard.h"

namespace kvlm::cuda_test {

namespace {

// Bytes of an [n_rows, n_in] matrix; for quantized dtypes rows that are not whole blocks round down (the
// launchers refuse such n_in before reading anything).
size_t matrix_bytes(DType dtype, size_t n_rows, size_t n_in) {
    if (!dtype_is_quantized(dtype)) return n_rows * n_in * dtype_size(dtype);
    const size_t block = size_t(dtype_block_elements(dtype));
    return n_rows * size_t(dtype_bytes(dtype, n_in / block * block));
}

}  // namespace

namespace {

// As gemv_tokens, with every weight matrix starting `weight_offset` elements (bytes for quantized dtypes) past
// a 16-byte boundary, so a non-zero offset forces the launcher's scalar path whatever n_in is.
void gemv_launch(float* const* outs, const void* const* weights, const DType* dtypes, const float* const* biases,
                 const int32_t* n_outs, int32_t n_outputs, const float* x, int32_t n_tokens, int32_t n_in,
                 const float* norm_weight, float norm_eps, bool accumulate, int32_t weight_offset) {
    require_device();
    const size_t n_in_elements = size_t(std::max(n_in, 0)), tokens = size_t(std::max(n_tokens, 0));
    std::vector<std::unique_ptr<GuardedBuffer>> d_outs, d_weights, d_biases;
    std::vector<GemvOutput> outputs(size_t(std::max(n_outputs, 0)));
    for (size_t i = 0; i < outputs.size(); i++) {
        const size_t n_out = size_t(std::max(n_outs[i], 0));
        const size_t w_bytes = matrix_bytes(dtypes[i], n_out, n_in_elements);
        const size_t pad = size_t(weight_offset) * (dtype_is_quantized(dtypes[i]) ? 1 : dtype_size(dtypes[i]));
        d_outs.push_back(std::make_unique<GuardedBuffer>("gemv out", tokens * n_out * sizeof(float)));
        d_weights.push_back(std::make_unique<GuardedBuffer>("gemv weight", pad + w_bytes));
        if (accumulate) d_outs.back()->upload(outs[i]);
        if (w_bytes)
            CUDA_CHECK(cudaMemcpy(d_weights.back()->get<char>() + pad, weights[i], w_bytes, cudaMemcpyHostToDevice));
        declare_immutable(d_weights.back()->get());
        GemvOutput& o = outputs[i];
        o.out = d_outs.back()->get<float>();
        o.weight = d_weights.back()->get<char>() + pad;
        o.dtype = dtypes[i];
        o.n_out = n_outs[i];
        if (biases[i]) {
            d_biases.push_back(std::make_unique<GuardedBuffer>("gemv bias", n_out * sizeof(float)));
            d_biases.back()->upload(biases[i]);
            o.bias = d_biases.back()->get<float>();
        }
    }
    GuardedBuffer d_x("gemv x", tokens * n_in_elements * sizeof(float)),
        d_norm("gemv norm_weight", norm_weight ? n_in_elements * sizeof(float) : 0);
    d_x.upload(x);
    if (norm_weight) d_norm.upload(norm_weight);
    launch_gemv_tokens(outputs.data(), n_outputs, d_x.get<float>(), n_tokens, n_in,
                       norm_weight ? d_norm.get<float>() : nullptr, norm_eps, accumulate, nullptr);
    finish();
    for (size_t i = 0; i < outputs.size(); i++) d_outs[i]->download(outs[i]);
}

}  // namespace

void gemv_offset_weights(float* const* outs, const void* const* weights, const DType* dtypes,
                         const float* const* biases, const int32_t* n_outs, int32_t n_outputs, const float* x,
                         int32_t n_in, const float* norm_weight, float norm_eps, bool accumulate,
                         int32_t weight_offset) {
    gemv_launch(outs, weights, dtypes, biases, n_outs, n_outputs, x, 1, n_in, norm_weight, norm_eps, accumulate,
                weight_offset);
}

void gemv(float* const* outs, const void* const* weights, const DType* dtypes, const float* const* biases,
          const int32_t* n_outs, int32_t n_outputs, const float* x, int32_t n_in, const float* norm_weight,
          float norm_eps, bool accumulate) {
    gemv_launch(outs, weights, dtypes, biases, n_outs, n_outputs, x, 1, n_in, norm_weight, norm_eps, accumulate, 0);
}

void gemv_tokens(float* const* outs, const void* const* weights, const DType* dtypes, const float* const* biases,
                 const int32_t* n_outs, int32_t n_outputs, const float* x, int32_t n_tokens, int32_t n_in,
                 const float* norm_weight, float norm_eps, bool accumulate) {
    gemv_launch(outs, weights, dtypes, biases, n_outs, n_outputs, x, n_tokens, n_in, norm_weight, norm_eps, accumulate,
                0);
}

void gemv_rope_kv(float* q_fused, void* kv_fused, float* q_plain, void* kv_plain, const void* const* weights,
                  DType dtype, const float* const* biases, const float* x, int32_t n_in, const float* norm_weight,
                  float norm_eps, const void* kv, int32_t n_blocks, const KvLayout& layout, int32_t layer,
                  const int32_t* block_table, int32_t n_table, int32_t position, const float* inv_freq,
                  int32_t n_heads) {
    require_device();
    const size_t rows[3] = {size_t(n_heads) * size_t(layout.head_dim), size_t(layout.row_elements()),
                            size_t(layout.row_elements())};
    const size_t pool_bytes = size_t(n_blocks) * size_t(layout.block_bytes());
    std::vector<std::unique_ptr<GuardedBuffer>> d_weights, d_biases, d_outs;
    GemvOutput qkv[3];
    for (int i = 0; i < 3; i++) {
        d_weights.push_back(std::make_unique<GuardedBuffer>("gemv_rope_kv weight", matrix_bytes(dtype, rows[i], size_t(n_in))));
        d_weights.back()->upload_immutable(weights[i]);
        d_outs.push_back(std::make_unique<GuardedBuffer>("gemv_rope_kv out", rows[i] * sizeof(float)));
        qkv[i].out = d_outs.back()->get<float>(), qkv[i].weight = d_weights.back()->get(), qkv[i].dtype = dtype;
        qkv[i].n_out = int32_t(rows[i]);
        if (biases[i]) {
            d_biases.push_back(std::make_unique<GuardedBuffer>("gemv_rope_kv bias", rows[i] * sizeof(float)));
            d_biases.back()->upload(biases[i]);
            qkv[i].bias = d_biases.back()->get<float>();
        }
    }
    GuardedBuffer d_x("gemv_rope_kv x", size_t(n_in) * sizeof(float)),
        d_norm("gemv_rope_kv norm_weight", norm_weight ? size_t(n_in) * sizeof(float) : 0),
        d_table("gemv_rope_kv table", size_t(n_table) * sizeof(int32_t)), d_pos("gemv_rope_kv position", sizeof(int32_t)),
        d_freq("gemv_rope_kv inv_freq", size_t(layout.head_dim / 2) * sizeof(float)),
        d_kv("gemv_rope_kv pool", pool_bytes);
    d_x.upload(x);
    if (norm_weight) d_norm.upload(norm_weight);
    d_table.upload(block_table);
    d_pos.upload(&position);
    d_freq.upload_immutable(inv_freq);
    const float* norm = norm_weight ? d_norm.get<float>() : nullptr;

    d_kv.upload(kv);
    launch_gemv_rope_kv(qkv, d_x.get<float>(), n_in, norm, norm_eps, d_kv.get(), layout, layer, d_table.get<int32_t>(),
                        d_pos.get<int32_t>(), d_freq.get<float>(), nullptr);
    finish();
    d_outs[0]->download(q_fused);
    d_kv.download(kv_fused);

    d_kv.upload(kv);
    launch_gemv(qkv, 3, d_x.get<float>(), n_in, norm, norm_eps, false, nullptr);
    launch_rope_kv_write(qkv[0].out, qkv[1].out, qkv[2].out, d_kv.get(), layout, layer, d_table.get<int32_t>(),
                         d_pos.get<int32_t>(), d_freq.get<float>(), 1, n_heads, nullptr);
    finish();
    d_outs[0]->download(q_plain);
    d_kv.download(kv_plain);
}

void use_gemv_launch_rules(const GemvLaunchRules& rules) { kvlm::set_gemv_launch_rules(rules); }

int gemv_split_count(int32_t n_rows, int32_t n_in, DType dtype, bool swiglu) {
    return kvlm::gemv_split_count(n_rows, n_in, dtype, swiglu);
}

void gemv_swiglu(float* out, const float* x, const void* w_gate, const void* w_up, DType dtype, int32_t n_in,
                 int32_t n_ff, const float* norm_weight, float norm_eps) {
    gemv_swiglu_tokens(out, x, 1, w_gate, w_up, dtype, n_in, n_ff, norm_weight, norm_eps);
}

void gemv_swiglu_tokens(float* out, const float* x, int32_t n_tokens, const void* w_gate, const void* w_up,
                        DType dtype, int32_t n_in, int32_t n_ff, const float* norm_weight, float norm_eps) {
    require_device();
    const size_t n_in_elements = size_t(std::max(n_in, 0)), n_ff_elements = size_t(std::max(n_ff, 0));
    const size_t tokens = size_t(std::max(n_tokens, 0));
    const size_t w_bytes = matrix_bytes(dtype, n_ff_elements, n_in_elements);
    GuardedBuffer d_out("gemv_swiglu out", tokens * n_ff_elements * sizeof(float)),
        d_x("gemv_swiglu x", tokens * n_in_elements * sizeof(float)), d_gate("gemv_swiglu gate", w_bytes),
        d_up("gemv_swiglu up", w_bytes), d_norm("gemv_swiglu norm_weight", norm_weight ? n_in_elements * 4 : 0);
    d_x.upload(x);
    d_gate.upload_immutable(w_gate);
    d_up.upload_immutable(w_up);
    if (norm_weight) d_norm.upload(norm_weight);
    launch_gemv_swiglu_tokens(d_out.get<float>(), d_x.get<float>(), n_tokens, d_gate.get(), d_up.get(), dtype, n_in,
                              n_ff, norm_weight ? d_norm.get<float>() : nullptr, norm_eps, nullptr);
    finish();
    d_out.download(out);
}

}  // namespace kvlm::cuda_test
