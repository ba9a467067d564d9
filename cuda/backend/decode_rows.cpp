// CudaBackend::forward_sequences and short forwards: tokens of one or several sequences as rows of the decode
// kernels, each row with the bits of its own one-token step.
#include "backend/cuda_backend_impl.h"

namespace kvlm::cuda_detail {

// Every sequence's tokens as decode rows, all rows through each weight matrix together (forward_rows): each
// sequence gets the logits bits of forward() of it alone, one token at a time.
void CudaBackend::forward_sequences(const SequenceInput* inputs, size_t n_inputs) {
    if (!fused_decode_) {
        Backend::forward_sequences(inputs, n_inputs);
        return;
    }
    for (size_t i = 0; i < n_inputs; i++) {
        const SequenceInput& in = inputs[i];
        if (!in.table) throw_error("cuda backend: forward_sequences: sequence {} has no block table", i);
        check_forward(in.tokens, in.n_tokens, in.pos, *in.table);
        if (in.sample && in.best)
            throw_error("cuda backend: forward_sequences: sequence {} asks for a sampled token and its best tokens", i);
        reset_outcomes(in);  // kNeedsHost unless its rows sample below
    }
    forward_rows(inputs, n_inputs);
    for (size_t i = 0; i < n_inputs; i++)
        if (!best_on_device(inputs[i])) best_tokens_on_host(inputs[i]);
}

// Whether a sequence's best tokens (SequenceInput::best) are picked where its logits are.
bool CudaBackend::best_on_device(const SequenceInput& in) {
    return in.best && in.logits && !in.all_logits && in.n_best >= 1 && in.n_best <= kMaxDeviceBest;
}

// The tokens of `inputs` (checked) as rows of the decode step's kernels, kRowsPerPass rows per pass in
// sequence order (a sequence's later rows attend to its earlier ones, written in the same or an earlier
// pass): each GEMV streams its weights once per 8 rows (launch_gemv_tokens), RoPE/KV writes and attention
// take every row's own block table in one launch, and attention runs each row with the split count of
// its own decode step. So every row has the bits of its one-token step.
void CudaBackend::forward_rows(const SequenceInput* inputs, size_t n_inputs) {
    std::vector<DecodeRow> rows;
    for (size_t i = 0; i < n_inputs; i++) {
        const SequenceInput& in = inputs[i];
        // The rows asked to (the last, or with all_logits each) pick their next tokens on the device when the
        // settings allow.
        const int32_t n_sampled = in.n_sampled_rows(), first_sampled = in.n_tokens - n_sampled;
        const bool best = n_sampled == 0 && best_on_device(in);
        for (int32_t t = 0; t < in.n_tokens; t++) {
            float* dst = nullptr;
            if (in.logits && in.all_logits)
                dst = in.logits + int64_t(t) * config_.n_vocab;
            else if (in.logits && t + 1 == in.n_tokens)
                dst = in.logits;
            const bool last = t + 1 == in.n_tokens;
            const int32_t s = t - first_sampled;  // the row's request and outcome
            const bool sampled = s >= 0 && samples_on_device(in.sample[s]);
            rows.push_back({in.tokens[t], in.pos + t, int32_t(i), dst, sampled ? in.sample + s : nullptr,
                            sampled ? in.outcome + s : nullptr, best && last ? &in : nullptr});
        }
    }
    const size_t pass_rows = size_t(std::min({kRowsPerPass, max_batch_, kLogitsRows}));
    for (size_t r0 = 0; r0 < rows.size(); r0 += pass_rows) {
        const size_t n = std::min(pass_rows, rows.size() - r0);
        run_rows_pass(inputs, rows.data() + r0, int32_t(n));
    }
}

void CudaBackend::run_rows_pass(const SequenceInput* inputs, const DecodeRow* rows, int32_t n) {
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
    if (key >= 0)
        rows_graphs_.launch(key, stream(), enqueue);
    else
        enqueue();

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
        copy_back_rows(rows, n);
    }
    CUDA_CHECK(cudaStreamSynchronize(stream()));
    finish_sampled_rows(rows, n);
}

