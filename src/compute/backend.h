// The coarse compute interface every backend (CPU reference, CUDA) implements: run tokens of one
// sequence through the model over its block table and return logits; move K/V blocks in and out
// (KvBlockStorage). The K/V bytes of physical block b live wherever the backend keeps them, laid out as
//   [n_layers][2 (K, V)][block_size][n_kv_heads][head_dim] in kv_dtype(),
// so one block is one contiguous record (what the session store saves and restores).
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "compute/best_tokens.h"
#include "format/dtype.h"
#include "format/model_config.h"
#include "kv/block_storage.h"
#include "kv/kv_pool.h"
#include "util/error.h"

namespace kvlm {

class ModelFile;
struct CudaSettings;

struct BackendOptions {
    int32_t n_threads = 0;        // CPU threads (0 = all cores)
    int32_t n_kv_blocks = 0;      // physical KV blocks in the pool
    bool kv_blocks_from_mem_size = false;  // n_kv_blocks came from --kv-mem SIZE (else from the context)
    int32_t block_size = 16;      // tokens per KV block
    DType kv_dtype = DType::f32;  // element type of the KV cache
    // The CUDA backend's own switches and launch rules (cuda/backend/cuda_settings.h); null: the CUDA backend
    // reads them from the KVLM_CUDA_* environment variables. Nothing outside cuda/ looks inside.
    std::shared_ptr<const CudaSettings> cuda;
    // What a user lowers first when the pool does not fit, before kv_pool_advice's own ("lower --samples or -n
    // (...)"); "" for none.
    std::string pool_advice;
    // > 0 (--kv-mem N%): grow the pool past n_kv_blocks to this fraction of the memory still free once the
    // weights and scratch are in place (device memory for CUDA, MemAvailable for the CPU).
    double kv_mem_fraction = 0;
};

// Published peak figures of the device a backend runs on, for roofline fractions in `kvlm bench`;
// 0 when unknown (the CPU backend, an unlisted GPU).
struct DevicePeaks {
    double memory_gb_s = 0;   // DRAM/HBM bandwidth, GB/s (1e9 bytes)
    double bf16_tflops = 0;   // dense bf16 tensor-core throughput with f32 accumulation, TFLOP/s
    std::string source;       // where the figures come from ("datasheet: H100 SXM5", "clock x bus width")
};

// The most physical KV blocks a pool may have (block ids are int32_t; kv_blocks_for_free_memory caps there too).
constexpr int64_t kMaxKvBlocks = int64_t(1) << 30;

// One decode step that picks its next token where the logits are (Backend::decode_sample): the sampler's
// settings (generate/sampler.h), the distinct tokens its repetition penalty touches this step, and the
// uniform draw in [0, 1) the CPU sampler takes for it, so that the same seed gives the same tokens either way.
struct SampleRequest {
    float temperature = 0, top_p = 1, min_p = 0, repeat_penalty = 1;
    int32_t top_k = 0;
    const int32_t* penalty_tokens = nullptr;  // each token once
    int32_t n_penalty = 0;
    // The step's input token is penalized too, wherever the list has it or not: a step enqueued before the
    // host knew its input (Backend::enqueue_decode_step) lists the window without it.
    bool penalize_step_token = false;
    bool want_probability = false;  // SampleOutcome::probability too (-v)
    double u01 = 0;
    // Constrained output: the pick is among these tokens (ascending ids, at least one), as
    // Sampler::sample_allowed picks; null: every token.
    const int32_t* allowed = nullptr;
    int32_t n_allowed = 0;
};
struct SampleOutcome {
    enum Status { kToken, kNeedsHost, kBadLogit };
    Status status = kNeedsHost;
    int32_t token = -1;          // kToken: the chosen token
    int32_t bad_index = -1;      // kBadLogit: the first NaN or infinite logit
    bool bad_is_nan = false;
    uint64_t logits_digest = 0;  // kToken, kBadLogit: a 64-bit digest of the step's logits
    float probability = -1;      // kToken with want_probability: token_probability (generate/sampler.h) of it
};

class Backend : public KvBlockStorage {
public:
    virtual ~Backend() = default;
    virtual std::string name() const = 0;  // "cpu", "cuda (NVIDIA H100 ...)"
    virtual const ModelConfig& config() const = 0;

