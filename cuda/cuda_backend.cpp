// CUDA backend: the Llama forward pass of cpu_backend.cpp with every op on the GPU (one stream). Owns the
// weights (uploaded once through pinned staging), the KV pool ([n_kv_blocks] block records in device
// memory, the CPU backend's layout, so KV block bytes move unchanged between backends) and scratch sized
// for the largest batch: after construction, forward() allocates nothing.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include "compute/cpu_ops.h"
#include "cublas_loader.h"
#include "cuda_backend.h"
#include "cuda_check.h"
#include "cuda_ops.h"
#include "decode_profile.h"
#include "decode_slots.h"
#include "device_peaks.h"
#include "format/model_file.h"
#include "graph_cache.h"
#include "matmul.h"
#include "pinned_buffer.h"
#include "sample_host.h"
#include "util/byte_size.h"
#include "util/error.h"
#include "util/progress.h"

namespace kvlm {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr int32_t kCudaMaxBatch = 2048;       // tokens per forward batch (longer prompts are chunked)
constexpr int32_t kLogitsRows = 256;          // rows of the logits buffer (all-logits batches go in chunks)
constexpr int64_t kAttentionSplitRows = 256;  // (head, split) rows per query head of attention scratch
constexpr size_t kStagingBytes = 32u << 20;   // per pinned staging buffer (two, double-buffered)
constexpr int32_t kTensorCorePrefillMin = 16;  // batch size from which prefill attention uses tensor cores
// forward() of up to this many tokens runs them as decode rows (forward_rows), each with the bits of its own
// one-token step: speculative verification and jump-forward rely on it. Longer batches are prefill GEMMs.
constexpr int32_t kExactForwardTokens = 16;
constexpr int32_t kRowsPerPass = 64;  // decode rows (of any sequences) one forward_rows pass takes

constexpr int64_t kDequantTileElements = int64_t(16) << 20;  // f16 scratch for prefill weight tiles (32 MiB)

// The 16-bit type a prefill GEMM's input takes for weights of `dtype`: the weights' own, and f16 for quantized
// weights (their tiles are dequantized to f16, see launch_matmul_quantized).
DType gemm_input_dtype(DType dtype) { return dtype_is_quantized(dtype) ? DType::f16 : dtype; }

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
        if (!p) throw_error("cuda backend: out of device memory allocating {} ({}){}", what,
                            byte_size_text(count * sizeof(T)), free_memory_note());
        return static_cast<T*>(p);
    }
    static std::string free_memory_note() {
        size_t free_bytes = 0, total_bytes = 0;
        if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return "";
        return fmt::format("; {} of {} free on the device", byte_size_text(free_bytes), byte_size_text(total_bytes));
    }

private:
    std::vector<void*> blocks_;
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

