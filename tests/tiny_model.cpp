// Tiny random-weight models for tests (see tiny_model.h).
#include "tiny_model.h"

#include <random>

namespace kvlm::test {

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
    TinyModel m;
    m.metadata.config = tiny_config(tied, qkv_bias);
    m.metadata.tokenizer = tiny_tokenizer();
    m.metadata.chat_template = "{% for m in messages %}{{ m.content }}\n{% endfor %}";
    m.metadata.source = "unit test";
    m.tensors = expected_tensors(m.metadata.config, dtype);
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (const TensorInfo& t : m.tensors) {
        std::vector<float> values(t.n_bytes / dtype_size(t.dtype));
        for (float& v : values) v = normal(rng);
        std::vector<uint8_t> bytes(t.n_bytes);
        convert_from_f32(t.dtype, values.data(), bytes.data(), values.size());
        m.data.push_back(std::move(bytes));
    }
    return m;
}

std::string write_tiny(const std::string& path, const TinyModel& m) {
    ModelWriter writer(path, m.metadata, m.tensors);
    for (size_t i = 0; i < m.tensors.size(); i++) writer.write_tensor(i, m.data[i].data());
    writer.finish();
    return writer.fingerprint();
}

}  // namespace kvlm::test