    // Runs tokens[0..n_tokens) at positions pos..pos+n_tokens-1 through the model. Their K/V are written
    // into the blocks of `table` (which the caller has already grown to hold pos + n_tokens tokens);
    // attention reads positions 0..pos+n_tokens-1 through `table`. Writes logits for the last token
    // ([n_vocab]) into `logits`, or for every token ([n_tokens, n_vocab]) when all_logits is true.
    virtual void forward(const int32_t* tokens, int32_t n_tokens, int32_t pos, const BlockTable& table,
                         float* logits, bool all_logits = false) = 0;

    // One sequence of a forward_sequences call: as forward()'s arguments; logits null for none.
    struct SequenceInput {
        const int32_t* tokens = nullptr;
        int32_t n_tokens = 0;
        int32_t pos = 0;
        const BlockTable* table = nullptr;
        float* logits = nullptr;
        bool all_logits = false;
        // Optional, with logits: the next token picked where the logits are when samples_on_device(request)
        // (decode_sample's rule): the outcome gets kToken or kBadLogit and that row's logits are left
        // unwritten; otherwise it is kNeedsHost and the row's logits are there for the CPU sampler. One request
        // and outcome for the last row, or with all_logits n_tokens of each, row by row (speculative
        // verification: each row's token as its one-token step would pick it, with its own draw and window).
        const SampleRequest* sample = nullptr;
        SampleOutcome* outcome = nullptr;
        int32_t n_sampled_rows() const { return sample && outcome && logits ? (all_logits ? n_tokens : 1) : 0; }
        // Optional, with logits and not all_logits, not with sample (beam search): the row's min(n_best, n_vocab)
        // best tokens by best_tokens_cpu's rule with base best_base, into best[], computed where the logits are
        // (CUDA: on the device, in its own float order, `logits` then left unwritten; up to 64 of them).
        int32_t n_best = 0;
        float best_base = 0;
        TokenScore* best = nullptr;
    };
    // forward() of several sequences (distinct block tables, or shared blocks only before their writes) in
    // one call: a backend that batches runs all their rows through each weight matrix once, so N sequences
    // decoding together stream the weights once per step, not N times. Where exact_forward_tokens() > 0,
    // each token gets the logits bits of its own one-token step, however the sequences are batched.
    // Default: forward() one by one, every outcome kNeedsHost.
    virtual void forward_sequences(const SequenceInput* inputs, size_t n_inputs) {
        for (size_t i = 0; i < n_inputs; i++) {
            const SequenceInput& in = inputs[i];
            reset_outcomes(in);
            forward(in.tokens, in.n_tokens, in.pos, *in.table, in.logits, in.all_logits);
            best_tokens_on_host(in);
        }
    }
    // Every outcome of the sequence kNeedsHost (its rows sampled on the host unless the backend says otherwise).
    static void reset_outcomes(const SequenceInput& in) {
        if (in.outcome) std::fill_n(in.outcome, std::max(in.n_sampled_rows(), 1), SampleOutcome{});
    }
    // SequenceInput::best from its logits on the host (nothing when it asks for none).
    void best_tokens_on_host(const SequenceInput& in) const {
        if (in.best && in.logits && !in.all_logits)
            best_tokens_cpu(in.logits, config().n_vocab, in.best_base, in.n_best, in.best);
    }

    // Whether decode_sample picks tokens on the device for these settings (CUDA: greedy; top-k up to 1024; or
    // top-k off with a min-p floor; at most 1024 penalty tokens). Otherwise decode_sample is forward().
    virtual bool samples_on_device(const SampleRequest& request) const { return false; }
    // forward() of one token whose logits stay where they are computed: the next token is picked there and
    // only its id comes back (kToken), or the step's first bad logit (kBadLogit). kNeedsHost: the logits are
    // in `logits` [n_vocab] for the CPU sampler (with the same draw): a backend that does not sample, or more
    // candidates than the device sorts.
    virtual SampleOutcome decode_sample(int32_t token, int32_t pos, const BlockTable& table,
                                        const SampleRequest& request, float* logits) {
        forward(&token, 1, pos, table, logits, false);
        return {};
    }

