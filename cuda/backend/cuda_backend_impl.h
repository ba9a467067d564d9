// The CUDA backend (one class, its parts defined by job in five files): cuda_backend.cpp builds it (device,
// weights uploaded once through pinned staging, the KV pool of [n_kv_blocks] block records in the CPU
// backend's layout, scratch sized for the largest batch: after construction forward() allocates nothing)
// and moves KV blocks; forward_batch.cpp runs prefill batches through cuBLAS GEMMs; decode_step.cpp runs
// the one-token step (fused kernels, CUDA graphs, sampling on the device, steps queued ahead);
// decode_rows.cpp runs short batches and several sequences as rows of the decode kernels;
// decode_persistent_setup.cpp readies the decode step as one persistent kernel (KVLM_CUDA_PERSISTENT).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <map>
#include <vector>

#include "backend/cuda_backend.h"
#include "backend/cuda_settings.h"
#include "backend/decode_profile.h"
#include "backend/decode_slots.h"
#include "backend/device_peaks.h"
#include "backend/graph_cache.h"
#include "backend/matmul.h"
#include "backend/sample_host.h"
#include "compute/cpu_ops.h"
#include "format/model_file.h"
#include "kernels/cuda_ops.h"
#include "runtime/cublas_loader.h"
#include "runtime/cuda_check.h"
#include "runtime/pinned_buffer.h"
#include "runtime/programmatic_launch.h"
#include "util/byte_size.h"
#include "util/error.h"
#include "util/progress.h"

namespace kvlm::cuda_detail {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr int32_t kCudaMaxBatch = 2048;        // tokens per forward batch (longer prompts are chunked)
constexpr int32_t kLogitsRows = 256;           // rows of the logits buffer (all-logits batches go in chunks)
constexpr int64_t kAttentionSplitRows = 256;   // (head, split) rows per query head of attention scratch
constexpr size_t kStagingBytes = 32u << 20;    // per pinned staging buffer (two, double-buffered)
constexpr int32_t kTensorCorePrefillMin = 16;  // batch size from which prefill attention uses tensor cores
// forward() of up to this many tokens runs them as decode rows (forward_rows), each with the bits of its own
// one-token step: speculative verification and jump-forward rely on it. Longer batches are prefill GEMMs.
constexpr int32_t kExactForwardTokens = 16;
constexpr int32_t kRowsPerPass = 64;  // decode rows (of any sequences) one forward_rows pass takes

constexpr int64_t kDequantTileElements = int64_t(16) << 20;  // f16 scratch for prefill weight tiles (32 MiB)

// The 16-bit type a prefill GEMM's input takes for weights of `dtype`: the weights' own, and f16 for quantized
// weights (their tiles are dequantized to f16, see launch_matmul_quantized).
inline DType gemm_input_dtype(DType dtype) { return dtype_is_quantized(dtype) ? DType::f16 : dtype; }

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
        if (!p)
            throw_error("cuda backend: out of device memory allocating {} ({}){}", what,
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

// Selects device 0 and checks it before anything else is created.
inline int select_device(cudaDeviceProp* prop) {
    std::string why;
    if (!cuda_available(&why)) throw_error("cuda backend: no usable CUDA device: {}", why);
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaGetDeviceProperties(prop, 0));
    return 0;
}

// One output of a decode GEMV launch: out = W x (+ bias), W's rows n_out.
inline GemvOutput gemv_output(float* out, const TensorView& w, const TensorView* bias, int32_t n_out) {
    GemvOutput o;
    o.out = out, o.weight = w.data, o.dtype = w.dtype, o.n_out = n_out;
    o.bias = bias ? static_cast<const float*>(bias->data) : nullptr;
    return o;
}

class CudaBackend final : public Backend {
public:
    CudaBackend(const ModelConfig& config, const ModelWeights& weights, const BackendOptions& options,
                bool show_progress);

    ~CudaBackend() override;

    std::string name() const override { return name_; }
    const ModelConfig& config() const override { return config_; }
    DevicePeaks peaks() const override;
    int32_t exact_forward_tokens() const override { return fused_decode_ ? kExactForwardTokens : 0; }
    bool scores_on_device() const override { return true; }
    // forward_batch.cpp: perplexity's forward, scored where the logits are (token_nll.cu).
    void forward_nll(const int32_t* tokens, int32_t n_tokens, int32_t pos, const BlockTable& table, int32_t first,
                     double* nll) override;

