// Synthetic models: random weights at a real shape, for benchmarks and scale tests. Values are counter-based
// (element e of tensor i depends only on seed, i and e), so any row range can be produced in any order and the
// output is identical for a given seed. Matrices ~ N(0, 0.02) (output projections scaled down by
// 1/sqrt(2 n_layers), GPT-2 style, so the residual stream stays bounded); norms = 1; biases = 0.
#include <cmath>
#include <filesystem>

#include "import/convert.h"
#include "import/tokenizer/tokenizer_import.h"
#include "util/error.h"

namespace kvlm {

namespace {

uint64_t splitmix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Sum of four 16-bit uniforms (Irwin-Hall, n = 4), standardized: mean 0, variance 1, range about +-3.5.
inline float normalish(uint64_t bits) {
    uint32_t s = uint32_t(bits & 0xffff) + uint32_t((bits >> 16) & 0xffff) + uint32_t((bits >> 32) & 0xffff) +
                 uint32_t(bits >> 48);
    constexpr float kScale = 1.7320508f / 65536.0f;  // sqrt(3) / 2^16: var(U[0,1)) = 1/12, four of them = 1/3
    return (float(s) - 2.0f * 65536.0f) * kScale;
}

bool ends_with(const std::string& s, const char* suffix) {
    size_t n = std::char_traits<char>::length(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

ModelConfig builtin_shape(const std::string& name) {
    ModelConfig c;
    c.architecture = "llama";
    if (name == "smollm2-135m") {  // HuggingFaceTB/SmolLM2-135M(-Instruct) config.json
        c.n_embd = 576, c.n_layers = 30, c.n_heads = 9, c.n_kv_heads = 3, c.head_dim = 64, c.n_ff = 1536;
        c.n_vocab = 49152, c.n_ctx = 8192, c.rope_theta = 100000.0f, c.tied_embeddings = true;
    } else if (name == "llama-3.2-1b") {
        c.n_embd = 2048, c.n_layers = 16, c.n_heads = 32, c.n_kv_heads = 8, c.head_dim = 64, c.n_ff = 8192;
        c.n_vocab = 128256, c.n_ctx = 131072, c.rope_theta = 500000.0f, c.tied_embeddings = true;
        c.rope_scaling.type = "llama3";
        c.rope_scaling.factor = 32.0f;
        c.rope_scaling.low_freq_factor = 1.0f;
        c.rope_scaling.high_freq_factor = 4.0f;
        c.rope_scaling.original_max_position = 8192;
    } else if (name == "llama-3-8b") {
        c.n_embd = 4096, c.n_layers = 32, c.n_heads = 32, c.n_kv_heads = 8, c.head_dim = 128, c.n_ff = 14336;
        c.n_vocab = 128256, c.n_ctx = 8192, c.rope_theta = 500000.0f, c.tied_embeddings = false;
    } else {
        throw_error("--synthetic {}: unknown shape (expected smollm2-135m, llama-3.2-1b, llama-3-8b, or a path to a "
                    "config.json)",
                    name);
    }
    c.norm_eps = 1e-5f;
    return c;
}

}  // namespace

ConvertSource make_synthetic_source(const std::string& shape, const std::string& tokenizer_path, uint64_t seed) {
    namespace fs = std::filesystem;
    ConvertSource src;
    src.kind = "synthetic";
    ModelConfig& c = src.metadata.config;
    if (fs::is_regular_file(shape)) c = hf_config_from_json(shape);
    else if (fs::is_directory(shape) && fs::is_regular_file(fs::path(shape) / "config.json"))
        c = hf_config_from_json((fs::path(shape) / "config.json").string());
    else c = builtin_shape(shape);
    c.validate("--synthetic " + shape);

    if (tokenizer_path.empty())
        throw_error("--synthetic {}: a tokenizer is required (--tokenizer, e.g. a directory with tokenizer.json)",
                    shape);
    src.metadata.tokenizer = load_tokenizer_source(tokenizer_path, c.n_vocab);
    if (fs::is_directory(tokenizer_path)) {
        add_generation_config_stops(tokenizer_path, &src.metadata.tokenizer);
        src.metadata.chat_template = hf_chat_template(tokenizer_path);
    }
    src.metadata.source = fmt::format("synthetic {} seed {}", shape, seed);
    src.default_dtype = DType::f32;
    src.tensors = expected_tensors(c, src.default_dtype);

    const float out_scale = 1.0f / std::sqrt(2.0f * float(c.n_layers));
    src.read_rows = [tensors = src.tensors, seed, out_scale](size_t i, int64_t row, int64_t n_rows, float* out) {
        const TensorInfo& t = tensors[i];
        const int64_t row_len = tensor_row_len(t), n = n_rows * row_len, begin = row * row_len;
        if (ends_with(t.name, "norm.weight") || ends_with(t.name, ".bias")) {
            const float v = ends_with(t.name, ".bias") ? 0.0f : 1.0f;
            for (int64_t e = 0; e < n; e++) out[e] = v;
            return;
        }
        float std_dev = 0.02f;
        if (ends_with(t.name, "attn_output.weight") || ends_with(t.name, "ffn_down.weight")) std_dev *= out_scale;
        const uint64_t key = splitmix64(seed ^ splitmix64(uint64_t(i) + 0x632be59bd9b4e019ull));
        for (int64_t e = 0; e < n; e++)
            out[e] = std_dev * normalish(splitmix64(key + uint64_t(begin + e) * 0x9e3779b97f4a7c15ull));
    };
    return src;
}

}  // namespace kvlm