// One output of a decode GEMV launch: out = W x (+ bias), W's rows n_out.
GemvOutput gemv_output(float* out, const TensorView& w, const TensorView* bias, int32_t n_out) {
    GemvOutput o;
    o.out = out, o.weight = w.data, o.dtype = w.dtype, o.n_out = n_out;
    o.bias = bias ? static_cast<const float*>(bias->data) : nullptr;
    return o;
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
        check_kv_dtype(config_, options.kv_dtype);
        kv_pool_advice_ = kv_pool_advice(config_, options);
        layout_ = KvLayout::of(config_, options.block_size, options.kv_dtype);

        upload_weights(weights, show_progress);
        allocate_scratch();
        // --kv-mem N%: the pool takes that share of what the weights and scratch left free.
        size_t free_bytes = 0, total_bytes = 0;
        if (options.kv_mem_fraction > 0) CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
        n_kv_blocks_ = kv_blocks_for_free_memory(n_kv_blocks_, options, free_bytes, layout_.block_bytes());
        ensure_table_capacity(n_kv_blocks_);
        allocate_kv_pool();
        fused_decode_ = std::all_of(weights_.layers.begin(), weights_.layers.end(), [](const LayerWeights& lw) {
            return lw.ffn_gate.dtype == lw.ffn_up.dtype;
        });
        if (options.cuda_profile && fused_decode_) profile_ = std::make_unique<DecodeProfile>(stream());
        transfer_stats_ = options.cuda_transfer_stats;
        use_graphs_ = options.cuda_graphs && fused_decode_ && !profile_;
        name_ = fmt::format("cuda ({}, {} SMs, {:.0f} GiB{})", prop_.name, prop_.multiProcessorCount,
                            double(prop_.totalGlobalMem) / kGiB,
                            use_graphs_    ? ", decode in CUDA graphs"
                            : profile_     ? ", decode profiled: CUDA graphs off"
                            : fused_decode_ ? ", CUDA graphs off"
                                           : "");
    }

    ~CudaBackend() override {
        if (stream_) cudaStreamSynchronize(stream_->stream);
        if (profile_ && profile_->steps() > 0) std::fputs(profile_->table().c_str(), stderr);
        if (transfer_stats_ && decode_steps_ > 0)
            fmt::print(stderr,
                       "kvlm: CUDA transfers: {} decode steps, {} bytes device to host ({} per step); {} of the steps "
                       "enqueued before the host had their input token\n",
                       decode_steps_, decode_d2h_bytes_, decode_d2h_bytes_ / decode_steps_, decode_steps_ahead_);
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
    int32_t n_kv_blocks() const override { return n_kv_blocks_; }
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
    void* kv_staging(size_t n) override {
        const size_t bytes = n * kv_block_bytes();
        if (bytes > kv_staging_bytes_) {
            kv_staging_.reset();  // the old one first: pinned memory is scarce
            kv_staging_ = std::make_unique<PinnedBuffer>(bytes);
            kv_staging_bytes_ = bytes;
        }
        return kv_staging_->data();
    }
    // A restore's batch: one copy per run of consecutive block ids, and one wait at the end (from the pinned
    // kv_staging, a direct DMA) instead of a synchronous copy per block.
    void write_kv_blocks(const int32_t* blocks, size_t n, const void* src) override {
        for (size_t k = 0; k < n; k++) check_block(blocks[k], "write_kv_blocks");
        const size_t bytes = kv_block_bytes();
        for (size_t k = 0; k < n;) {
            size_t run = 1;
            while (k + run < n && blocks[k + run] == blocks[k] + int32_t(run)) run++;
            CUDA_CHECK(cudaMemcpyAsync(kv_ + size_t(blocks[k]) * bytes, static_cast<const char*>(src) + k * bytes,
                                       run * bytes, cudaMemcpyHostToDevice, stream()));
            k += run;
        }
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
        if (n_tokens == 1 && fused_decode_) {
            decode_step(tokens[0], pos, table, logits);
            return;
        }
        if (n_tokens <= exact_forward_tokens()) {
            const SequenceInput input{tokens, n_tokens, pos, &table, logits, all_logits};
            forward_rows(&input, 1);
            return;
        }
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
            for (int32_t t = 0; t < n; t++) host[positions_at() + t] = pos + start + t;
            std::memcpy(host + table_at(), table.blocks.data(), size_t(n_blocks_used) * sizeof(int32_t));
            // One upload: tokens, positions, then the block table (only the parts in use).
            CUDA_CHECK(cudaMemcpyAsync(ints_, host, size_t(table_at() + n_blocks_used) * sizeof(int32_t),
                                       cudaMemcpyHostToDevice, stream()));
            forward_batch(n, pos + start, out, all_logits);
        }
        CUDA_CHECK(cudaStreamSynchronize(stream()));
    }

    // Every sequence's tokens as decode rows, all rows through each weight matrix together (forward_rows): each
    // sequence gets the logits bits of forward() of it alone, one token at a time.
    void forward_sequences(const SequenceInput* inputs, size_t n_inputs) override {
        if (!fused_decode_) {
            Backend::forward_sequences(inputs, n_inputs);
            return;
        }
        for (size_t i = 0; i < n_inputs; i++) {
            const SequenceInput& in = inputs[i];
            if (!in.table) throw_error("cuda backend: forward_sequences: sequence {} has no block table", i);
            check_forward(in.tokens, in.n_tokens, in.pos, *in.table);
        }
        forward_rows(inputs, n_inputs);
    }

    int32_t exact_forward_tokens() const override { return fused_decode_ ? kExactForwardTokens : 0; }

