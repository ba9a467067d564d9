// Binding model tensors to per-layer views and checking them against the config.
#include "format/model_weights.h"

#include "format/model_file.h"
#include "util/error.h"

namespace kvlm {

namespace {

struct Shapes {
    int64_t embd, q, kv, ff, vocab;
    explicit Shapes(const ModelConfig& c)
        : embd(c.n_embd), q(int64_t(c.n_heads) * c.head_dim), kv(int64_t(c.n_kv_heads) * c.head_dim), ff(c.n_ff),
          vocab(c.n_vocab) {}
};

// Calls fn(name, view, expected_shape, is_vector) for every tensor the config requires.
template <typename Weights, typename Fn>
void for_each_tensor(const ModelConfig& config, Weights& w, Fn fn) {
    Shapes s(config);
    fn(std::string(tensor_names::token_embd), w.token_embd, std::vector<int64_t>{s.vocab, s.embd}, false);
    for (int32_t i = 0; i < config.n_layers; i++) {
        auto& l = w.layers[size_t(i)];
        auto name = [&](const char* suffix) { return tensor_names::layer(i, suffix); };
        fn(name("attn_norm.weight"), l.attn_norm, std::vector<int64_t>{s.embd}, true);
        fn(name("attn_q.weight"), l.attn_q, std::vector<int64_t>{s.q, s.embd}, false);
        fn(name("attn_k.weight"), l.attn_k, std::vector<int64_t>{s.kv, s.embd}, false);
        fn(name("attn_v.weight"), l.attn_v, std::vector<int64_t>{s.kv, s.embd}, false);
        if (config.qkv_bias) {
            fn(name("attn_q.bias"), l.attn_q_bias, std::vector<int64_t>{s.q}, true);
            fn(name("attn_k.bias"), l.attn_k_bias, std::vector<int64_t>{s.kv}, true);
            fn(name("attn_v.bias"), l.attn_v_bias, std::vector<int64_t>{s.kv}, true);
        }
        fn(name("attn_output.weight"), l.attn_output, std::vector<int64_t>{s.embd, s.q}, false);
        fn(name("ffn_norm.weight"), l.ffn_norm, std::vector<int64_t>{s.embd}, true);
        fn(name("ffn_gate.weight"), l.ffn_gate, std::vector<int64_t>{s.ff, s.embd}, false);
        fn(name("ffn_up.weight"), l.ffn_up, std::vector<int64_t>{s.ff, s.embd}, false);
        fn(name("ffn_down.weight"), l.ffn_down, std::vector<int64_t>{s.embd, s.ff}, false);
    }
    fn(std::string(tensor_names::output_norm), w.output_norm, std::vector<int64_t>{s.embd}, true);
    if (!config.tied_embeddings)
        fn(std::string(tensor_names::output), w.output, std::vector<int64_t>{s.vocab, s.embd}, false);
}

}  // namespace

ModelWeights bind_model_weights(const ModelFile& model) {
    const ModelConfig& config = model.config();
    ModelWeights weights;
    weights.layers.resize(size_t(config.n_layers));
    for_each_tensor(config, weights, [&](const std::string& name, TensorView& view, const std::vector<int64_t>& shape,
                                         bool) { view = model.require(name, shape); });
    if (config.tied_embeddings) weights.output = weights.token_embd;
    check_model_weights(config, weights, model.path());
    return weights;
}

void check_model_weights(const ModelConfig& config, const ModelWeights& weights, const std::string& source) {
    if (weights.layers.size() != size_t(config.n_layers))
        throw_error("{}: weights have {} layers, expected {}", source, weights.layers.size(), config.n_layers);
    auto check = [&](const std::string& name, const TensorView& view, const std::vector<int64_t>& shape,
                     bool is_vector) {
        if (!view.data) throw_error("{}: tensor {} is missing", source, name);
        if (view.shape != shape)
            throw_error("{}: tensor {} has shape {}, expected {}", source, name, shape_string(view.shape),
                        shape_string(shape));
        if (is_vector && view.dtype != DType::f32)
            throw_error("{}: tensor {} has dtype {}, expected f32 (1-D tensors are always f32)", source, name,
                        dtype_name(view.dtype));
        if (!dtype_is_known(uint32_t(view.dtype)))
            throw_error("{}: tensor {} has an unsupported dtype ({})", source, name, uint32_t(view.dtype));
    };
    for_each_tensor(config, weights, check);
    if (config.tied_embeddings) {
        Shapes s(config);
        check(tensor_names::token_embd, weights.output, {s.vocab, s.embd}, false);
    }
}

}  // namespace kvlm
