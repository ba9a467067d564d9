// CudaBackend's one-token decode step: fused kernels replayed as CUDA graphs, sampling on the device, and
// steps queued one ahead of the host.
#include "backend/cuda_backend_impl.h"

namespace kvlm::cuda_detail {

// One token (the decode step): fused single-token kernels (gemv.cu, rope_kv_write.cu) and attention
// whose split count is fixed per launch and whose per-query split length is derived on the device, so
// the whole step - everything but the input upload and the logits download - replays as one CUDA graph
// per split count. The graph's kernels read the token, its position and the block table from ints_.
void CudaBackend::decode_step(int32_t token, int32_t pos, const BlockTable& table, float* logits) {
    DecodeSlots::Slot& slot = claim_decode_slot(pos);
    run_decode(upload_decode_inputs(token, pos, table, slot.inputs), pos, false);
    copy_logits_back(logits);
    CUDA_CHECK(cudaStreamSynchronize(stream()));
    decode_slots_.release_oldest();
}

bool CudaBackend::samples_on_device(const SampleRequest& r) const {
    if (!fused_decode_ || r.n_penalty > kSampleMaxPenalty) return false;
    const int32_t n_vocab = config_.n_vocab;
    if (r.temperature <= 0.0f || n_vocab == 1) return true;                        // greedy
    if (r.top_k > 0 && r.top_k < n_vocab) return r.top_k <= kSampleMaxCandidates;  // top-k
    return r.min_p > 0.0f && r.min_p <= 1.0f;  // top-k off: the min-p floor bounds the candidates
}

// Steps whose token is always picked on the device (never handed back for the host to sort), with room
// in the penalty list for the input token the device adds.
bool CudaBackend::chains_decode_steps(const SampleRequest& r) const {
    if (!steps_ahead_ || !samples_on_device(r) || r.n_penalty >= kSampleMaxPenalty || r.n_allowed > 0) return false;
    const int32_t n_vocab = config_.n_vocab;
    return r.temperature <= 0.0f || n_vocab == 1 || (r.top_k > 0 && r.top_k < n_vocab);
}

// The decode step with sample.cu as its last launch (inside the graph): the token id, status and digest
// come back through pinned memory; the logits only when the device could not sample.
SampleOutcome CudaBackend::decode_sample(int32_t token, int32_t pos, const BlockTable& table,
                                         const SampleRequest& request, float* logits) {
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

void CudaBackend::enqueue_decode_step(int32_t token, int32_t pos, const BlockTable& table,
                                      const SampleRequest& request) {
    KVLM_ASSERT(chains_decode_steps(request), "enqueue_decode_step with settings the device cannot chain");
    enqueue_sampled_step(token, pos, table, request);
}

SampleOutcome CudaBackend::wait_decode_step() {
    DecodeSlots::Slot& slot = decode_slots_.oldest();
    CUDA_CHECK(cudaEventSynchronize(slot.done));
    const SampleOutcome out = sample_outcome(*slot.sample_out);
    decode_slots_.release_oldest();
    return out;
}

// Queues a sampled decode step: its inputs, the step, its result's copy back and an event. token
// kTokenFromDevice: the input is what the step before it (still in flight) picks, which sample.cu
// leaves where the step reads its token, so that field is not uploaded.
void CudaBackend::enqueue_sampled_step(int32_t token, int32_t pos, const BlockTable& table,
                                       const SampleRequest& request) {
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
    DecodeSlots::Slot& slot = claim_decode_slot(pos);
    KVLM_ASSERT(request.n_allowed <= 0 || decode_slots_.in_flight() == 1, "an allowed set in a step queued ahead");
    const size_t input_bytes = fill_sample_inputs(slot.sample_in, request, upload_allowed(0, request));
    const int32_t n_splits = upload_decode_inputs(token, pos, table, slot.inputs);
    CUDA_CHECK(cudaMemcpyAsync(sample_in_, slot.sample_in, input_bytes, cudaMemcpyHostToDevice, stream()));
    run_decode(n_splits, pos, true);
    CUDA_CHECK(cudaMemcpyAsync(slot.sample_out, sample_out_, sizeof(SampleResult), cudaMemcpyDeviceToHost, stream()));
    CUDA_CHECK(cudaEventRecord(slot.done, stream()));
    decode_d2h_bytes_ += sizeof(SampleResult);
    if (from_device) decode_steps_ahead_++;
}

const uint32_t* CudaBackend::upload_allowed(int32_t w, const SampleRequest& request) {
    if (request.n_allowed <= 0) return nullptr;
    const size_t words = allowed_words(config_.n_vocab);
    uint32_t* host = reinterpret_cast<uint32_t*>(allowed_host_->data()) + size_t(w) * words;
    fill_allowed_bits(host, config_.n_vocab, request);
    uint32_t* device = allowed_bits_ + size_t(w) * words;
    CUDA_CHECK(cudaMemcpyAsync(device, host, words * sizeof(uint32_t), cudaMemcpyHostToDevice, stream()));
    return device;
}

std::array<GemvOutput, 3> CudaBackend::qkv_outputs(const LayerWeights& lw) const {
    const bool bias = config_.qkv_bias;
    const int32_t q_dim = config_.n_heads * config_.head_dim, kv_dim = int32_t(layout_.row_elements());
    return {gemv_output(q_, lw.attn_q, bias ? &lw.attn_q_bias : nullptr, q_dim),
            gemv_output(k_, lw.attn_k, bias ? &lw.attn_k_bias : nullptr, kv_dim),
            gemv_output(v_, lw.attn_v, bias ? &lw.attn_v_bias : nullptr, kv_dim)};
}

// A slot for a decode step at `pos`, its staging as long as the table may get (ints_ grown first: a staging
// sized before the table grew would be too short).
DecodeSlots::Slot& CudaBackend::claim_decode_slot(int32_t pos) {
    ensure_table_capacity(int64_t(pos) / layout_.block_size + 1);  // clears the graphs when ints_ moves
    return decode_slots_.claim(table_capacity_);
}

// Stages the token (unless it is kTokenFromDevice), its position and the table's blocks in use for the
// decode graph (one small upload from `staging`, pinned, [2 + blocks]); returns the attention split
// count, which picks the graph.
int32_t CudaBackend::upload_decode_inputs(int32_t token, int32_t pos, const BlockTable& table, int32_t* staging) {
    const int64_t n_blocks_used = int64_t(pos) / layout_.block_size + 1;  // within table_capacity_ (claim_decode_slot)
    staging[0] = token;
    staging[1] = pos;
    std::memcpy(staging + 2, table.blocks.data(), size_t(n_blocks_used) * sizeof(int32_t));
    const int32_t skip = token == kTokenFromDevice ? 1 : 0;
    CUDA_CHECK(cudaMemcpyAsync(ints_ + decode_at() + skip, staging + skip,
                               size_t(2 - skip + n_blocks_used) * sizeof(int32_t), cudaMemcpyHostToDevice, stream()));
    decode_steps_++;
    return paged_attention_split_count(1, config_.n_heads, layout_.n_kv_heads, pos + 1, prop_.multiProcessorCount,
                                       attention_);
}

// The decode step's launches (plus the sampling kernel): replayed as the graph of (split count,
// sampling), captured on first use; launched one by one with graphs off or under the profile.
void CudaBackend::run_decode(int32_t n_splits, int32_t pos, bool sample) {
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

void CudaBackend::copy_logits_back(float* logits) {
    CUDA_CHECK(
        cudaMemcpyAsync(logits, logits_, size_t(config_.n_vocab) * sizeof(float), cudaMemcpyDeviceToHost, stream()));
    decode_d2h_bytes_ += uint64_t(config_.n_vocab) * sizeof(float);
}

// The decode step's launches (captured into a graph or run directly): 5 per layer (6 with a q8_0 pool or
// mixed Q/K/V dtypes, where RoPE and the pool write take their own launch), one more when attention splits.
void CudaBackend::enqueue_decode(int32_t n_splits) {
    const ModelConfig& c = config_;
    const int32_t dim = c.n_embd, q_dim = c.n_heads * c.head_dim, kv_dim = int32_t(layout_.row_elements());
    const int32_t *tokens = ints_ + decode_at(), *positions = tokens + 1, *block_table = ints_ + table_at();
    cudaStream_t s = stream();
    const auto f32 = [](const TensorView& v) { return static_cast<const float*>(v.data); };
    if (persistent_blocks_ > 0) {
        enqueue_persistent_decode(n_splits);
        return;
    }
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
        const std::array<GemvOutput, 3> qkv = qkv_outputs(lw);
        const double qkv_bytes = double(lw.attn_q.n_bytes() + lw.attn_k.n_bytes() + lw.attn_v.n_bytes());
        if (gemv_rope_kv_supported(qkv.data(), layout_)) {
            launch_gemv_rope_kv(qkv.data(), x_, dim, f32(lw.attn_norm), c.norm_eps, kv_, layout_, layer, block_table,
                                positions, inv_freq_, s);
            mark("gemv q/k/v + rope + kv write",
                 qkv_bytes + (dim + q_dim) * f4 + double(layout_.bytes_of(2 * int64_t(kv_dim))));
        } else {
            launch_gemv(qkv.data(), 3, x_, dim, f32(lw.attn_norm), c.norm_eps, false, s);
            mark("gemv q/k/v (rmsnorm inside)", qkv_bytes + (dim + q_dim + 2 * kv_dim) * f4);
            launch_rope_kv_write(q_, k_, v_, kv_, layout_, layer, block_table, positions, inv_freq_, 1, c.n_heads, s);
            mark("rope + kv write", (2 * q_dim + 2 * kv_dim) * f4 + double(layout_.bytes_of(2 * int64_t(kv_dim))));
        }
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

}  // namespace kvlm::cuda_detail