private:
    cudaStream_t stream() const { return stream_->stream; }

    // One decode row of forward_rows: a token of a sequence, where its logits go (null: not wanted).
    struct DecodeRow {
        int32_t token, pos, input;
        float* logits;
    };

    // The tokens of `inputs` (checked) as rows of the decode step's kernels, kRowsPerPass rows per pass in
    // sequence order (a sequence's later rows attend to its earlier ones, written in the same or an earlier
    // pass): each GEMV streams its weights once per 8 rows (launch_gemv_tokens), RoPE/KV writes and attention
    // take every row's own block table in one launch, and attention runs each row with the split count of
    // its own decode step. So every row has the bits of its one-token step.
    void forward_rows(const SequenceInput* inputs, size_t n_inputs) {
        std::vector<DecodeRow> rows;
        for (size_t i = 0; i < n_inputs; i++) {
            const SequenceInput& in = inputs[i];
            for (int32_t t = 0; t < in.n_tokens; t++) {
                float* dst = nullptr;
                if (in.logits && in.all_logits) dst = in.logits + int64_t(t) * config_.n_vocab;
                else if (in.logits && t + 1 == in.n_tokens) dst = in.logits;
                rows.push_back({in.tokens[t], in.pos + t, int32_t(i), dst});
            }
        }
        const size_t pass_rows = size_t(std::min({kRowsPerPass, max_batch_, kLogitsRows}));
        for (size_t r0 = 0; r0 < rows.size(); r0 += pass_rows) {
            const size_t n = std::min(pass_rows, rows.size() - r0);
            run_rows_pass(inputs, rows.data() + r0, int32_t(n));
        }
    }

    void run_rows_pass(const SequenceInput* inputs, const DecodeRow* rows, int32_t n) {
        // Tables: each sequence of the pass once, as far as its last row in the pass reaches.
        std::vector<int32_t> table_of(static_cast<size_t>(n)), blocks;
        std::map<int32_t, int32_t> placed;  // input -> offset of its table
        for (int32_t r = 0; r < n; r++) {
            const int32_t input = rows[r].input;
            int32_t last_pos = rows[r].pos;
            for (int32_t q = r + 1; q < n && rows[q].input == input; q++) last_pos = rows[q].pos;
            auto it = placed.find(input);
            if (it == placed.end()) {
                const int32_t used = last_pos / layout_.block_size + 1;
                it = placed.emplace(input, int32_t(blocks.size())).first;
                const std::vector<int32_t>& b = inputs[input].table->blocks;
                blocks.insert(blocks.end(), b.begin(), b.begin() + used);
            }
            table_of[size_t(r)] = it->second;
        }
        ensure_table_capacity(int64_t(blocks.size()));
        CUDA_CHECK(cudaStreamSynchronize(stream()));  // the pinned staging may still feed the last upload
        int32_t* host = reinterpret_cast<int32_t*>(ints_host_->data());
        for (int32_t r = 0; r < n; r++) {
            host[r] = rows[r].token;
            host[positions_at() + r] = rows[r].pos;
            host[rows_at() + r] = table_of[size_t(r)];
        }
        std::memcpy(host + table_at(), blocks.data(), blocks.size() * sizeof(int32_t));
        CUDA_CHECK(cudaMemcpyAsync(ints_, host, (size_t(table_at()) + blocks.size()) * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, stream()));

        // Attention launches: runs of consecutive rows whose own decode steps split alike, each run within
        // what the scratch holds (rows * n_heads * splits partial rows).
        struct AttentionRun {
            int32_t first, n, n_splits;
        };
        std::vector<AttentionRun> runs;
        for (int32_t r = 0; r < n; r++) {
            const int32_t splits = paged_attention_split_count(1, config_.n_heads, layout_.n_kv_heads, rows[r].pos + 1,
                                                               prop_.multiProcessorCount, attention_);
            const int64_t max_rows = splits > 1 ? attention_.max_rows / (int64_t(config_.n_heads) * splits) : n;
            if (!runs.empty() && runs.back().n_splits == splits && runs.back().first + runs.back().n == r &&
                runs.back().n < max_rows)
                runs.back().n++;
            else
                runs.push_back({r, 1, splits});
        }
        // Replayed as a CUDA graph per pass shape (rows and attention runs: steps of beams or samples repeat
        // theirs until a context length changes a split count) from the shape's second pass on; a shape seen
        // once (a short prompt) is not worth a capture.
        const auto enqueue = [&] { enqueue_rows(n, runs.data(), runs.size()); };
        int64_t key = -1;
        if (use_graphs_) {
            std::vector<int32_t> shape = {n};
            for (const AttentionRun& run : runs) shape.insert(shape.end(), {run.first, run.n, run.n_splits});
            key = rows_graph_key(shape);
        }
        if (key >= 0) rows_graphs_.launch(key, stream(), enqueue);
        else enqueue();

        // Logits: the wanted rows normalised side by side into h_, one head GEMV over them, each copied back.
        const ModelConfig& c = config_;
        int32_t n_wanted = 0;
        for (int32_t r = 0; r < n;) {
            if (!rows[r].logits) {
                r++;
                continue;
            }
            int32_t run = 1;
            while (r + run < n && rows[r + run].logits) run++;
            launch_rmsnorm(h_ + int64_t(n_wanted) * c.n_embd, x_ + int64_t(r) * c.n_embd,
                           static_cast<const float*>(weights_.output_norm.data), run, c.n_embd, c.norm_eps, stream());
            n_wanted += run;
            r += run;
        }
        if (n_wanted > 0) {
            const GemvOutput head = gemv_output(logits_, weights_.output, nullptr, c.n_vocab);
            launch_gemv_tokens(&head, 1, h_, n_wanted, c.n_embd, nullptr, 0.0f, false, stream());
            int32_t w = 0;
            for (int32_t r = 0; r < n; r++) {
                if (!rows[r].logits) continue;
                CUDA_CHECK(cudaMemcpyAsync(rows[r].logits, logits_ + int64_t(w++) * c.n_vocab,
                                           size_t(c.n_vocab) * sizeof(float), cudaMemcpyDeviceToHost, stream()));
            }
        }
        CUDA_CHECK(cudaStreamSynchronize(stream()));
    }

    // The graph key of a pass shape, or -1 the first time it is seen; at most kMaxRowShapes shapes are
    // remembered (then all are forgotten, with their graphs).
    int64_t rows_graph_key(const std::vector<int32_t>& shape) {
        constexpr size_t kMaxRowShapes = 64;
        auto it = rows_graph_keys_.find(shape);
        if (it != rows_graph_keys_.end()) {
            if (it->second < 0) it->second = next_rows_graph_key_++;
            return it->second;
        }
        if (rows_graph_keys_.size() >= kMaxRowShapes) {
            rows_graphs_.clear();
            rows_graph_keys_.clear();
        }
        rows_graph_keys_.emplace(shape, -1);
        return -1;
    }

    // The decode step's kernels over n rows uploaded into ints_ (tokens, positions, table offsets, tables).
    template <typename Run>
    void enqueue_rows(int32_t n, const Run* runs, size_t n_runs) {
        const ModelConfig& c = config_;
        const int32_t dim = c.n_embd, q_dim = c.n_heads * c.head_dim, kv_dim = int32_t(layout_.row_elements());
        const int32_t *tokens = ints_, *positions = ints_ + positions_at(), *row_tables = ints_ + rows_at();
        const int32_t* tables = ints_ + table_at();
        cudaStream_t s = stream();
        const auto f32 = [](const TensorView& v) { return static_cast<const float*>(v.data); };
        launch_embed(x_, tokens, weights_.token_embd.data, weights_.token_embd.dtype, n, dim, s);
        for (int32_t layer = 0; layer < c.n_layers; layer++) {
            const LayerWeights& lw = weights_.layers[size_t(layer)];
            const bool bias = c.qkv_bias;
            const GemvOutput qkv[3] = {gemv_output(q_, lw.attn_q, bias ? &lw.attn_q_bias : nullptr, q_dim),
                                       gemv_output(k_, lw.attn_k, bias ? &lw.attn_k_bias : nullptr, kv_dim),
                                       gemv_output(v_, lw.attn_v, bias ? &lw.attn_v_bias : nullptr, kv_dim)};
            launch_gemv_tokens(qkv, 3, x_, n, dim, f32(lw.attn_norm), c.norm_eps, false, s);
            launch_rope_kv_write(q_, k_, v_, kv_, layout_, layer, tables, positions, inv_freq_, n, c.n_heads, s,
                                 row_tables);
            for (size_t i = 0; i < n_runs; i++) {
                const int64_t at = int64_t(runs[i].first) * q_dim;
                launch_paged_attention_splits(att_ + at, q_ + at, kv_, layout_, layer, tables, positions + runs[i].first,
                                              runs[i].n, c.n_heads, runs[i].n_splits, prop_.multiProcessorCount,
                                              attention_, s, row_tables + runs[i].first);
            }
            const GemvOutput attn_out = gemv_output(x_, lw.attn_output, nullptr, dim);
            launch_gemv_tokens(&attn_out, 1, att_, n, q_dim, nullptr, 0.0f, true, s);  // x += W_o att
            launch_gemv_swiglu_tokens(gate_, x_, n, lw.ffn_gate.data, lw.ffn_up.data, lw.ffn_gate.dtype, dim, c.n_ff,
                                      f32(lw.ffn_norm), c.norm_eps, s);
            const GemvOutput ffn_out = gemv_output(x_, lw.ffn_down, nullptr, dim);
            launch_gemv_tokens(&ffn_out, 1, gate_, n, c.n_ff, nullptr, 0.0f, true, s);  // x += W_down swiglu
        }
    }

    void check_block(int32_t block, const char* what) const { check_kv_block("cuda backend", block, n_kv_blocks_, what); }

    void check_forward(const int32_t* tokens, int32_t n_tokens, int32_t pos, const BlockTable& table) const {
        KVLM_ASSERT(decode_slots_.in_flight() == 0, "a forward while decode steps are in flight");
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
            throw_error("cuda backend: the model's weights ({}) do not fit in device memory{} (use a smaller model or "
                        "--device cpu)",
                        byte_size_text(total), DeviceArena::free_memory_note());

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
            throw_error("cuda backend: the KV pool of {} blocks ({}, {} tokens per block, {}) does not fit in "
                        "device memory after the weights{}; {}",
                        n_kv_blocks_, byte_size_text(total), layout_.block_size, dtype_name(layout_.dtype),
                        DeviceArena::free_memory_note(), kv_pool_advice_);
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
        q_ = arena_.alloc<float>(b * q_dim, "activations");
        att_ = arena_.alloc<float>(b * q_dim, "activations");
        k_ = arena_.alloc<float>(b * kv_dim, "activations");
        v_ = arena_.alloc<float>(b * kv_dim, "activations");
        gate_ = arena_.alloc<float>(b * c.n_ff, "activations");
        up_ = arena_.alloc<float>(b * c.n_ff, "activations");
        size_t widest = std::max({size_t(c.n_embd), q_dim, size_t(c.n_ff)});
        converted_ = arena_.alloc<uint16_t>(b * widest, "GEMM input scratch");
        allocate_dequant_tile();
        logits_ = arena_.alloc<float>(size_t(std::min(max_batch_, kLogitsRows)) * c.n_vocab, "the logits buffer");
        sample_in_ = arena_.alloc<SampleInputs>(1, "the sampler's inputs");
        sample_out_ = arena_.alloc<SampleResult>(1, "the sampler's result");
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

    // Quantized matrices (weights stay quantized on the device): prefill GEMMs widen kDequantTileElements of
    // weights (whole rows, at least one) at a time to f16, so the scratch is the largest quantized matrix or
    // that much, whichever is smaller. None without quantized matrices.
    void allocate_dequant_tile() {
        int64_t largest = 0, widest_row = 0;
        auto note = [&](const TensorView& v) {
            if (!v.data || !dtype_is_quantized(v.dtype)) return;
            largest = std::max(largest, v.n_elements());
            widest_row = std::max(widest_row, v.shape[1]);
        };
        note(weights_.output);
        for (const LayerWeights& lw : weights_.layers)
            for (const TensorView* v : {&lw.attn_q, &lw.attn_k, &lw.attn_v, &lw.attn_output, &lw.ffn_gate, &lw.ffn_up,
                                        &lw.ffn_down})
                note(*v);
        if (largest == 0) return;
        dequant_elements_ = std::max(std::min(largest, kDequantTileElements), widest_row);
        dequant_ = arena_.alloc<uint16_t>(size_t(dequant_elements_), "the dequantized weight tile");
    }

    // Device and pinned room for [max_batch] tokens, [max_batch] positions and [n_blocks] table entries.
    // Sized at construction for any table of distinct pool blocks; only grows for longer tables.
    void ensure_table_capacity(int64_t n_blocks) {
        if (n_blocks <= table_capacity_) return;
        CUDA_CHECK(cudaStreamSynchronize(stream()));
        size_t count = size_t(table_at() + n_blocks);
        ints_ = arena_.alloc<int32_t>(count, "the block table");  // the old one stays in the arena until the end
        ints_host_ = std::make_unique<PinnedBuffer>(count * sizeof(int32_t));
        table_capacity_ = n_blocks;
        decode_graphs_.clear();  // their kernels read the old ints_
        rows_graphs_.clear();
        rows_graph_keys_.clear();
    }

    void matmul(float* out, const float* in, const TensorView& w, int32_t n) {
        if (dtype_is_quantized(w.dtype)) {
            launch_convert_from_f32(converted_, in, DType::f16, int64_t(n) * w.shape[1], stream());
            gemm(out, converted_, w, n);
            return;
        }
        launch_matmul(cublas_->handle, out, in, w.data, w.dtype, n, w.shape[1], w.shape[0], converted_, stream());
    }

    // The input of GEMMs over weights of `weight_dtype`: n rows of x (width floats), RMS-normalised by `norm`
    // when given, as f32 (x itself or h_) for f32 weights, else rounded to gemm_input_dtype in converted_ in
    // the same pass. Valid until the next gemm_input.
    const void* gemm_input(const float* x, const float* norm, int32_t n, int32_t width, DType weight_dtype) {
        const DType dtype = gemm_input_dtype(weight_dtype);
        if (dtype == DType::f32) {
            if (!norm) return x;
            launch_rmsnorm(h_, x, norm, n, width, config_.norm_eps, stream());
            return h_;
        }
        if (norm) launch_rmsnorm_to(converted_, x, norm, n, width, config_.norm_eps, dtype, stream());
        else launch_convert_from_f32(converted_, x, dtype, int64_t(n) * width, stream());
        return converted_;
    }

    // out = W in, or out += W in when accumulate (in from gemm_input, in gemm_input_dtype(w.dtype)).
    void gemm(float* out, const void* in, const TensorView& w, int32_t n, bool accumulate = false) {
        if (dtype_is_quantized(w.dtype)) {
            launch_matmul_quantized(cublas_->handle, out, in, w.data, w.dtype, n, w.shape[1], w.shape[0], accumulate,
                                    dequant_, std::max<int64_t>(1, dequant_elements_ / w.shape[1]), stream());
            return;
        }
        launch_matmul_prepared(cublas_->handle, out, in, w.data, w.dtype, n, w.shape[1], w.shape[0], accumulate,
                               stream());
    }

    // Runs n <= max_batch_ tokens whose ids, positions and block table were uploaded into ints_.
    void forward_batch(int32_t n, int32_t pos, float* logits, bool all_logits) {
        const ModelConfig& c = config_;
        const int32_t dim = c.n_embd, q_dim = c.n_heads * c.head_dim, kv_dim = int32_t(layout_.row_elements());
        const int32_t *tokens = ints_, *positions = ints_ + positions_at(), *block_table = ints_ + table_at();
        cudaStream_t s = stream();
        const auto f32 = [](const TensorView& v) { return static_cast<const float*>(v.data); };

        launch_embed(x_, tokens, weights_.token_embd.data, weights_.token_embd.dtype, n, dim, s);
        for (int32_t layer = 0; layer < c.n_layers; layer++) {
            const LayerWeights& lw = weights_.layers[size_t(layer)];
            // Q, K and V read one normalised input (made again only if their weight dtypes differ).
            const float* attn_norm = f32(lw.attn_norm);
            const void* in = gemm_input(x_, attn_norm, n, dim, lw.attn_q.dtype);
            gemm(q_, in, lw.attn_q, n);
            const auto differ = [](DType a, DType b) { return gemm_input_dtype(a) != gemm_input_dtype(b); };
            if (differ(lw.attn_k.dtype, lw.attn_q.dtype)) in = gemm_input(x_, attn_norm, n, dim, lw.attn_k.dtype);
            gemm(k_, in, lw.attn_k, n);
            if (differ(lw.attn_v.dtype, lw.attn_k.dtype)) in = gemm_input(x_, attn_norm, n, dim, lw.attn_v.dtype);
            gemm(v_, in, lw.attn_v, n);
            if (c.qkv_bias) {
                launch_add_bias(q_, f32(lw.attn_q_bias), n, q_dim, s);
                launch_add_bias(k_, f32(lw.attn_k_bias), n, kv_dim, s);
                launch_add_bias(v_, f32(lw.attn_v_bias), n, kv_dim, s);
            }
            launch_rope_kv_write(q_, k_, v_, kv_, layout_, layer, block_table, positions, inv_freq_, n, c.n_heads, s);
            // Long batches (prefill) on tensor cores when the KV cache is 16-bit; short ones, and f32 caches,
            // through the flash-decoding kernel (f32 arithmetic throughout).
            if (n >= kTensorCorePrefillMin && prefill_attention_supports(layout_))
                launch_prefill_attention(att_, q_, kv_, layout_, layer, block_table, positions, n, c.n_heads, s);
            else
                launch_paged_attention(att_, q_, kv_, layout_, layer, block_table, positions, n, c.n_heads, pos + n,
                                       prop_.multiProcessorCount, attention_, s);
            gemm(x_, gemm_input(att_, nullptr, n, q_dim, lw.attn_output.dtype), lw.attn_output, n, true);  // x += W_o att

            const float* ffn_norm = f32(lw.ffn_norm);
            in = gemm_input(x_, ffn_norm, n, dim, lw.ffn_gate.dtype);
            gemm(gate_, in, lw.ffn_gate, n);
            if (differ(lw.ffn_up.dtype, lw.ffn_gate.dtype)) in = gemm_input(x_, ffn_norm, n, dim, lw.ffn_up.dtype);
            gemm(up_, in, lw.ffn_up, n);
            // silu(gate) * up, made directly in the down projection's input type.
            const void* act = gate_;
            if (lw.ffn_down.dtype == DType::f32) {
                launch_swiglu(gate_, gate_, up_, n, c.n_ff, s);
            } else {
                launch_swiglu_to(converted_, gate_, up_, n, c.n_ff, gemm_input_dtype(lw.ffn_down.dtype), s);
                act = converted_;
            }
            gemm(x_, act, lw.ffn_down, n, true);  // x += W_down act
        }
        if (!logits) return;
        int32_t rows = all_logits ? n : 1;
        const float* last = x_ + int64_t(n - rows) * dim;
        launch_rmsnorm(h_, last, f32(weights_.output_norm), rows, dim, c.norm_eps, s);
        for (int32_t row = 0; row < rows; row += kLogitsRows) {
            const int32_t chunk = std::min(kLogitsRows, rows - row);
            if (row > 0) CUDA_CHECK(cudaStreamSynchronize(s));  // the previous chunk has left logits_
            matmul(logits_, h_ + int64_t(row) * dim, weights_.output, chunk);
            CUDA_CHECK(cudaMemcpyAsync(logits + int64_t(row) * c.n_vocab, logits_,
                                       size_t(chunk) * c.n_vocab * sizeof(float), cudaMemcpyDeviceToHost, s));
        }
        CUDA_CHECK(cudaStreamSynchronize(s));
    }

    // One token (the decode step): fused single-token kernels (gemv.cu, rope_kv_write.cu) and attention
    // whose split count is fixed per launch and whose per-query split length is derived on the device, so
    // the whole step - everything but the input upload and the logits download - replays as one CUDA graph
    // per split count. The graph's kernels read the token, its position and the block table from ints_.
    void decode_step(int32_t token, int32_t pos, const BlockTable& table, float* logits) {
        DecodeSlots::Slot& slot = decode_slots_.claim(table_capacity_);
        run_decode(upload_decode_inputs(token, pos, table, slot.inputs), pos, false);
        copy_logits_back(logits);
        CUDA_CHECK(cudaStreamSynchronize(stream()));
        decode_slots_.release_oldest();
    }

    bool samples_on_device(const SampleRequest& r) const override {
        if (!fused_decode_ || r.n_penalty > kSampleMaxPenalty) return false;
        const int32_t n_vocab = config_.n_vocab;
        if (r.temperature <= 0.0f || n_vocab == 1) return true;                          // greedy
        if (r.top_k > 0 && r.top_k < n_vocab) return r.top_k <= kSampleMaxCandidates;  // top-k
        return r.min_p > 0.0f && r.min_p <= 1.0f;  // top-k off: the min-p floor bounds the candidates
    }

    // Steps whose token is always picked on the device (never handed back for the host to sort), with room
    // in the penalty list for the input token the device adds.
    bool chains_decode_steps(const SampleRequest& r) const override {
        if (!samples_on_device(r) || r.n_penalty >= kSampleMaxPenalty) return false;
        const int32_t n_vocab = config_.n_vocab;
        return r.temperature <= 0.0f || n_vocab == 1 || (r.top_k > 0 && r.top_k < n_vocab);
    }

    // The decode step with sample.cu as its last launch (inside the graph): the token id, status and digest
    // come back through pinned memory; the logits only when the device could not sample.
    SampleOutcome decode_sample(int32_t token, int32_t pos, const BlockTable& table, const SampleRequest& request,
                                float* logits) override {
        if (!samples_on_device(request)) {
            forward(&token, 1, pos, table, logits, false);
            return {};
        }
        enqueue_sampled_step(token, pos, table, request);
        const SampleOutcome out = wait_decode_step();
        if (out.status == SampleOutcome::kNeedsHost) {  // the kernel put the logits back as they came
            copy_logits_back(logits);
            CUDA_CHECK(cudaStreamSynchronize(stream()));
        }
        return out;
    }

    void enqueue_decode_step(int32_t token, int32_t pos, const BlockTable& table,
                             const SampleRequest& request) override {
        KVLM_ASSERT(chains_decode_steps(request), "enqueue_decode_step with settings the device cannot chain");
        enqueue_sampled_step(token, pos, table, request);
    }

    SampleOutcome wait_decode_step() override {
        DecodeSlots::Slot& slot = decode_slots_.oldest();
        CUDA_CHECK(cudaEventSynchronize(slot.done));
        const SampleOutcome out = sample_outcome(*slot.sample_out);
        decode_slots_.release_oldest();
        return out;
    }

    // Queues a sampled decode step: its inputs, the step, its result's copy back and an event. token
    // kTokenFromDevice: the input is what the step before it (still in flight) picks, which sample.cu
    // leaves where the step reads its token, so that field is not uploaded.
    void enqueue_sampled_step(int32_t token, int32_t pos, const BlockTable& table, const SampleRequest& request) {
        const bool from_device = token == kTokenFromDevice;
        if (from_device) {
            KVLM_ASSERT(decode_slots_.in_flight() == 1, "a step's input from the device without a step before it");
            const int32_t any_token = 0;  // stands in for the device's token in the argument check
            check_forward_args("cuda backend", config_, layout_.block_size, n_kv_blocks_, &any_token, 1, pos, table);
            // ints_ must not move under the step before it (it writes this step's token there).
            KVLM_ASSERT(int64_t(pos) / layout_.block_size < table_capacity_, "a step ahead needs a longer table");
        } else {
            check_forward(&token, 1, pos, table);
        }
        DecodeSlots::Slot& slot = decode_slots_.claim(table_capacity_);
        const size_t input_bytes = fill_sample_inputs(slot.sample_in, request);
        const int32_t n_splits = upload_decode_inputs(token, pos, table, slot.inputs);
        CUDA_CHECK(cudaMemcpyAsync(sample_in_, slot.sample_in, input_bytes, cudaMemcpyHostToDevice, stream()));
        run_decode(n_splits, pos, true);
        CUDA_CHECK(cudaMemcpyAsync(slot.sample_out, sample_out_, sizeof(SampleResult), cudaMemcpyDeviceToHost,
                                   stream()));
        CUDA_CHECK(cudaEventRecord(slot.done, stream()));
        decode_d2h_bytes_ += sizeof(SampleResult);
        if (from_device) decode_steps_ahead_++;
    }

    // Stages the token (unless it is kTokenFromDevice), its position and the table's blocks in use for the
    // decode graph (one small upload from `staging`, pinned, [2 + blocks]); returns the attention split
    // count, which picks the graph.
    int32_t upload_decode_inputs(int32_t token, int32_t pos, const BlockTable& table, int32_t* staging) {
        const int64_t n_blocks_used = int64_t(pos) / layout_.block_size + 1;
        ensure_table_capacity(n_blocks_used);  // clears the graphs when ints_ moves
        staging[0] = token;
        staging[1] = pos;
        std::memcpy(staging + 2, table.blocks.data(), size_t(n_blocks_used) * sizeof(int32_t));
        const int32_t skip = token == kTokenFromDevice ? 1 : 0;
        CUDA_CHECK(cudaMemcpyAsync(ints_ + decode_at() + skip, staging + skip,
                                   size_t(2 - skip + n_blocks_used) * sizeof(int32_t), cudaMemcpyHostToDevice,
                                   stream()));
        decode_steps_++;
        return paged_attention_split_count(1, config_.n_heads, layout_.n_kv_heads, pos + 1, prop_.multiProcessorCount,
                                           attention_);
    }

    // The decode step's launches (plus the sampling kernel): replayed as the graph of (split count,
    // sampling), captured on first use; launched one by one with graphs off or under the profile.
    void run_decode(int32_t n_splits, int32_t pos, bool sample) {
        const auto enqueue = [&] {
            enqueue_decode(n_splits);
            if (!sample) return;
            launch_sample(logits_, config_.n_vocab, sample_in_, sample_out_, ints_ + decode_at(), stream());
            if (profile_) profile_->mark("sample", double(config_.n_vocab) * sizeof(float) * 2);
        };
        if (use_graphs_) {
            decode_graphs_.launch(int64_t(n_splits) * 2 + (sample ? 1 : 0), stream(), enqueue);
        } else if (profile_) {
            profile_pos_ = pos;
            profile_->begin_step();
            enqueue();
            profile_->end_step();
        } else {
            enqueue();
        }
    }

    void copy_logits_back(float* logits) {
        CUDA_CHECK(cudaMemcpyAsync(logits, logits_, size_t(config_.n_vocab) * sizeof(float), cudaMemcpyDeviceToHost,
                                   stream()));
        decode_d2h_bytes_ += uint64_t(config_.n_vocab) * sizeof(float);
    }

    // The decode step's launches (captured into a graph or run directly): 6 per layer, 7 when attention splits.
    void enqueue_decode(int32_t n_splits) {
        const ModelConfig& c = config_;
        const int32_t dim = c.n_embd, q_dim = c.n_heads * c.head_dim, kv_dim = int32_t(layout_.row_elements());
        const int32_t *tokens = ints_ + decode_at(), *positions = tokens + 1, *block_table = ints_ + table_at();
        cudaStream_t s = stream();
        const auto f32 = [](const TensorView& v) { return static_cast<const float*>(v.data); };
        // KVLM_CUDA_PROFILE: an event after each stage, with the bytes the stage must move (weights once,
        // the K/V it reads, its f32 activations in and out). Never set while a graph is captured.
        const auto mark = [&](const char* stage, double bytes) {
            if (profile_) profile_->mark(stage, bytes);
        };
        const double f4 = sizeof(float), kv_read = 2.0 * double(layout_.bytes_of(int64_t(profile_pos_ + 1) * kv_dim));
        launch_embed(x_, tokens, weights_.token_embd.data, weights_.token_embd.dtype, 1, dim, s);
        mark("embed", double(weights_.token_embd.n_bytes()) / c.n_vocab + dim * f4);
        for (int32_t layer = 0; layer < c.n_layers; layer++) {
            const LayerWeights& lw = weights_.layers[size_t(layer)];
            const bool bias = c.qkv_bias;
            const GemvOutput qkv[3] = {gemv_output(q_, lw.attn_q, bias ? &lw.attn_q_bias : nullptr, q_dim),
                                       gemv_output(k_, lw.attn_k, bias ? &lw.attn_k_bias : nullptr, kv_dim),
                                       gemv_output(v_, lw.attn_v, bias ? &lw.attn_v_bias : nullptr, kv_dim)};
            launch_gemv(qkv, 3, x_, dim, f32(lw.attn_norm), c.norm_eps, false, s);
            mark("gemv q/k/v (rmsnorm inside)",
                 double(lw.attn_q.n_bytes() + lw.attn_k.n_bytes() + lw.attn_v.n_bytes()) + (dim + q_dim + 2 * kv_dim) * f4);
            launch_rope_kv_write(q_, k_, v_, kv_, layout_, layer, block_table, positions, inv_freq_, 1, c.n_heads, s);
            mark("rope + kv write", (2 * q_dim + 2 * kv_dim) * f4 + double(layout_.bytes_of(2 * int64_t(kv_dim))));
            launch_paged_attention_splits(att_, q_, kv_, layout_, layer, block_table, positions, 1, c.n_heads, n_splits,
                                          prop_.multiProcessorCount, attention_, s);
            mark("attention", kv_read + 2 * q_dim * f4);
            const GemvOutput attn_out = gemv_output(x_, lw.attn_output, nullptr, dim);
            launch_gemv(&attn_out, 1, att_, q_dim, nullptr, 0.0f, true, s);  // x += W_o att
            mark("gemv output (+ residual)", double(lw.attn_output.n_bytes()) + (q_dim + 2 * dim) * f4);
            launch_gemv_swiglu(gate_, x_, lw.ffn_gate.data, lw.ffn_up.data, lw.ffn_gate.dtype, dim, c.n_ff,
                               f32(lw.ffn_norm), c.norm_eps, s);
            mark("gemv gate/up + swiglu", double(lw.ffn_gate.n_bytes() + lw.ffn_up.n_bytes()) + (dim + c.n_ff) * f4);
            const GemvOutput ffn_out = gemv_output(x_, lw.ffn_down, nullptr, dim);
            launch_gemv(&ffn_out, 1, gate_, c.n_ff, nullptr, 0.0f, true, s);  // x += W_down swiglu
            mark("gemv down (+ residual)", double(lw.ffn_down.n_bytes()) + (c.n_ff + 2 * dim) * f4);
        }
        // The head's norm runs once on its own: fused into the GEMV, every block of the n_vocab rows would
        // recompute it.
        launch_rmsnorm(h_, x_, f32(weights_.output_norm), 1, dim, c.norm_eps, s);
        mark("head rmsnorm", 2 * dim * f4);
        const GemvOutput head = gemv_output(logits_, weights_.output, nullptr, c.n_vocab);
        launch_gemv(&head, 1, h_, dim, nullptr, 0.0f, false, s);
        mark("head gemv", double(weights_.output.n_bytes()) + (dim + c.n_vocab) * f4);
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
    std::string kv_pool_advice_;  // the options to change when the pool does not fit
    int32_t max_batch_ = 1;
    char* kv_ = nullptr;  // [n_kv_blocks] block records
    // Scratch for one batch: x/h [max_batch, n_embd], q/att [max_batch, n_heads*head_dim],
    // k/v [max_batch, n_kv_heads*head_dim], gate/up [max_batch, n_ff], converted [max_batch, widest] 16-bit,
    // logits [max_batch, n_vocab].
    float *x_ = nullptr, *h_ = nullptr, *q_ = nullptr, *att_ = nullptr, *k_ = nullptr, *v_ = nullptr;
    float *gate_ = nullptr, *up_ = nullptr, *logits_ = nullptr, *inv_freq_ = nullptr;  // inv_freq [head_dim / 2]
    uint16_t* converted_ = nullptr;
    uint16_t* dequant_ = nullptr;   // [dequant_elements] f16: one tile of a quantized matrix's rows (prefill)
    int64_t dequant_elements_ = 0;
    AttentionScratch attention_;
    // ints_: [max_batch] tokens, [max_batch] positions and [max_batch] table offsets (forward_rows) of a batch,
    // the decode step's token and position, then [table_capacity] block table (forward_rows: several); the decode pair sits next to the table so that a decode step uploads
    // 2 + n_blocks ints in one copy.
    int32_t positions_at() const { return max_batch_; }
    int32_t rows_at() const { return 2 * max_batch_; }  // forward_rows: each row's offset into the tables
    int32_t decode_at() const { return 3 * max_batch_; }
    int32_t table_at() const { return 3 * max_batch_ + 2; }
    int32_t* ints_ = nullptr;
    std::unique_ptr<PinnedBuffer> ints_host_;  // pinned mirror of ints_
    std::unique_ptr<PinnedBuffer> kv_staging_;  // a session restore's blocks on their way to the device
    size_t kv_staging_bytes_ = 0;
    int64_t table_capacity_ = 0;
    bool fused_decode_ = false;  // single-token steps use the fused decode kernels (gate and up share a dtype)
    bool use_graphs_ = false;    // ... and replay them as CUDA graphs
    GraphCache decode_graphs_;   // keyed by the attention split count and whether the step samples
    GraphCache rows_graphs_;     // forward_rows passes, keyed through rows_graph_keys_ by their shape
    std::map<std::vector<int32_t>, int64_t> rows_graph_keys_;  // -1: seen once, no graph yet
    int64_t next_rows_graph_key_ = 0;
    std::unique_ptr<DecodeProfile> profile_;  // KVLM_CUDA_PROFILE=1 (graphs off)
    SampleInputs* sample_in_ = nullptr;       // device: this step's sampler inputs (decode_sample)
    SampleResult* sample_out_ = nullptr;      // device: its result
    DecodeSlots decode_slots_;                 // host staging and results of the decode steps in flight
    bool transfer_stats_ = false;   // KVLM_CUDA_TRANSFERS=1: print the counters below at the end
    int64_t decode_steps_ = 0;
    uint64_t decode_d2h_bytes_ = 0;  // device-to-host bytes of decode steps (logits or sampled ids)
    int64_t decode_steps_ahead_ = 0;  // steps enqueued with the input token of the step still in flight
    int32_t profile_pos_ = 0;    // the profiled step's position (for the K/V bytes attention reads)
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