// After the head GEMV of a pass (logits_ row w = the pass's w-th row that wants logits): the rows that
// sample on the device pick their tokens there (sample.cu over each run of such rows; only their results
// come back), the rows that want their best tokens get them there (best_tokens.cu, likewise), the others'
// logits are copied back.
void CudaBackend::copy_back_rows(const DecodeRow* rows, int32_t n) {
    const int32_t n_vocab = config_.n_vocab;
    SampleInputs* inputs_host = rows_sample_inputs_host();
    SampleResult* results_host = rows_sample_results_host();
    const auto sampled_run = [&](int32_t w0, int32_t count) {
        launch_sample(logits_ + int64_t(w0) * n_vocab, n_vocab, sample_in_ + w0, sample_out_ + w0, nullptr, stream(),
                      count);
        CUDA_CHECK(cudaMemcpyAsync(results_host + w0, sample_out_ + w0, size_t(count) * sizeof(SampleResult),
                                   cudaMemcpyDeviceToHost, stream()));
        rows_d2h_bytes_ += size_t(count) * sizeof(SampleResult);
    };
    // Runs of consecutive rows of one kind (sampled, best tokens), each kind's launch over its run.
    enum Kind { kLogits, kSampled, kBest };
    const auto kind = [](const DecodeRow& row) { return row.sample ? kSampled : row.best ? kBest : kLogits; };
    int32_t w = 0, run_start = -1;
    Kind run_kind = kLogits;
    const auto end_run = [&] {
        if (run_start >= 0 && run_kind == kSampled) sampled_run(run_start, w - run_start);
        if (run_start >= 0 && run_kind == kBest) copy_best_rows(rows, run_start, w - run_start);
        run_start = -1;
    };
    for (int32_t r = 0; r < n; r++) {
        if (!rows[r].logits) continue;
        const Kind k = kind(rows[r]);
        if (run_start >= 0 && k != run_kind) end_run();
        if (k == kSampled) {
            const size_t bytes =
                fill_sample_inputs(inputs_host + w, *rows[r].sample, upload_allowed(w, *rows[r].sample));
            CUDA_CHECK(cudaMemcpyAsync(sample_in_ + w, inputs_host + w, bytes, cudaMemcpyHostToDevice, stream()));
        } else if (k == kLogits) {
            CUDA_CHECK(cudaMemcpyAsync(rows[r].logits, logits_ + int64_t(w) * n_vocab, size_t(n_vocab) * sizeof(float),
                                       cudaMemcpyDeviceToHost, stream()));
            rows_d2h_bytes_ += size_t(n_vocab) * sizeof(float);
        }
        if (k != kLogits && run_start < 0) run_start = w, run_kind = k;
        w++;
    }
    end_run();
    rows_passes_++;
}

// Best-token rows [w0, w0 + count) of the pass's wanted rows: one launch, each row's picks copied into the
// pinned buffer at row w * kMaxDeviceBest, where finish_sampled_rows hands them out.
void CudaBackend::copy_best_rows(const DecodeRow* rows, int32_t w0, int32_t count) {
    BestTokensBases bases{};
    std::vector<int32_t> n_best(static_cast<size_t>(count));
    for (int32_t r = 0, w = 0; w < w0 + count; r++) {
        if (!rows[r].logits) continue;
        if (w >= w0) bases.base[w - w0] = rows[r].best->best_base, n_best[size_t(w - w0)] = rows[r].best->n_best;
        w++;
    }
    TokenScore* device = best_out_ + int64_t(w0) * kMaxDeviceBest;
    launch_best_tokens(logits_ + int64_t(w0) * config_.n_vocab, config_.n_vocab, count,
                       *std::max_element(n_best.begin(), n_best.end()), bases, device, kMaxDeviceBest, stream());
    TokenScore* host = reinterpret_cast<TokenScore*>(rows_best_host_->data()) + int64_t(w0) * kMaxDeviceBest;
    for (int32_t i = 0; i < count; i++) {
        const size_t bytes = size_t(n_best[size_t(i)]) * sizeof(TokenScore);
        CUDA_CHECK(cudaMemcpyAsync(host + int64_t(i) * kMaxDeviceBest, device + int64_t(i) * kMaxDeviceBest, bytes,
                                   cudaMemcpyDeviceToHost, stream()));
        rows_d2h_bytes_ += bytes;
    }
}

