// CPU forward-pass ops (see cpu_ops.h). Reductions go through the canonical dot of matmul_cpu.h or run
// in a fixed sequential order, so every result is independent of batching and threading.
#include "compute/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "compute/cpu_kernels.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace kvlm {

void embed_cpu(float* out, const int32_t* tokens, const void* table, DType dtype, int32_t n, int32_t dim) {
    const size_t row_bytes = size_t(dtype_bytes(dtype, uint64_t(dim)));  // quantized: whole blocks
    for (int32_t t = 0; t < n; t++)
        convert_to_f32(dtype, static_cast<const char*>(table) + size_t(tokens[t]) * row_bytes, out + int64_t(t) * dim,
                       size_t(dim));
}

void rmsnorm_cpu(float* out, const float* x, const float* weight, int32_t n, int32_t dim, float eps) {
    for (int32_t t = 0; t < n; t++) {
        const float* xt = x + int64_t(t) * dim;
        float* ot = out + int64_t(t) * dim;
        float sum_squares = dot_cpu(xt, DType::f32, xt, dim);
        float scale = 1.0f / std::sqrt(sum_squares / float(dim) + eps);
        for (int32_t i = 0; i < dim; i++) ot[i] = weight[i] * (xt[i] * scale);
    }
}

void add_bias_cpu(float* x, const float* bias, int32_t n, int32_t dim) {
    for (int32_t t = 0; t < n; t++)
        for (int32_t i = 0; i < dim; i++) x[int64_t(t) * dim + i] += bias[i];
}

