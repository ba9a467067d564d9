// The CUDA backend's construction (device, weights, KV pool, scratch) and its KV block storage; the class
// and the other parts: cuda_backend_impl.h.
#include "backend/cuda_backend_impl.h"

namespace kvlm::cuda_detail {

CudaBackend::CudaBackend(const ModelConfig& config, const ModelWeights& weights, const BackendOptions& options,
                         bool show_progress)
    : config_(config), device_(select_device(&prop_)) {
    config_.validate("cuda backend");
    check_model_weights(config_, weights, "cuda backend");
    if (options.block_size < 1) throw_error("cuda backend: block size {} must be at least 1", options.block_size);
    if (config_.head_dim > kCudaMaxHeadDim)
        throw_error("cuda backend: head_dim {} is above the {} the attention kernel supports (use --device cpu)",
                    config_.head_dim, kCudaMaxHeadDim);
    const CudaSettings settings = options.cuda ? *options.cuda : CudaSettings::from_environment();
    set_programmatic_launches(settings.programmatic_launches);  // process-wide: the launchers take no backend
    stream_ = std::make_unique<Stream>();
    cublas_ = std::make_unique<CublasHandle>();  // loads cuBLAS; throws naming the library when missing
    n_kv_blocks_ = kv_block_count(config_, options);
    check_kv_dtype(config_, options.kv_dtype);
    kv_pool_advice_ = kv_pool_advice(config_, options);
    layout_ = KvLayout::of(config_, options.block_size, options.kv_dtype);

    upload_weights(weights, show_progress);
    allocate_scratch();
    set_launch_rules(settings);
    // --kv-mem N%: the pool takes that share of what the weights and scratch left free.
    size_t free_bytes = 0, total_bytes = 0;
    if (options.kv_mem_fraction > 0) CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    n_kv_blocks_ = kv_blocks_for_free_memory(n_kv_blocks_, options, free_bytes, layout_.block_bytes());
    ensure_table_capacity(n_kv_blocks_);
    allocate_kv_pool();
    fused_decode_ = std::all_of(weights_.layers.begin(), weights_.layers.end(),
                                [](const LayerWeights& lw) { return lw.ffn_gate.dtype == lw.ffn_up.dtype; });
    if (settings.profile && fused_decode_) profile_ = std::make_unique<DecodeProfile>(stream());
    transfer_stats_ = settings.transfer_stats;
    steps_ahead_ = settings.steps_ahead;
    use_graphs_ = settings.graphs && fused_decode_ && !profile_;
    const std::string persistent = setup_persistent_decode(settings);
    name_ = fmt::format("cuda ({}, {} SMs, {:.0f} GiB{}{}{}{})", prop_.name, prop_.multiProcessorCount,
                        double(prop_.totalGlobalMem) / kGiB,
                        use_graphs_     ? ", decode in CUDA graphs"
                        : profile_      ? ", decode profiled: CUDA graphs off"
                        : fused_decode_ ? ", CUDA graphs off"
                                        : "",
                        programmatic_launches_on_device() ? ", programmatic launches" : "",
                        settings.launch_rules_text(), persistent);
}

// CudaSettings::attn_* and gemv: attention's launch rules and the GEMVs' launch shape (the latter process-wide,
// like programmatic launches) other than the defaults, a tuning sweep's. Before any launch.
void CudaBackend::set_launch_rules(const CudaSettings& settings) {
    try {
        set_gemv_launch_rules(settings.gemv);
    } catch (const Error& e) {
        throw_error("cuda backend: {} (KVLM_CUDA_GEMV_ROWS, _THREADS, _SPLIT, _STAGE)", e.what());
    }
    if (settings.attn_split_keys != 0) {
        if (settings.attn_split_keys < 128 || settings.attn_split_keys % 128 != 0)
            throw_error(
                "cuda backend: attention split keys {} must be a positive multiple of 128 "
                "(KVLM_CUDA_ATTN_SPLIT_KEYS)",
                settings.attn_split_keys);
        attention_.min_split_keys = settings.attn_split_keys;
    }
    if (settings.attn_fill_per_sm != 0) {
        if (settings.attn_fill_per_sm < 1 || settings.attn_fill_per_sm > 64)
            throw_error("cuda backend: attention blocks per multiprocessor {} must be 1 to 64 (KVLM_CUDA_ATTN_FILL)",
                        settings.attn_fill_per_sm);
        attention_.fill_per_sm = settings.attn_fill_per_sm;
    }
    if (settings.attn_one_head != -1) {
        if (settings.attn_one_head != 0 && settings.attn_one_head != 1)
            throw_error("cuda backend: attention one-head rule {} must be 0, 1 or auto (KVLM_CUDA_ATTN_ONE_HEAD)",
                        settings.attn_one_head);
        attention_.one_head = settings.attn_one_head;
    }
}

CudaBackend::~CudaBackend() {
    if (stream_) cudaStreamSynchronize(stream_->stream);
    if (profile_ && profile_->steps() > 0) std::fputs(profile_->table().c_str(), stderr);
    if (transfer_stats_ && decode_steps_ > 0)
        fmt::print(stderr,
                   "kvlm: CUDA transfers: {} decode steps, {} bytes device to host ({} per step); {} of the steps "
                   "enqueued before the host had their input token\n",
                   decode_steps_, decode_d2h_bytes_, decode_d2h_bytes_ / decode_steps_, decode_steps_ahead_);
    if (transfer_stats_ && rows_passes_ > 0)
        fmt::print(stderr, "kvlm: CUDA transfers: {} decode-row passes, {} bytes device to host ({} per pass)\n",
                   rows_passes_, rows_d2h_bytes_, rows_d2h_bytes_ / uint64_t(rows_passes_));
}

DevicePeaks CudaBackend::peaks() const {
    int clock_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0) != cudaSuccess) clock_khz = 0;
    if (cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0) != cudaSuccess) bus_bits = 0;
    cudaGetLastError();
    return cuda_device_peaks(prop_.name, clock_khz, bus_bits);
}

