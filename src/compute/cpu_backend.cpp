// CPU backend: owns the KV block storage (n_kv_blocks records of KvLayout::block_bytes(), one every
// KvLayout::stride() bytes), scratch
// buffers sized for the largest batch (decode allocates nothing) and the thread pool.
#include "compute/cpu_backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "compute/cpu_ops.h"
#include "format/model_file.h"
#include "util/byte_size.h"
#include "util/error.h"
#include "util/huge_buffer.h"
#include "util/thread_pool.h"

namespace kvlm {

namespace {

// Activation scratch ([kCpuMaxBatch] rows, 13 MB for SmolLM2) from calloc: fresh pages that the OS zeroes on
// first touch, so a next turn's one-token steps do not fault in rows they never use (vector::resize wrote
// all of them at start-up).
class ZeroedFloats {
public:
    void allocate(size_t n) {
        data_.reset(static_cast<float*>(std::calloc(std::max<size_t>(n, 1), sizeof(float))));
        if (!data_) throw std::bad_alloc();
    }
    float* data() const { return data_.get(); }

private:
    struct Free {
        void operator()(float* p) const { std::free(p); }
    };
    std::unique_ptr<float, Free> data_;
};

class CpuBackend final : public Backend {
public:
    CpuBackend(const ModelConfig& config, const ModelWeights& weights, const BackendOptions& options)
        : config_(config), weights_(weights), pool_(options.n_threads) {
        config_.validate("cpu backend");
        check_model_weights(config_, weights_, "cpu backend");
        if (options.block_size < 1) throw_error("cpu backend: block size {} must be at least 1", options.block_size);
        check_kv_dtype(config_, options.kv_dtype);
        layout_ = KvLayout::of(config_, options.block_size, options.kv_dtype);
        stride_ = layout_.block_bytes();
        n_kv_blocks_ = kv_blocks_for_free_memory(kv_block_count(config_, options), options, host_available_memory(),
                                                 stride_);
        size_t total = size_t(n_kv_blocks_) * stride_;
        if (total / stride_ != size_t(n_kv_blocks_)) throw_error("cpu backend: KV cache size overflows");
        if (!kv_memory_.allocate(total))
            throw_error("cpu backend: the KV pool of {} blocks ({}, {} tokens per block, {}) does not fit in memory; {}",
                        n_kv_blocks_, byte_size_text(total), layout_.block_size, dtype_name(layout_.dtype),
                        kv_pool_advice(config_, options));
        kv_ = kv_memory_.data();

        inv_freq_.resize(size_t(config_.head_dim / 2));
        rope_inv_freq(inv_freq_.data(), config_.head_dim, config_.rope_theta, config_.rope_scaling);

        max_batch_ = int32_t(std::min<int64_t>(kCpuMaxBatch, int64_t(n_kv_blocks_) * options.block_size));
        max_batch_ = std::max(max_batch_, 1);
        size_t b = size_t(max_batch_);
        int64_t q_dim = int64_t(config_.n_heads) * config_.head_dim, kv_dim = layout_.row_elements();
        x_.allocate(b * size_t(config_.n_embd));
        h_.allocate(b * size_t(config_.n_embd));
        tmp_.allocate(b * size_t(config_.n_embd));
        q_.allocate(b * size_t(q_dim));
        att_.allocate(b * size_t(q_dim));
        k_.allocate(b * size_t(kv_dim));
        v_.allocate(b * size_t(kv_dim));
        gate_.allocate(b * size_t(config_.n_ff));
        up_.allocate(b * size_t(config_.n_ff));
        positions_.resize(b);
        tokens_.resize(b);
        name_ = fmt::format("cpu ({} threads, {})", pool_.n_threads(), cpu_path_text());
    }

    std::string name() const override { return name_; }
    // tests/compute/test_cpu_backend.cpp
    int32_t exact_forward_tokens() const override { return INT32_MAX; }
    const ModelConfig& config() const override { return config_; }
    int32_t n_kv_blocks() const override { return n_kv_blocks_; }
    size_t kv_block_bytes() const override { return layout_.block_bytes(); }