void add_cpu(float* x, const float* y, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

void rope_inv_freq(float* out, int32_t head_dim, float theta, const RopeScaling& scaling) {
    int32_t half = head_dim / 2;
    for (int32_t i = 0; i < half; i++) out[i] = 1.0f / std::pow(theta, float(2 * i) / float(head_dim));
    if (scaling.type != "llama3") return;
    // Hugging Face _compute_llama3_parameters: long wavelengths are divided by `factor`, short ones kept,
    // the band between interpolated smoothly.
    const double pi = 3.14159265358979323846;
    double old_context = scaling.original_max_position;
    double low_freq_wavelen = old_context / scaling.low_freq_factor;
    double high_freq_wavelen = old_context / scaling.high_freq_factor;
    for (int32_t i = 0; i < half; i++) {
        double freq = out[i];
        double wavelen = 2.0 * pi / freq;
        double scaled = freq;
        if (wavelen > low_freq_wavelen) {
            scaled = freq / scaling.factor;
        } else if (wavelen >= high_freq_wavelen) {
            double smooth = (old_context / wavelen - scaling.low_freq_factor) /
                            (scaling.high_freq_factor - scaling.low_freq_factor);
            scaled = (1.0 - smooth) * freq / scaling.factor + smooth * freq;
        }
        out[i] = float(scaled);
    }
}

void rope_cpu(float* x, const int32_t* positions, const float* inv_freq, int32_t n, int32_t n_heads,
              int32_t head_dim) {
    int32_t half = head_dim / 2;
    // Per-token cos/sin, shared by all heads; head_dim is at most 1024 (ModelConfig::validate).
    float cos_table[512], sin_table[512];
    KVLM_ASSERT(half <= 512, "rope_cpu: head_dim above 1024");
    for (int32_t t = 0; t < n; t++) {
        for (int32_t i = 0; i < half; i++) {
            float angle = float(positions[t]) * inv_freq[i];
            cos_table[i] = float(std::cos(double(angle)));
            sin_table[i] = float(std::sin(double(angle)));
        }
        for (int32_t h = 0; h < n_heads; h++) {
            float* xh = x + (int64_t(t) * n_heads + h) * head_dim;
            for (int32_t i = 0; i < half; i++) {
                float x0 = xh[i], x1 = xh[i + half];
                xh[i] = x0 * cos_table[i] - x1 * sin_table[i];
                xh[i + half] = x0 * sin_table[i] + x1 * cos_table[i];
            }
        }
    }
}

void kv_write_cpu(void* kv, const KvLayout& layout, int32_t layer, const float* k, const float* v,
                  const int32_t* block_table, const int32_t* positions, int32_t n) {
    int64_t row = layout.row_elements();
    size_t element_size = dtype_size(layout.dtype);
    for (int32_t t = 0; t < n; t++) {
        int32_t pos = positions[t];
        int32_t block = block_table[pos / layout.block_size], slot = pos % layout.block_size;
        for (int32_t kind = 0; kind < 2; kind++) {
            const float* src = (kind == 0 ? k : v) + int64_t(t) * row;
            char* dst = static_cast<char*>(kv) + size_t(layout.row_offset(block, layer, kind, slot)) * element_size;
            convert_from_f32(layout.dtype, src, dst, size_t(row));
        }
    }
}

void paged_attention_cpu(float* out, const float* q, const void* kv, const KvLayout& layout, int32_t layer,
                         const int32_t* block_table, const int32_t* positions, int32_t n, int32_t n_heads,
                         ThreadPool* pool) {
    if (n <= 0) return;
    const int32_t head_dim = layout.head_dim, group = n_heads / layout.n_kv_heads;
    const size_t element_size = dtype_size(layout.dtype);
    const float inv_sqrt_dim = 1.0f / std::sqrt(float(head_dim));
    const CpuKernels& kernels = cpu_kernels();  // looked up once, not per key
    auto task = [&](int64_t begin, int64_t end) {
        // Grows once to the longest context seen on this thread; decode does not allocate.
        thread_local std::vector<float> scores;
        for (int64_t task_index = begin; task_index < end; task_index++) {
            // Head-major task order: a contiguous chunk covers all queries of some heads, which balances
            // the causal cost (later queries attend more keys) across threads.
            int32_t h = int32_t(task_index / n), t = int32_t(task_index % n);
            int32_t kv_head = h / group, n_keys = positions[t] + 1;
            if (scores.size() < size_t(n_keys)) scores.resize(size_t(n_keys));
            const float* qh = q + (int64_t(t) * n_heads + h) * head_dim;
            auto key_row = [&](int32_t j, int32_t kind) {
                int64_t offset = layout.row_offset(block_table[j / layout.block_size], layer, kind,
                                                   j % layout.block_size) + int64_t(kv_head) * head_dim;
                return static_cast<const void*>(static_cast<const char*>(kv) + size_t(offset) * element_size);
            };
            float max_score = -INFINITY;
            for (int32_t j = 0; j < n_keys; j++) {
                scores[size_t(j)] = kernels.dot(key_row(j, 0), layout.dtype, qh, head_dim) * inv_sqrt_dim;
                max_score = std::max(max_score, scores[size_t(j)]);
            }
            float sum = 0.0f;
            for (int32_t j = 0; j < n_keys; j++) {
                scores[size_t(j)] = std::exp(scores[size_t(j)] - max_score);
                sum += scores[size_t(j)];
            }
            float* oh = out + (int64_t(t) * n_heads + h) * head_dim;
            std::fill(oh, oh + head_dim, 0.0f);
            float inv_sum = 1.0f / sum;
            for (int32_t j = 0; j < n_keys; j++) kernels.axpy(oh, scores[size_t(j)] * inv_sum, key_row(j, 1), layout.dtype, head_dim);
        }
    };
    int64_t n_tasks = int64_t(n) * n_heads;
    // Small jobs (a few short heads) run on the calling thread: waking workers costs more.
    int64_t work = n_tasks * (int64_t(positions[n - 1]) + 1) * head_dim;
    if (pool && work >= (1 << 15)) pool->parallel_for(n_tasks, task);
    else task(0, n_tasks);
}

void swiglu_cpu(float* out, const float* gate, const float* up, int32_t n, int32_t n_ff) {
    int64_t total = int64_t(n) * n_ff;
    for (int64_t i = 0; i < total; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
}

}  // namespace kvlm
