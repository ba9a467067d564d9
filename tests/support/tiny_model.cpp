// Small .kvlm files for tests (see tiny_model.h).
#include "support/tiny_model.h"

#include <map>
#include <stdexcept>

namespace kvlm::test {

namespace {

// The file contents of an in-memory model: its tensors in file order (expected_tensors), bytes copied.
TinyModel file_contents(const RandomModel& model, DType dtype, ModelMetadata metadata) {
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
    TinyModel m;
    m.metadata = std::move(metadata);
    m.metadata.config = c;
    m.tensors = expected_tensors(c, dtype);
    for (const TensorInfo& info : m.tensors) {
        auto it = by_name.find(info.name);
        if (it == by_name.end() || !it->second->data || it->second->n_bytes() != info.n_bytes)
            throw std::runtime_error("test model: no tensor " + info.name + " of " + std::to_string(info.n_bytes) +
                                     " bytes");
        const uint8_t* bytes = static_cast<const uint8_t*>(it->second->data);
        m.data.emplace_back(bytes, bytes + info.n_bytes);
    }
    return m;
}

}  // namespace

ModelConfig tiny_config(bool tied, bool qkv_bias) {
    ModelConfig c;
    c.architecture = qkv_bias ? "qwen2" : "llama";
    c.n_vocab = 32;
    c.n_embd = 16;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 4;
    c.n_ff = 24;
    c.n_ctx = 128;
    c.rope_theta = 500000.0f;
    c.norm_eps = 1e-6f;
    c.tied_embeddings = tied;
    c.qkv_bias = qkv_bias;
    c.rope_scaling.type = "llama3";
    c.rope_scaling.factor = 32.0f;
    c.rope_scaling.original_max_position = 64;
    return c;
}

TokenizerData tiny_tokenizer() {
    TokenizerData t;
    t.type = "spm";
    for (int i = 0; i < 32; i++) {
        t.tokens.push_back(i < 3 ? std::vector<std::string>{"<unk>", "<s>", "</s>"}[i] : "\xe2\x96\x81tok" + std::to_string(i));
        t.scores.push_back(-float(i) * 0.5f);
        t.token_types.push_back(i < 3 ? int32_t(TokenType::control) : int32_t(TokenType::normal));
    }
    t.unk_id = 0;
    t.bos_id = 1;
    t.eos_id = 2;
    t.stop_ids = {2, 31};
    t.add_bos = true;
    t.add_space_prefix = true;
    return t;
}

TinyModel make_tiny(DType dtype, bool tied, bool qkv_bias, uint32_t seed) {
    ModelMetadata metadata;
    metadata.tokenizer = tiny_tokenizer();
    metadata.chat_template = "{% for m in messages %}{{ m.content }}\n{% endfor %}";
    metadata.source = "unit test";
    auto weights = make_random_model(tiny_config(tied, qkv_bias), dtype, seed);
    return file_contents(*weights, dtype, std::move(metadata));
}

std::string write_tiny(const std::string& path, const TinyModel& m) {
    ModelWriter writer(path, m.metadata, m.tensors);
    for (size_t i = 0; i < m.tensors.size(); i++) writer.write_tensor(i, m.data[i].data());
    writer.finish();
    return writer.fingerprint();
}

void write_random_model(const RandomModel& model, DType dtype, const std::string& path) {
    ModelMetadata metadata;
    metadata.source = "random test model";
    TokenizerData& t = metadata.tokenizer;
    t.type = "bpe";
    t.pre = "gpt2";
    for (int32_t i = 0; i < model.config.n_vocab; i++) {
        t.tokens.push_back(i == 0 ? "a" : i == 1 ? "b" : i == 2 ? "ab" : "<" + std::to_string(i) + ">");
        t.token_types.push_back(int32_t(TokenType::normal));
    }
    if (model.config.n_vocab >= 3) t.merges.push_back("a b");
    write_tiny(path, file_contents(model, dtype, std::move(metadata)));
}

}  // namespace kvlm::test
