// KVLM_CUDA_PERSISTENT: the decode step's embedding, layers and head as one persistent kernel
// (decode_persistent.cu) instead of a launch per stage; the sampling stays its own launch. Off by default until a GPU
// session's sweep measures it (tools/gpu_session.sh tune).
#include "backend/cuda_backend_impl.h"

namespace kvlm::cuda_detail {

namespace {
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
}  // namespace

// Checks the model against the kernel's scope and uploads its per-layer pointers; returns the device line's
// part ("" when off). Throws, naming why, when the option is set for a model or setting it cannot run.
std::string CudaBackend::setup_persistent_decode(const CudaSettings& settings) {
    const int32_t per_sm = settings.persistent_blocks_per_sm;
    if (per_sm == 0) return "";
    const auto refuse = [](const std::string& why) {
        throw_error("cuda backend: the persistent decode kernel (KVLM_CUDA_PERSISTENT) cannot run here: {}", why);
    };
    if (per_sm < 0 || per_sm > 32) refuse(fmt::format("{} blocks per multiprocessor is outside 1..32", per_sm));
    if (!fused_decode_) refuse("gate and up have different dtypes");
    if (profile_) refuse("KVLM_CUDA_PROFILE times the stages' own launches");
    const ModelConfig& c = config_;
    const DType dtype = weights_.layers[0].attn_q.dtype;
    std::vector<PersistentLayerWeights> layers;
    for (const LayerWeights& lw : weights_.layers) {
        for (const TensorView* t :
             {&lw.attn_q, &lw.attn_k, &lw.attn_v, &lw.attn_output, &lw.ffn_gate, &lw.ffn_up, &lw.ffn_down}) {
            if (t->dtype != dtype) refuse("the layers' weights do not share one dtype");
            if (!aligned16(t->data)) refuse("a weight matrix is not 16-byte aligned");
        }
        const std::array<GemvOutput, 3> qkv = qkv_outputs(lw);
        if (!gemv_rope_kv_supported(qkv.data(), layout_))
            refuse("Q/K/V cannot take RoPE and the pool write in the GEMV");
        const auto f32 = [](const TensorView& v) { return static_cast<const float*>(v.data); };
        layers.push_back({lw.attn_q.data, lw.attn_k.data, lw.attn_v.data, qkv[0].bias, qkv[1].bias, qkv[2].bias,
                          lw.attn_output.data, lw.ffn_gate.data, lw.ffn_up.data, lw.ffn_down.data, f32(lw.attn_norm),
                          f32(lw.ffn_norm)});
    }
    const GemvLaunchRules& rules = settings.gemv;
    const bool default_rules =
        rules.rows_per_warp == 0 && rules.threads == 0 && rules.split_warps_per_sm == 0 && rules.stage_x == 1;
    const std::string why =
        persistent_decode_unsupported(dtype, weights_.token_embd.dtype, weights_.output.dtype, layout_, c.n_embd,
                                      c.n_heads * c.head_dim, c.n_ff, default_rules, prop_.sharedMemPerBlockOptin);
    if (!why.empty()) refuse(why);
    if (!aligned16(weights_.token_embd.data) || !aligned16(weights_.output.data))
        refuse("the embedding table or the output head is not 16-byte aligned");

    auto* device_layers = arena_.alloc<PersistentLayerWeights>(layers.size(), "the persistent kernel's layer table");
    CUDA_CHECK(cudaMemcpy(device_layers, layers.data(), layers.size() * sizeof(PersistentLayerWeights),
                          cudaMemcpyHostToDevice));
    auto* barrier = arena_.alloc<uint64_t>(1, "the persistent kernel's grid barrier");
    CUDA_CHECK(cudaMemset(barrier, 0, sizeof(uint64_t)));
    PersistentDecodeArgs& a = persistent_;
    a.layers = device_layers, a.n_layers = c.n_layers, a.token_embd = weights_.token_embd.data;
    a.output_norm = static_cast<const float*>(weights_.output_norm.data), a.output = weights_.output.data;
    a.logits = logits_, a.n_vocab = c.n_vocab;
    a.x = x_, a.q = q_, a.att = att_, a.ffn = gate_, a.partials = attention_.partials;
    a.dim = c.n_embd, a.n_heads = c.n_heads, a.n_ff = c.n_ff, a.norm_eps = c.norm_eps;
    a.kv = kv_, a.layout = layout_, a.inv_freq = inv_freq_, a.barrier = barrier;
    persistent_dtype_ = dtype;
    persistent_blocks_ = persistent_decode_blocks(a, dtype, prop_.multiProcessorCount, per_sm);
    return fmt::format(", decode steps in one persistent kernel ({} blocks)", persistent_blocks_);
}

// The decode step up to its logits: one cooperative launch reading the token, position and table from
// ints_ as the per-stage kernels do.
void CudaBackend::enqueue_persistent_decode(int32_t n_splits) {
    PersistentDecodeArgs a = persistent_;
    a.tokens = ints_ + decode_at(), a.positions = a.tokens + 1, a.block_table = ints_ + table_at();
    a.n_splits = n_splits;
    if (n_splits > 1 && int64_t(config_.n_heads) * n_splits > attention_.max_rows)
        throw_error("cuda backend: attention scratch holds fewer than {} split rows",
                    int64_t(config_.n_heads) * n_splits);
    launch_decode_persistent(a, persistent_dtype_, persistent_blocks_, prop_.multiProcessorCount, attention_.one_head,
                             stream());
}

}  // namespace kvlm::cuda_detail