    void read_kv_block(int32_t block, void* dst) const override {
        check_block(block, "read_kv_block");
        std::memcpy(dst, kv_ + size_t(block) * stride_, kv_block_bytes());
    }
    void write_kv_block(int32_t block, const void* src) override {
        check_block(block, "write_kv_block");
        std::memcpy(kv_ + size_t(block) * stride_, src, kv_block_bytes());
    }
    void* host_kv_block(int32_t block) override {
        check_block(block, "host_kv_block");
        return kv_ + size_t(block) * stride_;
    }
    void make_kv_memory_cold() override {
        kv_memory_.remap_anonymous(0, size_t(n_kv_blocks_) * stride_);
    }
    void copy_kv_block(int32_t src_block, int32_t dst_block) override {
        check_block(src_block, "copy_kv_block");
        check_block(dst_block, "copy_kv_block");
        if (src_block == dst_block) return;
        std::memcpy(kv_ + size_t(dst_block) * stride_, kv_ + size_t(src_block) * stride_, kv_block_bytes());
    }

    void forward(const int32_t* tokens, int32_t n_tokens, int32_t pos, const BlockTable& table, float* logits,
                 bool all_logits) override {
        check_forward(tokens, n_tokens, pos, table);
        for (int32_t start = 0; start < n_tokens; start += max_batch_) {
            Segment segment;
            segment.tokens = tokens + start;
            segment.n = std::min(max_batch_, n_tokens - start);
            segment.pos = pos + start;
            segment.block_table = table.blocks.data();
            segment.all_logits = all_logits;
            if (all_logits) segment.logits = logits + int64_t(start) * config_.n_vocab;
            else if (start + segment.n == n_tokens) segment.logits = logits;
            forward_batch(&segment, 1);
        }
    }

    void forward_sequences(const SequenceInput* inputs, size_t n_inputs) override {
        for (size_t i = 0; i < n_inputs; i++) {
            check_forward(inputs[i].tokens, inputs[i].n_tokens, inputs[i].pos, *inputs[i].table);
            reset_outcomes(inputs[i]);  // the host samples
        }
        // Consecutive sequences share a batch while their rows fit; one longer than a batch runs alone.
        std::vector<Segment> batch;
        int32_t n_rows = 0;
        auto flush = [&] {
            if (!batch.empty()) forward_batch(batch.data(), batch.size());
            batch.clear();
            n_rows = 0;
        };
        for (size_t i = 0; i < n_inputs; i++) {
            const SequenceInput& in = inputs[i];
            if (in.n_tokens > max_batch_) {
                flush();
                forward(in.tokens, in.n_tokens, in.pos, *in.table, in.logits, in.all_logits);
                continue;
            }
            if (n_rows + in.n_tokens > max_batch_) flush();
            batch.push_back(Segment{in.tokens, in.n_tokens, in.pos, in.table->blocks.data(), in.logits, in.all_logits});
            n_rows += in.n_tokens;
        }
        flush();
        for (size_t i = 0; i < n_inputs; i++) best_tokens_on_host(inputs[i]);
    }

private:
    void check_block(int32_t block, const char* what) const { check_kv_block("cpu backend", block, n_kv_blocks_, what); }

    void check_forward(const int32_t* tokens, int32_t n_tokens, int32_t pos, const BlockTable& table) const {
        check_forward_args("cpu backend", config_, layout_.block_size, n_kv_blocks_, tokens, n_tokens, pos, table);
    }

    // One sequence's rows in a batch (forward_batch): tokens at positions pos.., K/V through block_table.
    struct Segment {
        const int32_t* tokens = nullptr;
        int32_t n = 0;
        int32_t pos = 0;
        const int32_t* block_table = nullptr;
        float* logits = nullptr;  // the last row's [n_vocab], or all n rows' with all_logits; null: none
        bool all_logits = false;
    };