void CudaBackend::read_kv_block(int32_t block, void* dst) const {
    check_block(block, "read_kv_block");
    CUDA_CHECK(cudaMemcpyAsync(dst, kv_ + size_t(block) * kv_block_bytes(), kv_block_bytes(), cudaMemcpyDeviceToHost,
                               stream()));
    CUDA_CHECK(cudaStreamSynchronize(stream()));
}

void CudaBackend::write_kv_block(int32_t block, const void* src) {
    check_block(block, "write_kv_block");
    CUDA_CHECK(cudaMemcpyAsync(kv_ + size_t(block) * kv_block_bytes(), src, kv_block_bytes(), cudaMemcpyHostToDevice,
                               stream()));
    CUDA_CHECK(cudaStreamSynchronize(stream()));
}

void* CudaBackend::kv_staging(size_t n) {
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
void CudaBackend::write_kv_blocks(const int32_t* blocks, size_t n, const void* src) {
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

void CudaBackend::copy_kv_block(int32_t src_block, int32_t dst_block) {
    check_block(src_block, "copy_kv_block");
    check_block(dst_block, "copy_kv_block");
    if (src_block == dst_block) return;
    CUDA_CHECK(cudaMemcpyAsync(kv_ + size_t(dst_block) * kv_block_bytes(), kv_ + size_t(src_block) * kv_block_bytes(),
                               kv_block_bytes(), cudaMemcpyDeviceToDevice, stream()));
    CUDA_CHECK(cudaStreamSynchronize(stream()));
}

void CudaBackend::check_forward(const int32_t* tokens, int32_t n_tokens, int32_t pos, const BlockTable& table) const {
    KVLM_ASSERT(decode_slots_.in_flight() == 0, "a forward while decode steps are in flight");
    check_forward_args("cuda backend", config_, layout_.block_size, n_kv_blocks_, tokens, n_tokens, pos, table);
}

// Weights: one device allocation holding every distinct tensor (a tied output head is stored once),
// copied through two pinned staging buffers so the host copy of one chunk overlaps the DMA of the other.
void CudaBackend::upload_weights(const ModelWeights& host, bool show_progress) {
    std::vector<const TensorView*> views = {&host.token_embd, &host.output_norm, &host.output};
    for (const LayerWeights& lw : host.layers)
        for (const TensorView* v :
             {&lw.attn_norm, &lw.attn_q, &lw.attn_k, &lw.attn_v, &lw.attn_q_bias, &lw.attn_k_bias, &lw.attn_v_bias,
              &lw.attn_output, &lw.ffn_norm, &lw.ffn_gate, &lw.ffn_up, &lw.ffn_down})
            if (v->data) views.push_back(v);
    std::map<const void*, size_t> offsets;  // host data -> offset in the device weight buffer
    size_t total = 0;
    for (const TensorView* v : views)
        if (offsets.emplace(v->data, total).second) total += (v->n_bytes() + 255) / 256 * 256;
    char* device = static_cast<char*>(arena_.try_alloc(total));
    if (!device)
        throw_error(
            "cuda backend: the model's weights ({}) do not fit in device memory{} (use a smaller model or "
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
    declare_immutable(device);

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

void CudaBackend::allocate_kv_pool() {
    size_t block_bytes = layout_.block_bytes();
    size_t total = size_t(n_kv_blocks_) * block_bytes;
    if (total / block_bytes != size_t(n_kv_blocks_)) throw_error("cuda backend: KV cache size overflows");
    kv_ = static_cast<char*>(arena_.try_alloc(total));
    if (!kv_)
        throw_error(
            "cuda backend: the KV pool of {} blocks ({}, {} tokens per block, {}) does not fit in "
            "device memory after the weights{}; {}",
            n_kv_blocks_, byte_size_text(total), layout_.block_size, dtype_name(layout_.dtype),
            DeviceArena::free_memory_note(), kv_pool_advice_);
    CUDA_CHECK(cudaMemsetAsync(kv_, 0, total, stream()));
}

void CudaBackend::allocate_scratch() {
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
    sample_in_ = arena_.alloc<SampleInputs>(size_t(kRowsPerPass), "the sampler's inputs");
    sample_out_ = arena_.alloc<SampleResult>(size_t(kRowsPerPass), "the sampler's results");
    rows_sample_host_ =
        std::make_unique<PinnedBuffer>(size_t(kRowsPerPass) * (sizeof(SampleInputs) + sizeof(SampleResult)));
    static_assert(kRowsPerPass <= kMaxBestRows, "a pass's best-token rows fit one launch");
    best_out_ = arena_.alloc<TokenScore>(size_t(kRowsPerPass) * kMaxDeviceBest, "the best tokens");
    rows_best_host_ = std::make_unique<PinnedBuffer>(size_t(kRowsPerPass) * kMaxDeviceBest * sizeof(TokenScore));
    nll_targets_ = arena_.alloc<int32_t>(size_t(kLogitsRows), "perplexity's targets");
    nll_ = arena_.alloc<double>(size_t(kLogitsRows), "perplexity's scores");
    allowed_bits_ = arena_.alloc<uint32_t>(size_t(kRowsPerPass) * allowed_words(c.n_vocab), "the allowed-token masks");
    allowed_host_ = std::make_unique<PinnedBuffer>(size_t(kRowsPerPass) * allowed_words(c.n_vocab) * sizeof(uint32_t));
    attention_.max_rows = int64_t(c.n_heads) * kAttentionSplitRows;
    attention_.partials = arena_.alloc<float>(size_t(attention_.max_rows) * (kCudaMaxHeadDim + 2), "attention scratch");
    std::vector<float> inv_freq(size_t(c.head_dim / 2));
    rope_inv_freq(inv_freq.data(), c.head_dim, c.rope_theta, c.rope_scaling);
    inv_freq_ = arena_.alloc<float>(inv_freq.size(), "RoPE table");
    CUDA_CHECK(
        cudaMemcpyAsync(inv_freq_, inv_freq.data(), inv_freq.size() * sizeof(float), cudaMemcpyHostToDevice, stream()));
    CUDA_CHECK(cudaStreamSynchronize(stream()));
    declare_immutable(inv_freq_);
    ensure_table_capacity(
        std::max<int64_t>(n_kv_blocks_, (int64_t(c.n_ctx) + layout_.block_size - 1) / layout_.block_size));
}

// Quantized matrices (weights stay quantized on the device): prefill GEMMs widen kDequantTileElements of
// weights (whole rows, at least one) at a time to f16, so the scratch is the largest quantized matrix or
// that much, whichever is smaller. None without quantized matrices.
void CudaBackend::allocate_dequant_tile() {
    int64_t largest = 0, widest_row = 0;
    auto note = [&](const TensorView& v) {
        if (!v.data || !dtype_is_quantized(v.dtype)) return;
        largest = std::max(largest, v.n_elements());
        widest_row = std::max(widest_row, v.shape[1]);
    };
    note(weights_.output);
    for (const LayerWeights& lw : weights_.layers)
        for (const TensorView* v :
             {&lw.attn_q, &lw.attn_k, &lw.attn_v, &lw.attn_output, &lw.ffn_gate, &lw.ffn_up, &lw.ffn_down})
            note(*v);
    if (largest == 0) return;
    dequant_elements_ = std::max(std::min(largest, kDequantTileElements), widest_row);
    dequant_ = arena_.alloc<uint16_t>(size_t(dequant_elements_), "the dequantized weight tile");
}

// Device and pinned room for [max_batch] tokens, [max_batch] positions and [n_blocks] table entries.
// Sized at construction for any table of distinct pool blocks; only grows for longer tables.
void CudaBackend::ensure_table_capacity(int64_t n_blocks) {
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

}  // namespace kvlm::cuda_detail

namespace kvlm {

using cuda_detail::CudaBackend;

std::unique_ptr<Backend> make_cuda_backend(const ModelConfig& config, const ModelWeights& weights,
                                           const BackendOptions& options, bool show_progress) {
    return std::make_unique<CudaBackend>(config, weights, options, show_progress);
}

std::unique_ptr<Backend> make_cuda_backend(const ModelFile& model, const BackendOptions& options) {
    return make_cuda_backend(model.config(), bind_model_weights(model), options, true);
}

}  // namespace kvlm
