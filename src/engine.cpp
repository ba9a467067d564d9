// Engine set-up: model, tokenizer, backend choice (never a silent CPU fallback), KV pool sizing and the
// prefix cache over the pool.
#include "engine.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "byte_size.h"
#include "error.h"

namespace kvlm {

static std::unique_ptr<Backend> choose_backend(const ModelFile& model, const EngineOptions& options,
                                               const BackendOptions& backend_options, std::string* why) {
    if (options.device == "cpu") {
        *why = "requested with --device cpu";
        return make_cpu_backend(model, backend_options);
    }
    std::string why_not;
    bool have_cuda = cuda_available(&why_not);
    if (options.device == "cuda") {
        if (!have_cuda) throw_error("--device cuda: no usable CUDA device: {} (use --device cpu)", why_not);
        *why = "requested with --device cuda";
        return make_cuda_backend(model, backend_options);
    }
    if (options.device != "auto") throw_error("--device: unknown device '{}' (expected auto, cuda or cpu)", options.device);
    if (have_cuda) {
        *why = "auto: a CUDA device is available";
        return make_cuda_backend(model, backend_options);
    }
    *why = "auto: no CUDA device (" + why_not + ")";
    return make_cpu_backend(model, backend_options);
}

DType parse_kv_dtype(const std::string& name) {
    DType dtype = DType::f32;
    if (!dtype_from_name(name, &dtype))
        throw_error("--kv-dtype: '{}' is not a KV-cache type (expected f32, f16 or bf16)", name);
    return dtype;
}

void parse_kv_mem(const std::string& text, EngineOptions* options) {
    options->kv_mem_bytes = 0;
    options->kv_mem_fraction = 0;
    if (text.empty()) return;
    if (text.back() != '%') {
        options->kv_mem_bytes = parse_byte_size(text, "--kv-mem");
        return;
    }
    const std::string number = text.substr(0, text.size() - 1);
    char* end = nullptr;
    double percent = number.empty() ? 0 : std::strtod(number.c_str(), &end);
    if (number.empty() || *end != '\0' || !(percent > 0 && percent <= 100))
        throw_error("--kv-mem: '{}' is not a percentage between 0 and 100 (e.g. 90%) or a size (e.g. 512MiB)", text);
    options->kv_mem_fraction = percent / 100.0;
}

Engine::Engine(const std::string& model_path, const EngineOptions& options) {
    auto start = std::chrono::steady_clock::now();
    model_ = ModelFile::open(model_path);
    tokenizer_ = std::make_unique<Tokenizer>(model_->metadata().tokenizer);
    const ModelConfig& config = model_->config();

    if (options.block_size < 1 || options.block_size > 4096)
        throw_error("--block-size: {} is out of range (1..4096)", options.block_size);
    if (options.n_ctx < 0) throw_error("--ctx-size: {} must not be negative", options.n_ctx);
    if (options.n_ctx > config.n_ctx)
        throw_error("--ctx-size: {} exceeds the model's trained context of {} tokens", options.n_ctx, config.n_ctx);
    n_ctx_ = options.n_ctx > 0 ? options.n_ctx : std::min(config.n_ctx, kDefaultMaxContext);

    BackendOptions backend_options;
    backend_options.n_threads = options.n_threads;
    backend_options.block_size = options.block_size;
    backend_options.kv_dtype = options.kv_dtype;
    // A debugging switch (like llama.cpp's GGML_CUDA_DISABLE_GRAPHS): the same kernels, launched one by one.
    if (const char* graphs = std::getenv("KVLM_CUDA_GRAPHS"); graphs && std::strcmp(graphs, "0") == 0)
        backend_options.cuda_graphs = false;
    int64_t blocks_for_ctx = (int64_t(n_ctx_) + options.block_size - 1) / options.block_size;
    if (options.kv_mem_bytes > 0) {
        uint64_t block_bytes = kv_bytes_per_token(config, options.kv_dtype) * uint64_t(options.block_size);
        uint64_t n_blocks = options.kv_mem_bytes / block_bytes;
        if (n_blocks == 0)
            throw_error("--kv-mem: {} bytes is less than one KV block ({} bytes for {} tokens)", options.kv_mem_bytes,
                        block_bytes, options.block_size);
        backend_options.n_kv_blocks = int32_t(std::min<uint64_t>(n_blocks, uint64_t(1) << 30));
    } else {
        if (options.n_spare_blocks < 0) throw_error("n_spare_blocks = {} must not be negative", options.n_spare_blocks);
        backend_options.n_kv_blocks = int32_t(blocks_for_ctx + options.n_spare_blocks);
        backend_options.kv_mem_fraction = options.kv_mem_fraction;  // the backend may grow the pool from there
    }

    std::string why;
    backend_ = choose_backend(*model_, options, backend_options, &why);
    device_name_ = backend_->name();
    pool_ = std::make_unique<KvPool>(backend_->n_kv_blocks(), options.block_size);
    kv_dtype_ = options.kv_dtype;
    prefix_cache_ = std::make_unique<PrefixCache>(
        *pool_, *backend_, kv_namespace_hash(model_->fingerprint(), options.kv_dtype, options.block_size));
    load_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!options.quiet) {
        std::fprintf(stderr, "kvlm: device %s (%s)\n", device_name_.c_str(), why.c_str());
        if (options.kv_mem_bytes > 0 && blocks_for_ctx > backend_options.n_kv_blocks)
            std::fprintf(stderr, "kvlm: note: --kv-mem holds %lld tokens, less than the context of %d\n",
                         (long long)backend_options.n_kv_blocks * options.block_size, n_ctx_);
        if (options.kv_mem_fraction > 0)
            std::fprintf(stderr, "kvlm: KV pool: %d blocks, %lld tokens, %s (--kv-mem %g%% of the free memory)\n",
                         backend_->n_kv_blocks(), (long long)n_pool_tokens(),
                         byte_size_text(uint64_t(backend_->n_kv_blocks()) * backend_->kv_block_bytes()).c_str(),
                         options.kv_mem_fraction * 100);
    }
}

Engine::~Engine() = default;

uint64_t Engine::kv_mem_for_tokens(int64_t n_tokens) const {
    int64_t n_blocks = (n_tokens + pool_->block_size() - 1) / pool_->block_size();
    return uint64_t(n_blocks) * backend_->kv_block_bytes();
}

}  // namespace kvlm
