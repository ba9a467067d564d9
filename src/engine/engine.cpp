// Engine set-up: model, tokenizer, backend choice (never a silent CPU fallback), KV pool sizing and the
// prefix cache over the pool.
#include "engine/engine.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>

#include "engine/model_check.h"
#include "util/byte_size.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace kvlm {

// True for CUDA, false for the CPU; never a silent CPU fallback when CUDA was asked for.
static bool choose_cuda(const EngineOptions& options, std::string* why) {
    if (options.device == "cpu") {
        *why = "requested with --device cpu";
        return false;
    }
    std::string why_not;
    bool have_cuda = cuda_available(&why_not);
    if (options.device == "cuda") {
        if (!have_cuda) throw_error("--device cuda: no usable CUDA device: {} (use --device cpu)", why_not);
        *why = "requested with --device cuda";
        return true;
    }
    if (options.device != "auto") throw_error("--device: unknown device '{}' (expected auto, cuda or cpu)", options.device);
    *why = have_cuda ? "auto: a CUDA device is available" : "auto: no CUDA device (" + why_not + ")";
    return have_cuda;
}

// --kv-dtype auto (see EngineOptions::kv_dtype_auto), from the type of the first layer's attention matrices.
static DType auto_kv_dtype(const ModelFile& model, bool cuda, std::string* why) {
    const TensorInfo* q = model.find("blk.0.attn_q.weight");
    const DType weights = q ? q->dtype : DType::f32;
    if (weights == DType::f32) {
        if (cuda) *why = "auto: the model's f32 weights";  // the CPU's f32 for f32 models goes unannounced
        return DType::f32;
    }
    if (cuda && (weights == DType::bf16 || weights == DType::f16)) {
        *why = fmt::format("auto: the model's {} weights on CUDA", dtype_name(weights));
        return weights;
    }
    *why = fmt::format("auto: f16 for the model's {} weights", dtype_name(weights));
    return DType::f16;
}

void parse_kv_dtype(const std::string& name, EngineOptions* options) {
    options->kv_dtype_auto = name == "auto";
    if (options->kv_dtype_auto) return;
    if (!dtype_from_name(name, &options->kv_dtype) || !kv_dtype_is_supported(options->kv_dtype))
        throw_error("--kv-dtype: '{}' is not a KV-cache type (expected auto, f32, f16, bf16 or q8_0)", name);
}

