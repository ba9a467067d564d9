// Random in-memory models for backend tests.
#include "random_model.h"

#include <cmath>
#include <map>
#include <random>
#include <stdexcept>

#include "model_file.h"

namespace kvlm::test {

ModelConfig small_random_config() {
    ModelConfig c;
    c.n_vocab = 100;
    c.n_embd = 64;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 16;
    c.n_ff = 96;
    c.n_ctx = 1024;
    return c;
}

std::vector<float> random_floats(size_t n, float lo, float hi, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<float> v(n);
    for (auto& x : v) x = lo + (hi - lo) * float(double(rng() >> 11) * (1.0 / 9007199254740992.0));
    return v;
}

std::unique_ptr<RandomModel> make_random_model(const ModelConfig& config, DType dtype, uint64_t seed) {
    auto model = std::make_unique<RandomModel>();
    model->config = config;
    uint64_t next_seed = seed * 1000003u + 17;
    auto make = [&](std::vector<int64_t> shape, float lo, float hi) {
        TensorView view;
        view.shape = shape;
        view.dtype = shape.size() == 1 ? DType::f32 : dtype;
        std::vector<float> values = random_floats(size_t(view.n_elements()), lo, hi, next_seed++);
        model->storage.emplace_back(view.n_bytes());
        convert_from_f32(view.dtype, values.data(), model->storage.back().data(), values.size());
        view.data = model->storage.back().data();
        return view;
    };
    auto matrix = [&](int64_t rows, int64_t cols) {
        float a = 1.0f / std::sqrt(float(cols));
        return make({rows, cols}, -a, a);
    };
    int64_t d = config.n_embd, q = int64_t(config.n_heads) * config.head_dim,
            kv = int64_t(config.n_kv_heads) * config.head_dim;
    ModelWeights& w = model->weights;
    w.token_embd = make({config.n_vocab, d}, -1.0f, 1.0f);
    w.layers.resize(size_t(config.n_layers));
    for (auto& l : w.layers) {
        l.attn_norm = make({d}, 0.8f, 1.2f);
        l.attn_q = matrix(q, d);
        l.attn_k = matrix(kv, d);
        l.attn_v = matrix(kv, d);
        if (config.qkv_bias) {
            l.attn_q_bias = make({q}, -0.5f, 0.5f);
            l.attn_k_bias = make({kv}, -0.5f, 0.5f);
            l.attn_v_bias = make({kv}, -0.5f, 0.5f);
        }
        l.attn_output = matrix(d, q);
        l.ffn_norm = make({d}, 0.8f, 1.2f);
        l.ffn_gate = matrix(config.n_ff, d);
        l.ffn_up = matrix(config.n_ff, d);
        l.ffn_down = matrix(d, config.n_ff);
    }
    w.output_norm = make({d}, 0.8f, 1.2f);
    w.output = config.tied_embeddings ? w.token_embd : matrix(config.n_vocab, d);
    return model;
}

void write_random_model(const RandomModel& model, DType dtype, const std::string& path) {
    const ModelConfig& c = model.config;
    const ModelWeights& w = model.weights;
    std::map<std::string, const TensorView*> by_name;
    by_name[tensor_names::token_embd] = &w.token_embd;
    by_name[tensor_names::output_norm] = &w.output_norm;
    if (!c.tied_embeddings) by_name[tensor_names::output] = &w.output;
    for (int32_t i = 0; i < c.n_layers; i++) {
        const LayerWeights& l = w.layers[size_t(i)];
        const std::pair<const char*, const TensorView*> layer_tensors[] = {
            {"attn_norm.weight", &l.attn_norm}, {"attn_q.weight", &l.attn_q},   {"attn_k.weight", &l.attn_k},
            {"attn_v.weight", &l.attn_v},       {"attn_q.bias", &l.attn_q_bias}, {"attn_k.bias", &l.attn_k_bias},
            {"attn_v.bias", &l.attn_v_bias},    {"attn_output.weight", &l.attn_output},
            {"ffn_norm.weight", &l.ffn_norm},   {"ffn_gate.weight", &l.ffn_gate}, {"ffn_up.weight", &l.ffn_up},
            {"ffn_down.weight", &l.ffn_down}};
        for (const auto& [suffix, view] : layer_tensors) by_name[tensor_names::layer(i, suffix)] = view;
    }
    ModelMetadata metadata;
    metadata.config = c;
    metadata.source = "random test model";
    TokenizerData& t = metadata.tokenizer;
    t.type = "bpe";
    t.pre = "gpt2";
    for (int32_t i = 0; i < c.n_vocab; i++) {
        t.tokens.push_back(i == 0 ? "a" : i == 1 ? "b" : i == 2 ? "ab" : "<" + std::to_string(i) + ">");
        t.token_types.push_back(int32_t(TokenType::normal));
    }
    if (c.n_vocab >= 3) t.merges.push_back("a b");
    std::vector<TensorInfo> infos = expected_tensors(c, dtype);
    ModelWriter writer(path, metadata, infos);
    for (size_t i = 0; i < infos.size(); i++) {
        auto it = by_name.find(infos[i].name);
        if (it == by_name.end() || !it->second->data || it->second->n_bytes() != infos[i].n_bytes)
            throw std::runtime_error("write_random_model: no matching tensor for " + infos[i].name);
        writer.write_tensor(i, it->second->data);
    }
    writer.finish();
}

}  // namespace kvlm::test
