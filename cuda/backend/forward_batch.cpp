// CudaBackend::forward: prefill batches through cuBLAS GEMMs (short ones go to decode_rows.cpp, single tokens
// to decode_step.cpp).
#include "backend/cuda_backend_impl.h"

namespace kvlm::cuda_detail {

void CudaBackend::forward(const int32_t* tokens, int32_t n_tokens, int32_t pos, const BlockTable& table, float* logits,
                          bool all_logits) {
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
    for_each_batch(tokens, n_tokens, pos, table, [&](int32_t start, int32_t n) {
        float* out = nullptr;
        if (all_logits)
            out = logits + int64_t(start) * config_.n_vocab;
        else if (start + n == n_tokens)
            out = logits;
        forward_batch(n, pos + start, out, all_logits);
    });
}

// Perplexity's chunk: the prefill batches without logits, then each batch's scored rows through the head
// and token_nll.cu; only the scores come back.
void CudaBackend::forward_nll(const int32_t* tokens, int32_t n_tokens, int32_t pos, const BlockTable& table,
                              int32_t first, double* nll) {
    check_forward(tokens, n_tokens, pos, table);
    if (first < 0 || first >= n_tokens)
        throw_error("cuda backend: forward_nll: first row {} outside 0..{}", first, n_tokens - 1);
    for_each_batch(tokens, n_tokens, pos, table, [&](int32_t start, int32_t n) {
        forward_batch(n, pos + start, nullptr, false);
        // Rows of this batch that predict a token of the chunk: [max(first, start), min(start + n, n_tokens - 1)).
        const int32_t row0 = std::max(first, start), row1 = std::min(start + n, n_tokens - 1);
        if (row1 > row0) score_rows(row0 - start, row1 - row0, tokens + row0 + 1, nll + (row0 - first));
    });
}

// A long forward in batches of max_batch_ tokens: each batch's tokens, positions and the table's blocks in
// use uploaded into ints_, then run(start, n); returns with the stream done.
void CudaBackend::for_each_batch(const int32_t* tokens, int32_t n_tokens, int32_t pos, const BlockTable& table,
                                 const std::function<void(int32_t start, int32_t n)>& run) {
    const int64_t n_blocks_used = (int64_t(pos) + n_tokens + layout_.block_size - 1) / layout_.block_size;
    ensure_table_capacity(n_blocks_used);
    for (int32_t start = 0; start < n_tokens; start += max_batch_) {
        const int32_t n = std::min(max_batch_, n_tokens - start);
        // The pinned staging may still feed the previous batch's upload: wait before rewriting it.
        CUDA_CHECK(cudaStreamSynchronize(stream()));
        int32_t* host = reinterpret_cast<int32_t*>(ints_host_->data());
        std::memcpy(host, tokens + start, size_t(n) * sizeof(int32_t));
        for (int32_t t = 0; t < n; t++) host[positions_at() + t] = pos + start + t;
        std::memcpy(host + table_at(), table.blocks.data(), size_t(n_blocks_used) * sizeof(int32_t));
        // One upload: tokens, positions, then the block table (only the parts in use).
        CUDA_CHECK(cudaMemcpyAsync(ints_, host, size_t(table_at() + n_blocks_used) * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, stream()));
        run(start, n);
    }
    CUDA_CHECK(cudaStreamSynchronize(stream()));
}

// Rows [first_row, first_row + n_rows) of the batch just run (x_): the final norm, the head in chunks of the
// logits buffer (the same GEMM as all-logits forwards), each row's negative log-likelihood of targets[r]
// into nll[r] (host).
void CudaBackend::score_rows(int32_t first_row, int32_t n_rows, const int32_t* targets, double* nll) {
    const ModelConfig& c = config_;
    cudaStream_t s = stream();
    launch_rmsnorm(h_, x_ + int64_t(first_row) * c.n_embd, static_cast<const float*>(weights_.output_norm.data), n_rows,
                   c.n_embd, c.norm_eps, s);
    for (int32_t row = 0; row < n_rows; row += kLogitsRows) {
        const int32_t chunk = std::min(kLogitsRows, n_rows - row);
        matmul(logits_, h_ + int64_t(row) * c.n_embd, weights_.output, chunk);
        CUDA_CHECK(
            cudaMemcpyAsync(nll_targets_, targets + row, size_t(chunk) * sizeof(int32_t), cudaMemcpyHostToDevice, s));
        launch_token_nll(logits_, chunk, c.n_vocab, nll_targets_, nll_, s);
        CUDA_CHECK(cudaMemcpyAsync(nll + row, nll_, size_t(chunk) * sizeof(double), cudaMemcpyDeviceToHost, s));
        CUDA_CHECK(cudaStreamSynchronize(s));  // the next chunk reuses logits_, the targets and the scores
    }
}

void CudaBackend::matmul(float* out, const float* in, const TensorView& w, int32_t n) {
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
const void* CudaBackend::gemm_input(const float* x, const float* norm, int32_t n, int32_t width, DType weight_dtype) {
    const DType dtype = gemm_input_dtype(weight_dtype);
    if (dtype == DType::f32) {
        if (!norm) return x;
        launch_rmsnorm(h_, x, norm, n, width, config_.norm_eps, stream());
        return h_;
    }
    if (norm)
        launch_rmsnorm_to(converted_, x, norm, n, width, config_.norm_eps, dtype, stream());
    else
        launch_convert_from_f32(converted_, x, dtype, int64_t(n) * width, stream());
    return converted_;
}

// out = W in, or out += W in when accumulate (in from gemm_input, in gemm_input_dtype(w.dtype)).
void CudaBackend::gemm(float* out, const void* in, const TensorView& w, int32_t n, bool accumulate) {
    if (dtype_is_quantized(w.dtype)) {
        launch_matmul_quantized(cublas_->handle, out, in, w.data, w.dtype, n, w.shape[1], w.shape[0], accumulate,
                                dequant_, std::max<int64_t>(1, dequant_elements_ / w.shape[1]), stream());
        return;
    }
    launch_matmul_prepared(cublas_->handle, out, in, w.data, w.dtype, n, w.shape[1], w.shape[0], accumulate, stream());
}

// Runs n <= max_batch_ tokens whose ids, positions and block table were uploaded into ints_.
void CudaBackend::forward_batch(int32_t n, int32_t pos, float* logits, bool all_logits) {
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

}  // namespace kvlm::cuda_detail
