// CUDA backend: the Llama forward pass of cpu_backend.cpp with every op on the GPU (one stream). Owns the
// weights (uploaded once through pinned staging), the KV pool ([n_kv_blocks] block records in device
// memory, the CPU backend's layout, so KV block bytes move unchanged between backends) and scratch sized
// for the largest batch: after construction, forward() allocates nothing.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include "cpu_ops.h"
#include "cublas_loader.h"
#include "cuda_backend.h"
#include "device_peaks.h"
#include "cuda_check.h"
#include "cuda_ops.h"
#include "error.h"
#include "matmul.h"
#include "model_file.h"
#include "progress.h"

namespace kvlm {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr int32_t kCudaMaxBatch = 512;        // tokens per forward batch (longer prompts are chunked)
constexpr int64_t kAttentionSplitRows = 256;  // (head, split) rows per query head of attention scratch
constexpr size_t kStagingBytes = 32u << 20;   // per pinned staging buffer (two, double-buffered)

// Device allocations freed when the owner dies (also when its constructor throws half-way).
class DeviceArena {
public:
    DeviceArena() = default;
    DeviceArena(const DeviceArena&) = delete;
    DeviceArena& operator=(const DeviceArena&) = delete;
    ~DeviceArena() {
        for (void* p : blocks_) cudaFree(p);
    }
    // Returns nullptr when the device is out of memory (the caller names what did not fit).
    void* try_alloc(size_t bytes) {
        void* p = nullptr;
        cudaError_t status = cudaMalloc(&p, std::max<size_t>(bytes, 256));
        if (status == cudaErrorMemoryAllocation) {
            cudaGetLastError();  // clear it: an allocation failure is not sticky
            return nullptr;
        }
        CUDA_CHECK(status);
        blocks_.push_back(p);
        return p;
    }
    template <typename T>
    T* alloc(size_t count, const char* what) {
        void* p = try_alloc(count * sizeof(T));
        if (!p) throw_error("cuda backend: out of device memory allocating {} ({:.2f} GiB){}", what,
                            double(count * sizeof(T)) / kGiB, free_memory_note());
        return static_cast<T*>(p);
    }
    static std::string free_memory_note() {
        size_t free_bytes = 0, total_bytes = 0;
        if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return "";
        return fmt::format("; {:.2f} GiB of {:.2f} GiB free on the device", double(free_bytes) / kGiB,
                           double(total_bytes) / kGiB);
    }

private:
    std::vector<void*> blocks_;
};

class PinnedBuffer {
public:
    explicit PinnedBuffer(size_t bytes) { CUDA_CHECK(cudaMallocHost(&ptr_, std::max<size_t>(bytes, 64))); }
    ~PinnedBuffer() { cudaFreeHost(ptr_); }
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;
    char* data() const { return static_cast<char*>(ptr_); }

private:
    void* ptr_ = nullptr;
};

struct Stream {
    cudaStream_t stream = nullptr;
    Stream() { CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)); }
    ~Stream() {
        if (stream) cudaStreamDestroy(stream);
    }
};

struct CublasHandle {
    cublasHandle_t handle = nullptr;
    CublasHandle() { CUBLAS_CHECK(cublas_api().create(&handle)); }
    ~CublasHandle() {
        if (handle) cublas_api().destroy(handle);
    }
};

// Selects device 0 and checks it before anything else is created.
int select_device(cudaDeviceProp* prop) {
    std::string why;
    if (!cuda_available(&why)) throw_error("cuda backend: no usable CUDA device: {}", why);
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaGetDeviceProperties(prop, 0));
    return 0;
}

class CudaBackend final : public Backend {
public:
    CudaBackend(const ModelConfig& config, const ModelWeights& weights, const BackendOptions& options,
                bool show_progress)
        : config_(config), device_(select_device(&prop_)) {
        config_.validate("cuda backend");
        check_model_weights(config_, weights, "cuda backend");
        if (options.block_size < 1) throw_error("cuda backend: block size {} must be at least 1", options.block_size);
        if (config_.head_dim > kCudaMaxHeadDim)
            throw_error("cuda backend: head_dim {} is above the {} the attention kernel supports (use --device cpu)",
                        config_.head_dim, kCudaMaxHeadDim);
        stream_ = std::make_unique<Stream>();
        cublas_ = std::make_unique<CublasHandle>();  // loads cuBLAS; throws naming the library when missing
        n_kv_blocks_ = kv_block_count(config_, options);
        layout_ = KvLayout::of(config_, options.block_size, options.kv_dtype);

        upload_weights(weights, show_progress);
        allocate_kv_pool();
        allocate_scratch();
        name_ = fmt::format("cuda ({}, {} SMs, {:.0f} GiB)", prop_.name, prop_.multiProcessorCount,
                            double(prop_.totalGlobalMem) / kGiB);
    }