    // Runs the segments' rows (together <= max_batch_) through the model: every matmul once over all rows,
    // the KV write and attention per segment. Each row's result is the same bits in any batch.
    void forward_batch(const Segment* segments, size_t n_segments) {
        const ModelConfig& c = config_;
        const int32_t dim = c.n_embd, q_dim = c.n_heads * c.head_dim, kv_dim = int32_t(layout_.row_elements());
        ThreadPool* pool = &pool_;
        int32_t n = 0;
        for (size_t s = 0; s < n_segments; s++) {
            const Segment& segment = segments[s];
            std::copy_n(segment.tokens, segment.n, tokens_.data() + n);
            for (int32_t t = 0; t < segment.n; t++) positions_[size_t(n + t)] = segment.pos + t;
            n += segment.n;
        }
        KVLM_ASSERT(n <= max_batch_, "cpu backend: batch larger than its scratch");
        float *x = x_.data(), *h = h_.data(), *tmp = tmp_.data(), *q = q_.data(), *k = k_.data(), *v = v_.data();
        float *att = att_.data(), *gate = gate_.data(), *up = up_.data();
        const int32_t* positions = positions_.data();

        embed_cpu(x, tokens_.data(), weights_.token_embd.data, weights_.token_embd.dtype, n, dim);
        // Weight shapes were checked against the config: w is [rows, cols].
        auto matmul = [&](float* out, const float* in, const TensorView& w) {
            matmul_cpu(out, in, w.data, w.dtype, n, w.shape[1], w.shape[0], pool);
        };
        auto output_of = [](float* out, const TensorView& w) { return MatmulOutput{out, w.data, w.dtype, w.shape[0]}; };
        // Element-wise ops split over tokens, but only when the batch is big enough to pay for the wake-up.
        auto over_tokens = [&](int64_t per_token, FunctionRef<void(int64_t, int64_t)> fn) {
            if (int64_t(n) * per_token >= (1 << 15)) pool_.parallel_for(n, fn);
            else fn(0, n);
        };
        auto rmsnorm = [&](float* out, const float* in, const TensorView& w) {
            over_tokens(dim, [&](int64_t b, int64_t e) {
                rmsnorm_cpu(out + b * dim, in + b * dim, static_cast<const float*>(w.data), int32_t(e - b), dim,
                            c.norm_eps);
            });
        };
        for (int32_t layer = 0; layer < c.n_layers; layer++) {
            const LayerWeights& lw = weights_.layers[size_t(layer)];
            rmsnorm(h, x, lw.attn_norm);
            const MatmulOutput qkv[] = {output_of(q, lw.attn_q), output_of(k, lw.attn_k), output_of(v, lw.attn_v)};
            matmul_cpu_shared_input(qkv, 3, h, n, dim, pool);
            if (c.qkv_bias) {
                add_bias_cpu(q, static_cast<const float*>(lw.attn_q_bias.data), n, q_dim);
                add_bias_cpu(k, static_cast<const float*>(lw.attn_k_bias.data), n, kv_dim);
                add_bias_cpu(v, static_cast<const float*>(lw.attn_v_bias.data), n, kv_dim);
            }
            rope_cpu(q, positions, inv_freq_.data(), n, c.n_heads, c.head_dim);
            rope_cpu(k, positions, inv_freq_.data(), n, c.n_kv_heads, c.head_dim);
            for (size_t s = 0, row = 0; s < n_segments; row += size_t(segments[s].n), s++) {
                const Segment& segment = segments[s];
                kv_write_cpu(kv_, layout_, layer, k + row * kv_dim, v + row * kv_dim, segment.block_table,
                             positions + row, segment.n);
                paged_attention_cpu(att + row * q_dim, q + row * q_dim, kv_, layout_, layer, segment.block_table,
                                    positions + row, segment.n, c.n_heads, pool);
            }
            matmul(tmp, att, lw.attn_output);
            add_cpu(x, tmp, int64_t(n) * dim);

            rmsnorm(h, x, lw.ffn_norm);
            const MatmulOutput gate_up[] = {output_of(gate, lw.ffn_gate), output_of(up, lw.ffn_up)};
            matmul_cpu_shared_input(gate_up, 2, h, n, dim, pool);
            over_tokens(c.n_ff, [&](int64_t b, int64_t e) {
                swiglu_cpu(gate + b * c.n_ff, gate + b * c.n_ff, up + b * c.n_ff, int32_t(e - b), c.n_ff);
            });
            matmul(tmp, gate, lw.ffn_down);
            add_cpu(x, tmp, int64_t(n) * dim);
        }
        // Logits: all rows of an all_logits segment straight into its buffer; the last rows of the others
        // gathered, so that the output matrix is streamed once for all of them.
        const TensorView& out_w = weights_.output;
        const float* norm_w = static_cast<const float*>(weights_.output_norm.data);
        int32_t n_last = 0;
        for (size_t s = 0, row = 0; s < n_segments; row += size_t(segments[s].n), s++) {
            const Segment& segment = segments[s];
            if (!segment.logits) continue;
            if (segment.all_logits) {
                rmsnorm_cpu(h, x + row * dim, norm_w, segment.n, dim, c.norm_eps);
                matmul_cpu(segment.logits, h, out_w.data, out_w.dtype, segment.n, dim, c.n_vocab, pool);
            } else {
                rmsnorm_cpu(tmp + int64_t(n_last) * dim, x + (row + size_t(segment.n) - 1) * dim, norm_w, 1, dim,
                            c.norm_eps);
                n_last++;
            }
        }
        if (n_last == 0) return;
        float* out = nullptr;
        if (n_last == 1) {
            for (size_t s = 0; s < n_segments; s++)
                if (segments[s].logits && !segments[s].all_logits) out = segments[s].logits;
        } else {
            last_logits_.resize(size_t(n_last) * size_t(c.n_vocab));
            out = last_logits_.data();
        }
        matmul_cpu(out, tmp, out_w.data, out_w.dtype, n_last, dim, c.n_vocab, pool);
        if (n_last == 1) return;
        for (size_t s = 0, i = 0; s < n_segments; s++)
            if (segments[s].logits && !segments[s].all_logits)
                std::copy_n(last_logits_.data() + (i++) * size_t(c.n_vocab), c.n_vocab, segments[s].logits);
    }