    // Decode steps enqueued ahead, so that the device does not wait for the host between tokens: while one
    // step runs, the host queues the next with input kTokenFromDevice (the token the running step picks)
    // and a step_ahead_request, then waits for the first. Where chains_decode_steps(request) (CUDA: the
    // device always picks the token for such settings), enqueue_decode_step queues decode_sample's step
    // without waiting, and wait_decode_step returns the oldest queued step's outcome (kToken or kBadLogit).
    // At most two steps are in flight; a forward or decode_sample needs none in flight.
    static constexpr int32_t kTokenFromDevice = -1;
    virtual bool chains_decode_steps(const SampleRequest& request) const { return false; }
    virtual void enqueue_decode_step(int32_t token, int32_t pos, const BlockTable& table,
                                     const SampleRequest& request) {
        KVLM_ASSERT(false, "this backend does not queue decode steps");
    }
    virtual SampleOutcome wait_decode_step() {
        KVLM_ASSERT(false, "this backend does not queue decode steps");
        return {};
    }

    // Perplexity without the logits leaving the device: forward() of tokens[0..n_tokens) at pos whose output is,
    // for i in [0, n_tokens - 1 - first), nll[i] = -log softmax(logits of token first + i)[tokens[first + i + 1]]
    // (in double; NaN where that row has a non-finite logit), when scores_on_device(). Otherwise the caller
    // takes every logit (forward with all_logits) and scores them on the host.
    virtual bool scores_on_device() const { return false; }
    virtual void forward_nll(const int32_t* tokens, int32_t n_tokens, int32_t pos, const BlockTable& table,
                             int32_t first, double* nll) {
        KVLM_ASSERT(false, "this backend does not score on the device");
    }

    virtual DevicePeaks peaks() const { return {}; }
    // The most tokens a forward() may take and still give each token the logits bits of its own one-token
    // step (speculative decoding and jump-forward keep their batches within it, so the output is unchanged);
    // forward_sequences then does too, for any number of sequences. 0: neither is exact. The CPU backend is
    // exact for every length, path and split; CUDA for the batches it runs through its decode kernels.
    virtual int32_t exact_forward_tokens() const { return 0; }
};

// Argument checks shared by every backend (throw Error prefixed with `backend`, e.g. "cpu backend"):
// a physical block id inside the pool, and a forward call whose tokens are in the vocabulary and whose
// positions fit the blocks the table holds.
void check_kv_block(const char* backend, int32_t block, int32_t n_kv_blocks, const char* what);
void check_forward_args(const char* backend, const ModelConfig& config, int32_t block_size, int32_t n_kv_blocks,
                        const int32_t* tokens, int32_t n_tokens, int32_t pos, const BlockTable& table);

// A KV-cache type the model's shape allows (throws Error naming the problem): q8_0 needs head_dim a multiple
// of 32, so that each head's row is whole blocks.
void check_kv_dtype(const ModelConfig& config, DType kv_dtype);
// Physical KV blocks a backend allocates: options.n_kv_blocks, or enough for the model's context when 0.
int32_t kv_block_count(const ModelConfig& config, const BackendOptions& options);
// With options.kv_mem_fraction > 0: the larger of `minimum` and the blocks of `block_bytes` that fill that
// fraction of `free_bytes` (capped at 2^30 blocks); otherwise `minimum`.
int32_t kv_blocks_for_free_memory(int32_t minimum, const BackendOptions& options, uint64_t free_bytes,
                                  size_t block_bytes);
// What a user changes when the KV pool does not fit: --kv-mem only when it set the size (a share of free
// memory never goes below what the context needs), the context always, a 16-bit cache when it is f32, a q8_0
// one when it is 16-bit and head_dim allows it.
std::string kv_pool_advice(const ModelConfig& config, const BackendOptions& options);
// MemAvailable from /proc/meminfo in bytes (0 when unreadable).
uint64_t host_available_memory();

// KV bytes for one token across all layers (K and V) in `kv_dtype`.
size_t kv_bytes_per_token(const ModelConfig& config, DType kv_dtype);

std::unique_ptr<Backend> make_cpu_backend(const ModelFile& model, const BackendOptions& options);
// Defined in cuda/ when built with CUDA; otherwise throws Error saying kvlm was built without CUDA.
std::unique_ptr<Backend> make_cuda_backend(const ModelFile& model, const BackendOptions& options);
bool cuda_available(std::string* why_not);  // a usable device exists (false in CUDA=0 builds)

}  // namespace kvlm