    ~CudaBackend() override {
        if (stream_) cudaStreamSynchronize(stream_->stream);
    }

    std::string name() const override { return name_; }
    const ModelConfig& config() const override { return config_; }
    DevicePeaks peaks() const override {
        int clock_khz = 0, bus_bits = 0;
        if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0) != cudaSuccess) clock_khz = 0;
        if (cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0) != cudaSuccess) bus_bits = 0;
        cudaGetLastError();
        return cuda_device_peaks(prop_.name, clock_khz, bus_bits);
    }
    size_t kv_block_bytes() const override { return layout_.block_bytes(); }

    void read_kv_block(int32_t block, void* dst) const override {
        check_block(block, "read_kv_block");
        CUDA_CHECK(cudaMemcpyAsync(dst, kv_ + size_t(block) * kv_block_bytes(), kv_block_bytes(),
                                   cudaMemcpyDeviceToHost, stream()));
        CUDA_CHECK(cudaStreamSynchronize(stream()));
    }
    void write_kv_block(int32_t block, const void* src) override {
        check_block(block, "write_kv_block");
        CUDA_CHECK(cudaMemcpyAsync(kv_ + size_t(block) * kv_block_bytes(), src, kv_block_bytes(),
                                   cudaMemcpyHostToDevice, stream()));
        CUDA_CHECK(cudaStreamSynchronize(stream()));
    }
    void copy_kv_block(int32_t src_block, int32_t dst_block) override {
        check_block(src_block, "copy_kv_block");
        check_block(dst_block, "copy_kv_block");
        if (src_block == dst_block) return;
        CUDA_CHECK(cudaMemcpyAsync(kv_ + size_t(dst_block) * kv_block_bytes(), kv_ + size_t(src_block) * kv_block_bytes(),
                                   kv_block_bytes(), cudaMemcpyDeviceToDevice, stream()));
        CUDA_CHECK(cudaStreamSynchronize(stream()));
    }

    void forward(const int32_t* tokens, int32_t n_tokens, int32_t pos, const BlockTable& table, float* logits,
                 bool all_logits) override {
        check_forward(tokens, n_tokens, pos, table);
        const int64_t n_blocks_used = (int64_t(pos) + n_tokens + layout_.block_size - 1) / layout_.block_size;
        ensure_table_capacity(n_blocks_used);
        for (int32_t start = 0; start < n_tokens; start += max_batch_) {
            int32_t n = std::min(max_batch_, n_tokens - start);
            float* out = nullptr;
            if (all_logits) out = logits + int64_t(start) * config_.n_vocab;
            else if (start + n == n_tokens) out = logits;
            // The pinned staging may still feed the previous chunk's upload: wait before rewriting it.
            CUDA_CHECK(cudaStreamSynchronize(stream()));
            int32_t* host = reinterpret_cast<int32_t*>(ints_host_->data());
            std::memcpy(host, tokens + start, size_t(n) * sizeof(int32_t));
            for (int32_t t = 0; t < n; t++) host[max_batch_ + t] = pos + start + t;
            std::memcpy(host + 2 * max_batch_, table.blocks.data(), size_t(n_blocks_used) * sizeof(int32_t));
            // One upload: tokens, positions, then the block table (only the parts in use).
            CUDA_CHECK(cudaMemcpyAsync(ints_, host, size_t(2 * max_batch_ + n_blocks_used) * sizeof(int32_t),
                                       cudaMemcpyHostToDevice, stream()));
            forward_batch(n, pos + start, out, all_logits);
        }
        CUDA_CHECK(cudaStreamSynchronize(stream()));
    }