// With the pass done: each sampled row's outcome; a row the device handed back (more candidates than it
// sorts) gets its logits, as they came, for the host's sampler.
void CudaBackend::finish_sampled_rows(const DecodeRow* rows, int32_t n) {
    const int32_t n_vocab = config_.n_vocab;
    const SampleResult* results_host = rows_sample_results_host();
    const TokenScore* best_host = reinterpret_cast<const TokenScore*>(rows_best_host_->data());
    bool copied = false;
    int32_t w = 0;
    for (int32_t r = 0; r < n; r++) {
        if (!rows[r].logits) continue;
        if (rows[r].best) {
            const SequenceInput& in = *rows[r].best;
            const TokenScore* got = best_host + int64_t(w) * kMaxDeviceBest;
            std::copy(got, got + std::min(in.n_best, n_vocab), in.best);
        }
        if (rows[r].sample) {
            *rows[r].outcome = sample_outcome(results_host[w]);
            if (rows[r].outcome->status == SampleOutcome::kNeedsHost) {
                CUDA_CHECK(cudaMemcpyAsync(rows[r].logits, logits_ + int64_t(w) * n_vocab,
                                           size_t(n_vocab) * sizeof(float), cudaMemcpyDeviceToHost, stream()));
                copied = true;
            }
        }
        w++;
    }
    if (copied) CUDA_CHECK(cudaStreamSynchronize(stream()));
}

// The graph key of a pass shape, or -1 the first time it is seen; at most kMaxRowShapes shapes are
// remembered (then all are forgotten, with their graphs).
int64_t CudaBackend::rows_graph_key(const std::vector<int32_t>& shape) {
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
void CudaBackend::enqueue_rows(int32_t n, const Run* runs, size_t n_runs) {
    const ModelConfig& c = config_;
    const int32_t dim = c.n_embd, q_dim = c.n_heads * c.head_dim;
    const int32_t *tokens = ints_, *positions = ints_ + positions_at(), *row_tables = ints_ + rows_at();
    const int32_t* tables = ints_ + table_at();
    cudaStream_t s = stream();
    const auto f32 = [](const TensorView& v) { return static_cast<const float*>(v.data); };
    launch_embed(x_, tokens, weights_.token_embd.data, weights_.token_embd.dtype, n, dim, s);
    for (int32_t layer = 0; layer < c.n_layers; layer++) {
        const LayerWeights& lw = weights_.layers[size_t(layer)];
        const std::array<GemvOutput, 3> qkv = qkv_outputs(lw);
        launch_gemv_tokens(qkv.data(), 3, x_, n, dim, f32(lw.attn_norm), c.norm_eps, false, s);
        launch_rope_kv_write(q_, k_, v_, kv_, layout_, layer, tables, positions, inv_freq_, n, c.n_heads, s,
                             row_tables);
        for (size_t i = 0; i < n_runs; i++) {
            const int64_t at = int64_t(runs[i].first) * q_dim;
            launch_paged_attention_splits(att_ + at, q_ + at, kv_, layout_, layer, tables, positions + runs[i].first,
                                          runs[i].n, c.n_heads, runs[i].n_splits, prop_.multiProcessorCount, attention_,
                                          s, row_tables + runs[i].first);
        }
        const GemvOutput attn_out = gemv_output(x_, lw.attn_output, nullptr, dim);
        launch_gemv_tokens(&attn_out, 1, att_, n, q_dim, nullptr, 0.0f, true, s);  // x += W_o att
        launch_gemv_swiglu_tokens(gate_, x_, n, lw.ffn_gate.data, lw.ffn_up.data, lw.ffn_gate.dtype, dim, c.n_ff,
                                  f32(lw.ffn_norm), c.norm_eps, s);
        const GemvOutput ffn_out = gemv_output(x_, lw.ffn_down, nullptr, dim);
        launch_gemv_tokens(&ffn_out, 1, gate_, n, c.n_ff, nullptr, 0.0f, true, s);  // x += W_down swiglu
    }
}

}  // namespace kvlm::cuda_detail