    // cuda_backend.cpp: KV blocks in and out.
    int32_t n_kv_blocks() const override { return n_kv_blocks_; }
    size_t kv_block_bytes() const override { return layout_.block_bytes(); }
    void read_kv_block(int32_t block, void* dst) const override;
    void write_kv_block(int32_t block, const void* src) override;
    void* kv_staging(size_t n) override;
    void write_kv_blocks(const int32_t* blocks, size_t n, const void* src) override;
    void copy_kv_block(int32_t src_block, int32_t dst_block) override;

    // forward_batch.cpp (one token: decode_step.cpp; up to kExactForwardTokens: decode_rows.cpp).
    void forward(const int32_t* tokens, int32_t n_tokens, int32_t pos, const BlockTable& table, float* logits,
                 bool all_logits) override;
    // decode_rows.cpp.
    void forward_sequences(const SequenceInput* inputs, size_t n_inputs) override;

    // decode_step.cpp: sampling on the device, steps queued ahead.
    bool samples_on_device(const SampleRequest& r) const override;
    bool chains_decode_steps(const SampleRequest& r) const override;
    SampleOutcome decode_sample(int32_t token, int32_t pos, const BlockTable& table, const SampleRequest& request,
                                float* logits) override;
    void enqueue_decode_step(int32_t token, int32_t pos, const BlockTable& table,
                             const SampleRequest& request) override;
    SampleOutcome wait_decode_step() override;

private:
    cudaStream_t stream() const { return stream_->stream; }

    // cuda_backend.cpp: construction and checks.
    void check_block(int32_t block, const char* what) const {
        check_kv_block("cuda backend", block, n_kv_blocks_, what);
    }
    void check_forward(const int32_t* tokens, int32_t n_tokens, int32_t pos, const BlockTable& table) const;
    void upload_weights(const ModelWeights& host, bool show_progress);
    void allocate_kv_pool();
    void allocate_scratch();
    void allocate_dequant_tile();
    void ensure_table_capacity(int64_t n_blocks);

    // forward_batch.cpp: prefill batches.
    void for_each_batch(const int32_t* tokens, int32_t n_tokens, int32_t pos, const BlockTable& table,
                        const std::function<void(int32_t start, int32_t n)>& run);
    void forward_batch(int32_t n, int32_t pos, float* logits, bool all_logits);
    void score_rows(int32_t first_row, int32_t n_rows, const int32_t* targets, double* nll);
    void matmul(float* out, const float* in, const TensorView& w, int32_t n);
    const void* gemm_input(const float* x, const float* norm, int32_t n, int32_t width, DType weight_dtype);
    void gemm(float* out, const void* in, const TensorView& w, int32_t n, bool accumulate = false);

    // decode_rows.cpp. One decode row of forward_rows: a token of a sequence, where its logits go (null: not
    // wanted).
    struct DecodeRow {
        int32_t token, pos, input;
        float* logits;
        const SampleRequest* sample;  // the token picked on the device (samples_on_device), or null
        SampleOutcome* outcome;       // with sample: where its outcome goes
        const SequenceInput* best;    // its best tokens picked on the device (SequenceInput::best), or null
    };
    void forward_rows(const SequenceInput* inputs, size_t n_inputs);
    static bool best_on_device(const SequenceInput& in);
    void run_rows_pass(const SequenceInput* inputs, const DecodeRow* rows, int32_t n);
    void copy_back_rows(const DecodeRow* rows, int32_t n);
    void set_launch_rules(const CudaSettings& settings);
    void finish_sampled_rows(const DecodeRow* rows, int32_t n);
    void copy_best_rows(const DecodeRow* rows, int32_t w0, int32_t count);
    // Pass row w's allowed-token bitset (constrained output) queued for upload; its device address, or null
    // when the request has none. decode_sample uses row 0.
    const uint32_t* upload_allowed(int32_t w, const SampleRequest& request);
    int64_t rows_graph_key(const std::vector<int32_t>& shape);
    template <typename Run>
    void enqueue_rows(int32_t n, const Run* runs, size_t n_runs);