private:
    cudaStream_t stream() const { return stream_->stream; }

    void check_block(int32_t block, const char* what) const { check_kv_block("cuda backend", block, n_kv_blocks_, what); }

    void check_forward(const int32_t* tokens, int32_t n_tokens, int32_t pos, const BlockTable& table) const {
        check_forward_args("cuda backend", config_, layout_.block_size, n_kv_blocks_, tokens, n_tokens, pos, table);
    }

    // Weights: one device allocation holding every distinct tensor (a tied output head is stored once),
    // copied through two pinned staging buffers so the host copy of one chunk overlaps the DMA of the other.
    void upload_weights(const ModelWeights& host, bool show_progress) {
        std::vector<const TensorView*> views = {&host.token_embd, &host.output_norm, &host.output};
        for (const LayerWeights& lw : host.layers)
            for (const TensorView* v : {&lw.attn_norm, &lw.attn_q, &lw.attn_k, &lw.attn_v, &lw.attn_q_bias,
                                        &lw.attn_k_bias, &lw.attn_v_bias, &lw.attn_output, &lw.ffn_norm,
                                        &lw.ffn_gate, &lw.ffn_up, &lw.ffn_down})
                if (v->data) views.push_back(v);
        std::map<const void*, size_t> offsets;  // host data -> offset in the device weight buffer
        size_t total = 0;
        for (const TensorView* v : views)
            if (offsets.emplace(v->data, total).second) total += (v->n_bytes() + 255) / 256 * 256;
        char* device = static_cast<char*>(arena_.try_alloc(total));
        if (!device)
            throw_error("cuda backend: the model's weights ({:.2f} GiB) do not fit in device memory{} (use a smaller "
                        "model or --device cpu)",
                        double(total) / kGiB, DeviceArena::free_memory_note());

        PinnedBuffer staging(2 * kStagingBytes);
        cudaEvent_t done[2];
        CUDA_CHECK(cudaEventCreateWithFlags(&done[0], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&done[1], cudaEventDisableTiming));
        struct EventGuard {
            cudaEvent_t* events;
            ~EventGuard() { cudaEventDestroy(events[0]), cudaEventDestroy(events[1]); }
        } guard{done};
        ProgressBar progress("uploading weights", total, show_progress && total >= (size_t(1) << 30));
        size_t uploaded = 0;
        int chunk = 0;
        std::map<const void*, bool> copied;
        for (const TensorView* v : views) {
            if (!copied.emplace(v->data, true).second) continue;
            const char* src = static_cast<const char*>(v->data);
            char* dst = device + offsets[v->data];
            for (size_t done_bytes = 0; done_bytes < v->n_bytes(); done_bytes += kStagingBytes, chunk++) {
                size_t bytes = std::min(kStagingBytes, v->n_bytes() - done_bytes);
                char* stage = staging.data() + (chunk % 2) * kStagingBytes;
                CUDA_CHECK(cudaEventSynchronize(done[chunk % 2]));  // its previous DMA has finished
                std::memcpy(stage, src + done_bytes, bytes);
                CUDA_CHECK(cudaMemcpyAsync(dst + done_bytes, stage, bytes, cudaMemcpyHostToDevice, stream()));
                CUDA_CHECK(cudaEventRecord(done[chunk % 2], stream()));
                uploaded += bytes;
                progress.update(uploaded);
            }
        }
        CUDA_CHECK(cudaStreamSynchronize(stream()));
        progress.finish();

        auto on_device = [&](const TensorView& v) {
            TensorView d = v;
            if (v.data) d.data = device + offsets[v.data];
            return d;
        };
        weights_.token_embd = on_device(host.token_embd);
        weights_.output_norm = on_device(host.output_norm);
        weights_.output = on_device(host.output);
        for (const LayerWeights& lw : host.layers) {
            LayerWeights d = lw;
            for (TensorView* v : {&d.attn_norm, &d.attn_q, &d.attn_k, &d.attn_v, &d.attn_q_bias, &d.attn_k_bias,
                                  &d.attn_v_bias, &d.attn_output, &d.ffn_norm, &d.ffn_gate, &d.ffn_up, &d.ffn_down})
                *v = on_device(*v);
            weights_.layers.push_back(d);
        }
    }

    void allocate_kv_pool() {
        size_t block_bytes = layout_.block_bytes();
        size_t total = size_t(n_kv_blocks_) * block_bytes;
        if (total / block_bytes != size_t(n_kv_blocks_)) throw_error("cuda backend: KV cache size overflows");
        kv_ = static_cast<char*>(arena_.try_alloc(total));
        if (!kv_)
            throw_error("cuda backend: the KV pool of {} blocks ({:.2f} GiB, {} tokens per block, {}) does not fit in "
                        "device memory after the weights{}; lower --kv-mem or --ctx-size (-c)",
                        n_kv_blocks_, double(total) / kGiB, layout_.block_size, dtype_name(layout_.dtype),
                        DeviceArena::free_memory_note());
        CUDA_CHECK(cudaMemsetAsync(kv_, 0, total, stream()));
    }

    void allocate_scratch() {
        const ModelConfig& c = config_;
        max_batch_ = int32_t(std::min<int64_t>(kCudaMaxBatch, int64_t(n_kv_blocks_) * layout_.block_size));
        max_batch_ = std::max(max_batch_, 1);
        const size_t b = size_t(max_batch_);
        const size_t q_dim = size_t(c.n_heads) * c.head_dim, kv_dim = size_t(layout_.row_elements());
        x_ = arena_.alloc<float>(b * c.n_embd, "activations");
        h_ = arena_.alloc<float>(b * c.n_embd, "activations");
        tmp_ = arena_.alloc<float>(b * c.n_embd, "activations");
        q_ = arena_.alloc<float>(b * q_dim, "activations");
        att_ = arena_.alloc<float>(b * q_dim, "activations");
        k_ = arena_.alloc<float>(b * kv_dim, "activations");
        v_ = arena_.alloc<float>(b * kv_dim, "activations");
        gate_ = arena_.alloc<float>(b * c.n_ff, "activations");
        up_ = arena_.alloc<float>(b * c.n_ff, "activations");
        size_t widest = std::max({size_t(c.n_embd), q_dim, size_t(c.n_ff)});
        converted_ = arena_.alloc<uint16_t>(b * widest, "GEMM input scratch");
        logits_ = arena_.alloc<float>(b * c.n_vocab, "the logits buffer");
        attention_.max_rows = int64_t(c.n_heads) * kAttentionSplitRows;
        attention_.partials = arena_.alloc<float>(size_t(attention_.max_rows) * (kCudaMaxHeadDim + 2),
                                                  "attention scratch");
        std::vector<float> inv_freq(size_t(c.head_dim / 2));
        rope_inv_freq(inv_freq.data(), c.head_dim, c.rope_theta, c.rope_scaling);
        inv_freq_ = arena_.alloc<float>(inv_freq.size(), "RoPE table");
        CUDA_CHECK(cudaMemcpyAsync(inv_freq_, inv_freq.data(), inv_freq.size() * sizeof(float), cudaMemcpyHostToDevice,
                                   stream()));
        CUDA_CHECK(cudaStreamSynchronize(stream()));
        ensure_table_capacity(std::max<int64_t>(n_kv_blocks_, (int64_t(c.n_ctx) + layout_.block_size - 1) / layout_.block_size));
    }

    // Device and pinned room for [max_batch] tokens, [max_batch] positions and [n_blocks] table entries.
    // Sized at construction for any table of distinct pool blocks; only grows for longer tables.
    void ensure_table_capacity(int64_t n_blocks) {
        if (n_blocks <= table_capacity_) return;
        CUDA_CHECK(cudaStreamSynchronize(stream()));
        size_t count = size_t(2 * max_batch_ + n_blocks);
        ints_ = arena_.alloc<int32_t>(count, "the block table");  // the old one stays in the arena until the end
        ints_host_ = std::make_unique<PinnedBuffer>(count * sizeof(int32_t));
        table_capacity_ = n_blocks;
    }

    void matmul(float* out, const float* in, const TensorView& w, int32_t n) {
        launch_matmul(cublas_->handle, out, in, w.data, w.dtype, n, w.shape[1], w.shape[0], converted_, stream());
    }

    // Runs n <= max_batch_ tokens whose ids, positions and block table were uploaded into ints_.
    void forward_batch(int32_t n, int32_t pos, float* logits, bool all_logits) {
        const ModelConfig& c = config_;
        const int32_t dim = c.n_embd, q_dim = c.n_heads * c.head_dim, kv_dim = int32_t(layout_.row_elements());
        const int32_t *tokens = ints_, *positions = ints_ + max_batch_, *block_table = ints_ + 2 * max_batch_;
        cudaStream_t s = stream();
        const auto f32 = [](const TensorView& v) { return static_cast<const float*>(v.data); };

        launch_embed(x_, tokens, weights_.token_embd.data, weights_.token_embd.dtype, n, dim, s);
        for (int32_t layer = 0; layer < c.n_layers; layer++) {
            const LayerWeights& lw = weights_.layers[size_t(layer)];
            launch_rmsnorm(h_, x_, f32(lw.attn_norm), n, dim, c.norm_eps, s);
            matmul(q_, h_, lw.attn_q, n);
            matmul(k_, h_, lw.attn_k, n);
            matmul(v_, h_, lw.attn_v, n);
            if (c.qkv_bias) {
                launch_add_bias(q_, f32(lw.attn_q_bias), n, q_dim, s);
                launch_add_bias(k_, f32(lw.attn_k_bias), n, kv_dim, s);
                launch_add_bias(v_, f32(lw.attn_v_bias), n, kv_dim, s);
            }
            launch_rope(q_, positions, inv_freq_, n, c.n_heads, c.head_dim, s);
            launch_rope(k_, positions, inv_freq_, n, c.n_kv_heads, c.head_dim, s);
            launch_kv_write(kv_, layout_, layer, k_, v_, block_table, positions, n, s);
            launch_paged_attention(att_, q_, kv_, layout_, layer, block_table, positions, n, c.n_heads, pos + n,
                                   prop_.multiProcessorCount, attention_, s);
            matmul(tmp_, att_, lw.attn_output, n);
            launch_add(x_, tmp_, int64_t(n) * dim, s);

            launch_rmsnorm(h_, x_, f32(lw.ffn_norm), n, dim, c.norm_eps, s);
            matmul(gate_, h_, lw.ffn_gate, n);
            matmul(up_, h_, lw.ffn_up, n);
            launch_swiglu(gate_, gate_, up_, n, c.n_ff, s);
            matmul(tmp_, gate_, lw.ffn_down, n);
            launch_add(x_, tmp_, int64_t(n) * dim, s);
        }
        if (!logits) return;
        int32_t rows = all_logits ? n : 1;
        const float* last = x_ + int64_t(n - rows) * dim;
        launch_rmsnorm(h_, last, f32(weights_.output_norm), rows, dim, c.norm_eps, s);
        matmul(logits_, h_, weights_.output, rows);
        CUDA_CHECK(cudaMemcpyAsync(logits, logits_, size_t(rows) * c.n_vocab * sizeof(float), cudaMemcpyDeviceToHost, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
    }

    ModelConfig config_;
    cudaDeviceProp prop_{};
    int device_ = 0;
    DeviceArena arena_;  // declared before everything it backs; freed last
    std::unique_ptr<Stream> stream_;
    std::unique_ptr<CublasHandle> cublas_;
    ModelWeights weights_;  // views into device memory
    KvLayout layout_;
    int32_t n_kv_blocks_ = 0;
    int32_t max_batch_ = 1;
    char* kv_ = nullptr;  // [n_kv_blocks] block records
    // Scratch for one batch: x/h/tmp [max_batch, n_embd], q/att [max_batch, n_heads*head_dim],
    // k/v [max_batch, n_kv_heads*head_dim], gate/up [max_batch, n_ff], converted [max_batch, widest] 16-bit,
    // logits [max_batch, n_vocab].
    float *x_ = nullptr, *h_ = nullptr, *tmp_ = nullptr, *q_ = nullptr, *att_ = nullptr, *k_ = nullptr, *v_ = nullptr;
    float *gate_ = nullptr, *up_ = nullptr, *logits_ = nullptr, *inv_freq_ = nullptr;  // inv_freq [head_dim / 2]
    uint16_t* converted_ = nullptr;
    AttentionScratch attention_;
    int32_t* ints_ = nullptr;  // [max_batch] tokens, [max_batch] positions, [table_capacity] block table
    std::unique_ptr<PinnedBuffer> ints_host_;  // pinned mirror of ints_
    int64_t table_capacity_ = 0;
    std::string name_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const ModelConfig& config, const ModelWeights& weights,
                                           const BackendOptions& options, bool show_progress) {
    return std::make_unique<CudaBackend>(config, weights, options, show_progress);
}

std::unique_ptr<Backend> make_cuda_backend(const ModelFile& model, const BackendOptions& options) {
    return make_cuda_backend(model.config(), bind_model_weights(model), options, true);
}

}  // namespace kvlm