void parse_kv_mem(const std::string& text, EngineOptions* options) {
    options->kv_mem_bytes = 0;
    options->kv_mem_fraction = 0;
    if (text.empty()) return;
    if (text.back() != '%') {
        options->kv_mem_bytes = parse_byte_size(text, "--kv-mem");
        // 0 would mean "not given" below: a budget of nothing is a mistake, not a request for the default.
        if (options->kv_mem_bytes == 0) throw_error("--kv-mem: '{}' is 0 bytes (give a size, e.g. 512MiB, or a share such as 90%)", text);
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
    using Clock = std::chrono::steady_clock;
    auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
    const auto start = Clock::now();
    model_ = ModelFile::open(model_path);
    const double open_seconds = seconds_since(start);
    // The tokenizer (tens of ms for a 49k-piece BPE vocabulary) is built on a second thread while this one
    // verifies the weights (which also maps them in): start-up is the longer of the two, not their sum.
    // The future's destructor waits for it whichever of the two throws. Where no thread can be started,
    // libstdc++ falls back to `deferred`: get() builds it here (the thread pool then reports the limit).
    double tokenizer_seconds = 0;
    std::future<std::unique_ptr<Tokenizer>> tokenizer =
        std::async(std::launch::async | std::launch::deferred, [this, &tokenizer_seconds, seconds_since] {
            const auto built = Clock::now();
            auto made = std::make_unique<Tokenizer>(model_->metadata().tokenizer, Tokenizer::KeepReference{});
            tokenizer_seconds = seconds_since(built);
            return made;
        });
    const ModelCheck check = check_model_at_load(*model_, !options.quiet);
    if (check.first_use && !options.quiet)
        std::fprintf(stderr, "kvlm: verified the checksums of %s (%s) on its first use in %.1f s; later runs skip "
                     "that until the file changes\n",
                     model_->path().c_str(), byte_size_text(model_->file_size()).c_str(), check.seconds);
    tokenizer_ = tokenizer.get();
    const ModelConfig& config = model_->config();

    if (options.block_size < 1 || options.block_size > 4096)
        throw_error("--block-size: {} is out of range (1..4096)", options.block_size);
    if (options.n_ctx < 0) throw_error("--ctx-size: {} must not be negative", options.n_ctx);
    if (options.n_ctx > config.n_ctx)
        throw_error("--ctx-size: {} exceeds the model's trained context of {} tokens", options.n_ctx, config.n_ctx);
    n_ctx_ = options.n_ctx > 0 ? options.n_ctx : std::min(config.n_ctx, kDefaultMaxContext);

    std::string device_why, kv_why = options.kv_dtype_why;
    const bool cuda = choose_cuda(options, &device_why);
    kv_dtype_ = options.kv_dtype_auto ? auto_kv_dtype(*model_, cuda, &kv_why) : options.kv_dtype;

    if (options.n_threads < 0)
        throw_error("-t: {} is not a thread count (use 1 or more, or 0 for every available core)", options.n_threads);
    // More threads than cores only slows the CPU backend down (spinning workers wait on each other), and
    // thousands of them exhaust the machine's process table: use the cores there are, and say so.
    const int32_t n_cores = available_cores();
    std::string threads_note;
    int32_t n_threads = options.n_threads;
    if (n_threads > n_cores) {
        threads_note = fmt::format("-t {} is more than the {} cores available to kvlm: using {}", n_threads, n_cores,
                                   n_cores);
        n_threads = n_cores;
    }

    BackendOptions backend_options;
    backend_options.n_threads = n_threads;
    backend_options.block_size = options.block_size;
    backend_options.kv_dtype = kv_dtype_;
    int64_t blocks_for_ctx = (int64_t(n_ctx_) + options.block_size - 1) / options.block_size;
    if (options.kv_mem_bytes > 0) {
        uint64_t block_bytes = kv_bytes_per_token(config, kv_dtype_) * uint64_t(options.block_size);
        uint64_t n_blocks = options.kv_mem_bytes / block_bytes;
        if (n_blocks == 0)
            throw_error("--kv-mem: {} bytes is less than one KV block ({} bytes for {} tokens)", options.kv_mem_bytes,
                        block_bytes, options.block_size);
        backend_options.n_kv_blocks = int32_t(std::min<uint64_t>(n_blocks, uint64_t(kMaxKvBlocks)));
        backend_options.kv_blocks_from_mem_size = true;
    } else {
        KVLM_ASSERT(options.n_spare_blocks >= 0 && options.n_parallel_extra >= 0 && options.parallel_new_tokens >= 0,
                    "negative spare blocks or parallel sequences");
        // Each parallel sequence writes at most the context's worth of new tokens, whatever -n says.
        const int64_t per_sequence =
            (std::min<int64_t>(options.parallel_new_tokens, n_ctx_) + options.block_size - 1) / options.block_size + 1;
        const int64_t n_blocks =
            blocks_for_ctx + options.n_spare_blocks + int64_t(options.n_parallel_extra) * per_sequence;
        if (n_blocks > kMaxKvBlocks)
            throw_error("{} with up to {} new tokens each needs a KV pool of {} blocks ({}), more than kvlm can hold "
                        "({} blocks); lower {} or -n",
                        options.parallel_flag, std::min<int64_t>(options.parallel_new_tokens, n_ctx_), n_blocks,
                        byte_size_text(uint64_t(n_blocks) * kv_bytes_per_token(config, kv_dtype_) *
                                       uint64_t(options.block_size)),
                        kMaxKvBlocks, options.parallel_flag.substr(0, options.parallel_flag.find(' ')));
        backend_options.n_kv_blocks = int32_t(n_blocks);
        if (options.n_parallel_extra > 0)
            backend_options.pool_advice =
                fmt::format("lower {} or -n (each of the {} sequences holds up to {} new tokens)",
                            options.parallel_flag.substr(0, options.parallel_flag.find(' ')),
                            int64_t(options.n_parallel_extra) + 1,
                            std::min<int64_t>(options.parallel_new_tokens, n_ctx_));
        backend_options.kv_mem_fraction = options.kv_mem_fraction;  // the backend may grow the pool from there
    }

    const auto backend_start = Clock::now();
    backend_ = cuda ? make_cuda_backend(*model_, backend_options) : make_cpu_backend(*model_, backend_options);
    if (options.wrap_backend) backend_ = options.wrap_backend(std::move(backend_));
    const double backend_seconds = seconds_since(backend_start);
    device_name_ = backend_->name();
    pool_ = std::make_unique<KvPool>(backend_->n_kv_blocks(), options.block_size);
    prefix_cache_ = std::make_unique<PrefixCache>(
        *pool_, *backend_, kv_namespace_hash(model_->fingerprint(), kv_dtype_, options.block_size));
    load_seconds_ = seconds_since(start);
    if (!options.quiet) {
        if (!threads_note.empty()) std::fprintf(stderr, "kvlm: warning: %s\n", threads_note.c_str());
        if (options.verbose) {
            std::fprintf(stderr, "kvlm: device %s (%s)\n", device_name_.c_str(), device_why.c_str());
            // Where start-up goes (issue 17's <= 50 ms budget): the tokenizer and the weights check overlap.
            std::fprintf(stderr,
                         "kvlm: load %.3f s: model file %.3f s, tokenizer %.3f s beside the weights check %.3f s%s, "
                         "backend %.3f s (KV pool %s)\n",
                         load_seconds_, open_seconds, tokenizer_seconds, check.seconds,
                         check.verified ? "" : " (skipped: verified before)", backend_seconds,
                         byte_size_text(uint64_t(backend_->n_kv_blocks()) * backend_->kv_block_bytes()).c_str());
            // What --kv-dtype auto and a session's saved block size chose (nothing a user must act on: -v only).
            if (!kv_why.empty())
                std::fprintf(stderr, "kvlm: KV cache %s (%s)\n", dtype_name(kv_dtype_), kv_why.c_str());
            if (!options.block_size_why.empty())
                std::fprintf(stderr, "kvlm: KV block size %d (%s)\n", options.block_size,
                             options.block_size_why.c_str());
        }
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
