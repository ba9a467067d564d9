// Everything a generation needs, opened once: the memory-mapped model, its tokenizer, the chosen
// compute backend, the paged KV pool sized for the context and the prefix cache over it. run/chat/bench
// all start here.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "compute/backend.h"
#include "format/model_file.h"
#include "kv/kv_pool.h"
#include "kv/prefix_cache.h"
#include "tokenizer/tokenizer.h"

namespace kvlm {

struct EngineOptions {
    std::string device = "auto";  // auto | cuda | cpu
    int32_t n_threads = 0;        // CPU threads, 0 = all cores
    int32_t n_ctx = 0;            // context length; 0 = the model's, capped at kDefaultMaxContext
    int32_t block_size = 16;      // tokens per KV block
    std::string block_size_why;   // why block_size is not the default, for the device line
    uint64_t kv_mem_bytes = 0;    // KV pool budget; 0 = exactly enough blocks for n_ctx
    double kv_mem_fraction = 0;   // --kv-mem N%: the pool fills N% of the memory the backend has free (at least n_ctx)
    DType kv_dtype = DType::f32;  // --kv-dtype (ignored when kv_dtype_auto)
    // --kv-dtype auto: f32 for an f32 model (the reference's type); else 16 bits, half the pool and the
    // session store: on CUDA the model's matrix type when it is 16-bit (the tensor-core prefill attention
    // needs a 16-bit cache), else f16 (as llama.cpp).
    bool kv_dtype_auto = false;
    std::string kv_dtype_why;     // why kv_dtype was chosen, for the device line (e.g. "session 's' has it")
    int32_t n_spare_blocks = 0;   // KV blocks beyond the context when kv_mem_bytes is 0 (copy-on-write room
                                  // for sequences forked from a shared prompt)
    // Sequences that decode beside the first (--samples, --beams) when kv_mem_bytes is 0: each gets room for up
    // to parallel_new_tokens new tokens (capped by the context) and its copy of the prompt's last block.
    // parallel_flag names what asked for them in messages ("--samples 3").
    int32_t n_parallel_extra = 0;
    int64_t parallel_new_tokens = 0;
    std::string parallel_flag;
    bool quiet = false;           // no informational lines on stderr
    bool verbose = false;         // also the device line: which device and why (-v)
    // Tests: wraps the backend the engine picked (a stand-in with another backend's behaviour over it).
    std::function<std::unique_ptr<Backend>(std::unique_ptr<Backend>)> wrap_backend;
};

// The value of --kv-dtype into options: auto sets kv_dtype_auto, f32/f16/bf16 set kv_dtype; throws Error
// naming the flag otherwise.
void parse_kv_dtype(const std::string& name, EngineOptions* options);
// The value of --kv-mem into options: a size ("512MiB") sets kv_mem_bytes, a percentage ("90%", of the memory
// the device has free after the weights) sets kv_mem_fraction, "" leaves both 0. Throws Error naming the flag.
void parse_kv_mem(const std::string& text, EngineOptions* options);

// Default context cap when -c is not given: big trained contexts (128k) would reserve GiBs of KV.
constexpr int32_t kDefaultMaxContext = 8192;

class Engine {
public:
    // Opens the model (validated, mmapped), builds the tokenizer, picks the backend (saying which on
    // stderr unless quiet) and sizes the pool. Throws Error naming what is wrong.
    Engine(const std::string& model_path, const EngineOptions& options);
    ~Engine();

    const ModelFile& model() const { return *model_; }
    const Tokenizer& tokenizer() const { return *tokenizer_; }
    Backend& backend() { return *backend_; }
    KvPool& pool() { return *pool_; }
    PrefixCache& prefix_cache() { return *prefix_cache_; }
    DType kv_dtype() const { return kv_dtype_; }
    int32_t n_ctx() const { return n_ctx_; }
    // Tokens the whole KV pool holds, and the --kv-mem budget whose pool holds n_tokens (whole blocks).
    int64_t n_pool_tokens() const { return int64_t(pool_->n_blocks()) * pool_->block_size(); }
    uint64_t kv_mem_for_tokens(int64_t n_tokens) const;
    const std::string& device_name() const { return device_name_; }
    double load_seconds() const { return load_seconds_; }

private:
    std::unique_ptr<ModelFile> model_;
    std::unique_ptr<Tokenizer> tokenizer_;
    std::unique_ptr<Backend> backend_;
    std::unique_ptr<KvPool> pool_;
    std::unique_ptr<PrefixCache> prefix_cache_;  // after pool_ and backend_: destroyed before them
    DType kv_dtype_ = DType::f32;
    int32_t n_ctx_ = 0;
    std::string device_name_;
    double load_seconds_ = 0;
};

}  // namespace kvlm