    // decode_step.cpp: the one-token step.
    void decode_step(int32_t token, int32_t pos, const BlockTable& table, float* logits);
    // A layer's Q, K and V projections (with their biases where the model has them) as one GEMV launch's outputs.
    std::array<GemvOutput, 3> qkv_outputs(const LayerWeights& lw) const;
    void enqueue_sampled_step(int32_t token, int32_t pos, const BlockTable& table, const SampleRequest& request);
    DecodeSlots::Slot& claim_decode_slot(int32_t pos);
    int32_t upload_decode_inputs(int32_t token, int32_t pos, const BlockTable& table, int32_t* staging);
    void run_decode(int32_t n_splits, int32_t pos, bool sample);
    void copy_logits_back(float* logits);
    void enqueue_decode(int32_t n_splits);
    // decode_persistent_setup.cpp: KVLM_CUDA_PERSISTENT's kernel (CudaSettings::persistent_blocks_per_sm).
    std::string setup_persistent_decode(const CudaSettings& settings);
    void enqueue_persistent_decode(int32_t n_splits);

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
    uint16_t* dequant_ = nullptr;  // [dequant_elements] f16: one tile of a quantized matrix's rows (prefill)
    int64_t dequant_elements_ = 0;
    AttentionScratch attention_;
    // ints_: [max_batch] tokens, [max_batch] positions and [max_batch] table offsets (forward_rows) of a batch,
    // the decode step's token and position, then [table_capacity] block table (forward_rows: several); the decode pair
    // sits next to the table so that a decode step uploads 2 + n_blocks ints in one copy.
    int32_t positions_at() const { return max_batch_; }
    int32_t rows_at() const { return 2 * max_batch_; }  // forward_rows: each row's offset into the tables
    int32_t decode_at() const { return 3 * max_batch_; }
    int32_t table_at() const { return 3 * max_batch_ + 2; }
    int32_t* ints_ = nullptr;
    std::unique_ptr<PinnedBuffer> ints_host_;   // pinned mirror of ints_
    std::unique_ptr<PinnedBuffer> kv_staging_;  // a session restore's blocks on their way to the device
    size_t kv_staging_bytes_ = 0;
    int64_t table_capacity_ = 0;
    bool fused_decode_ = false;  // single-token steps use the fused decode kernels (gate and up share a dtype)
    bool use_graphs_ = false;    // ... and replay them as CUDA graphs
    GraphCache decode_graphs_;   // keyed by the attention split count and whether the step samples
    GraphCache rows_graphs_;     // forward_rows passes, keyed through rows_graph_keys_ by their shape
    std::map<std::vector<int32_t>, int64_t> rows_graph_keys_;  // -1: seen once, no graph yet
    int64_t next_rows_graph_key_ = 0;
    std::unique_ptr<DecodeProfile> profile_;          // KVLM_CUDA_PROFILE=1 (graphs off)
    SampleInputs* sample_in_ = nullptr;               // device: sampler inputs (decode_sample [0], forward_rows all)
    SampleResult* sample_out_ = nullptr;              // device: their results ([kRowsPerPass] each)
    std::unique_ptr<PinnedBuffer> rows_sample_host_;  // forward_rows: [kRowsPerPass] inputs, then results
    SampleInputs* rows_sample_inputs_host() const { return reinterpret_cast<SampleInputs*>(rows_sample_host_->data()); }
    SampleResult* rows_sample_results_host() const {
        return reinterpret_cast<SampleResult*>(rows_sample_inputs_host() + kRowsPerPass);
    }
    TokenScore* best_out_ = nullptr;                // device: forward_rows' best tokens, [kRowsPerPass][kMaxDeviceBest]
    std::unique_ptr<PinnedBuffer> rows_best_host_;  // their pinned copy
    int32_t* nll_targets_ = nullptr;                // device: [kLogitsRows] tokens score_rows scores
    double* nll_ = nullptr;                         // device: [kLogitsRows] their negative log-likelihoods
    uint32_t* allowed_bits_ = nullptr;              // device: [kRowsPerPass][allowed_words] allowed-token bitsets
    std::unique_ptr<PinnedBuffer> allowed_host_;    // their pinned staging
    DecodeSlots decode_slots_;     // host staging and results of the decode steps in flight
    bool steps_ahead_ = true;      // KVLM_CUDA_STEPS_AHEAD=0: chains_decode_steps says no
    bool transfer_stats_ = false;  // KVLM_CUDA_TRANSFERS=1: print the counters below at the end
    int64_t decode_steps_ = 0;
    uint64_t decode_d2h_bytes_ = 0;   // device-to-host bytes of decode steps (logits or sampled ids)
    int64_t decode_steps_ahead_ = 0;  // steps enqueued with the input token of the step still in flight
    int64_t rows_passes_ = 0;         // forward_rows passes that wanted a row's logits or picks
    uint64_t rows_d2h_bytes_ = 0;     // their device-to-host bytes (logits, sampled ids, best tokens)
    int32_t profile_pos_ = 0;         // the profiled step's position (for the K/V bytes attention reads)
    PersistentDecodeArgs persistent_;  // the persistent decode kernel's arguments but the split count
    DType persistent_dtype_ = DType::f32;
    int32_t persistent_blocks_ = 0;  // its grid; 0: a launch per stage
    std::string name_;
};

}  // namespace kvlm::cuda_detail