    ModelConfig config_;
    ModelWeights weights_;
    ThreadPool pool_;
    KvLayout layout_;
    int32_t n_kv_blocks_ = 0;
    int32_t max_batch_ = 1;
    HugeBuffer kv_memory_;
    char* kv_ = nullptr;  // kv_memory_: [n_kv_blocks] block records, one every stride_ bytes
    size_t stride_ = 0;   // bytes of a block record, from one to the next in kv_
    std::vector<float> inv_freq_;  // [head_dim / 2]
    // Scratch for one batch: x/h/tmp [max_batch, n_embd], q/att [max_batch, n_heads*head_dim],
    // k/v [max_batch, n_kv_heads*head_dim], gate/up [max_batch, n_ff].
    ZeroedFloats x_, h_, tmp_, q_, att_, k_, v_, gate_, up_;
    std::vector<int32_t> positions_, tokens_;  // [max_batch]
    std::vector<float> last_logits_;  // [sequences in a batch, n_vocab]: their last rows' logits
    std::string name_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const ModelConfig& config, const ModelWeights& weights,
                                          const BackendOptions& options) {
    return std::make_unique<CpuBackend>(config, weights, options);
}

std::unique_ptr<Backend> make_cpu_backend(const ModelFile& model, const BackendOptions& options) {
    return make_cpu_backend(model.config(), bind_model_weights(model), options);
}

}  // namespace kvlm
