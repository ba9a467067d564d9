// CPU forward-pass ops (see cpu_ops.h). Reductions go through the canonical dot of matmul_cpu.h or run
// in a fixed sequential order, so every result is independent of batching and threading.
#include "compute/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <numeric>
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
    for (int32_t t = 0; t < n; t++) {
        int32_t pos = positions[t];
        int32_t block = block_table[pos / layout.block_size], slot = pos % layout.block_size;
        for (int32_t kind = 0; kind < 2; kind++) {
            const float* src = (kind == 0 ? k : v) + int64_t(t) * row;
            char* dst = static_cast<char*>(kv) + layout.row_byte_offset(block, layer, kind, slot);
            convert_from_f32(layout.dtype, src, dst, size_t(row));
        }
    }
}

void paged_attention_cpu(float* out, const float* q, const void* kv, const KvLayout& layout, int32_t layer,
                         const int32_t* block_table, const int32_t* positions, int32_t n, int32_t n_heads,
                         ThreadPool* pool) {
    if (n <= 0) return;
    const int32_t head_dim = layout.head_dim, group = n_heads / layout.n_kv_heads;
    const CpuKernels& kernels = cpu_kernels();  // looked up once, not per chunk
    // A task is a tile of consecutive queries of the query heads that share a KV head (or of one head, where
    // that leaves too few tasks for the threads): each chunk of keys is read once for all its query rows (and
    // stays in L1 while they use it). Every query's result is the same bits whatever the tile and grouping, so
    // both are free to change with n.
    constexpr int32_t kTileQueries = 16;
    const int32_t n_tiles = (n + kTileQueries - 1) / kTileQueries;
    const int32_t n_threads = pool ? pool->n_threads() : 1;
    // Grouping widens each chunk once for all the heads of a KV head (per query row about 2/3 of the cost of
    // reading the rows per query: decode of a 9/3-head layer at 4,096 tokens, 0.77 -> 0.52 ms on one thread) but
    // leaves fewer tasks to share: group where the estimated time of the slowest thread is lower.
    auto makespan = [&](int64_t n_tasks, double task_cost) {
        return double((n_tasks + n_threads - 1) / n_threads) * task_cost;
    };
    const bool grouped = makespan(int64_t(n_tiles) * layout.n_kv_heads, group * (2.0 / 3.0)) <=
                         makespan(int64_t(n_tiles) * n_heads, 1.0);
    const int32_t heads_per_task = grouped ? group : 1;
    const int32_t n_head_groups = n_heads / heads_per_task;
    auto task = [&](int64_t index) {
        // Costliest first (the last tiles see the most keys), for the dynamic scheduling below.
        const int32_t tile = n_tiles - 1 - int32_t(index / n_head_groups);
        const int32_t h0 = int32_t(index % n_head_groups) * heads_per_task, kv_head = h0 / group;
        const int32_t t0 = tile * kTileQueries, n_tokens = std::min(kTileQueries, n - t0);
        const int32_t n_q = n_tokens * heads_per_task;
        // Per thread; grows once (decode does not allocate).
        thread_local std::vector<float> state;
        thread_local std::vector<int32_t> last, order;
        const size_t n_widened = size_t(2 * kAttentionChunk) * size_t(head_dim);
        const size_t n_state = size_t(n_q) * size_t(2 * head_dim + 2) + size_t(kAttentionChunk) + n_widened;
        if (state.size() < n_state) state.resize(n_state);
        last.resize(size_t(n_q));
        // Query rows (token t0 + r / heads_per_task, head h0 + r % heads_per_task) in increasing position (a
        // forward pass gives the tokens so; tests may not), so that the rows seeing a chunk of keys are always a
        // suffix.
        order.resize(size_t(n_q));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
            return positions[t0 + a / heads_per_task] < positions[t0 + b / heads_per_task];
        });
        auto row_offset = [&](int32_t i) {  // of query row i (in position order) in q and out
            const int32_t r = order[size_t(i)], t = t0 + r / heads_per_task, h = h0 + r % heads_per_task;
            return (int64_t(t) * n_heads + h) * head_dim;
        };
        float* queries = state.data();
        float* o = queries + size_t(n_q) * size_t(head_dim);
        float* m = o + size_t(n_q) * size_t(head_dim);
        float* l = m + n_q;
        float* scores = l + n_q;
        float* widened = scores + kAttentionChunk;
        for (int32_t i = 0; i < n_q; i++) {
            const float* qh = q + row_offset(i);
            std::copy(qh, qh + head_dim, queries + int64_t(i) * head_dim);
            last[size_t(i)] = positions[t0 + order[size_t(i)] / heads_per_task];
            m[i] = -INFINITY;
            l[i] = 0.0f;
        }
        std::fill(o, o + int64_t(n_q) * head_dim, 0.0f);
        const float scale = 1.0f / std::sqrt(float(head_dim));
        const int32_t last_key = last[size_t(n_q - 1)];
        const void* k_rows[kAttentionChunk];
        const void* v_rows[kAttentionChunk];
        int32_t first = 0;  // the first query row (in position order) that sees the chunk
        for (int32_t key0 = 0; key0 <= last_key; key0 += kAttentionChunk) {
            while (last[size_t(first)] < key0) first++;
            const int32_t n_keys = std::min(kAttentionChunk, last_key - key0 + 1);
            for (int32_t j = 0; j < n_keys; j++) {
                const int32_t pos = key0 + j, block = block_table[pos / layout.block_size], slot = pos % layout.block_size;
                const int64_t head_offset = layout.bytes_of(int64_t(kv_head) * head_dim);
                k_rows[j] = static_cast<const char*>(kv) + layout.row_byte_offset(block, layer, 0, slot) + head_offset;
                v_rows[j] = static_cast<const char*>(kv) + layout.row_byte_offset(block, layer, 1, slot) + head_offset;
            }
            const AttentionQueries tile_queries{queries + int64_t(first) * head_dim,
                                                last.data() + first,
                                                m + first,
                                                l + first,
                                                o + int64_t(first) * head_dim,
                                                scores,
                                                n_q - first,
                                                head_dim,
                                                scale};
            kernels.attend_block(tile_queries, AttentionKeys{k_rows, v_rows, layout.dtype, key0, n_keys, widened});
        }
        for (int32_t i = 0; i < n_q; i++) {
            float* oh = out + row_offset(i);
            const float inv_sum = 1.0f / l[i];
            for (int32_t d = 0; d < head_dim; d++) oh[d] = o[int64_t(i) * head_dim + d] * inv_sum;
        }
    };
    const int64_t n_tasks = int64_t(n_tiles) * n_head_groups;
    // Small jobs (a few short heads) run on the calling thread: waking workers costs more.
    const int64_t work = int64_t(n) * n_heads * (int64_t(positions[n - 1]) + 1) * head_dim;
    if (pool && work >= (1 << 15)) {
        pool->parallel_for_each(n_tasks, task);
    } else {
        for (int64_t i = 0; i < n_tasks; i++) task(i);
    }
}

double exp_sum_cpu(const float* x, int64_t n, float shift) { return cpu_kernels().exp_sum(x, n, shift); }

void swiglu_cpu(float* out, const float* gate, const float* up, int32_t n, int32_t n_ff) {
    cpu_kernels().swiglu(out, gate, up, int64_t(n) * n_ff);
}

}  // namespace kvlm
