// GGUF importer (general.architecture = llama): hyperparameters from llama.* keys; tensors with dims reversed
// (GGUF ne0 is the fastest axis) and q/k rows moved from interleaved to rotate_half order, each matrix kept in
// its type (Q8_0/Q4_0/Q4_1 blocks copied as they are) unless --dtype asks for another.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <map>

#include "import/convert.h"
#include "import/gguf.h"
#include "import/rope_layout.h"
#include "import/tokenizer/tokenizer_import.h"
#include "util/error.h"

namespace kvlm {

namespace {

// llama.cpp's general.sampling.* keys (the model's recommended defaults, from its generation_config.json at
// conversion), those kvlm's sampler has. Out-of-range values are refused when the metadata is validated.
SamplingSettings gguf_sampling_defaults(const GgufFile& g) {
    SamplingSettings s;
    auto number = [&](const char* key) -> std::optional<double> {
        if (!g.has(key)) return std::nullopt;
        return g.get_float(key);
    };
    auto whole = [&](const char* key) -> std::optional<int32_t> {
        if (!g.has(key)) return std::nullopt;
        int64_t v = g.get_int(key);
        if (v < INT32_MIN || v > INT32_MAX) throw_error("{}: {} = {} is out of range", g.path(), key, v);
        return int32_t(v);
    };
    if (auto v = number("general.sampling.temp")) s.temperature = float(*v);
    s.top_k = whole("general.sampling.top_k");
    if (auto v = number("general.sampling.top_p")) s.top_p = float(*v);
    if (auto v = number("general.sampling.min_p")) s.min_p = float(*v);
    if (auto v = number("general.sampling.penalty_repeat")) s.repeat_penalty = float(*v);
    s.repeat_last_n = whole("general.sampling.penalty_last_n");
    check_sampling_settings(s, g.path() + ": general.sampling");
    return s;
}

int32_t int_field(const GgufFile& g, const std::string& key, int64_t lo, int64_t hi) {
    int64_t v = g.get_int(key);
    if (v < lo || v > hi) throw_error("{}: {} = {} is out of range (expected {}..{})", g.path(), key, v, lo, hi);
    return int32_t(v);
}

// Llama 3.1/3.2 GGUFs carry their llama3 RoPE scaling only as a rope_freqs.weight tensor of per-frequency
// divisors; recover the parameters by matching it against the standard formula (low 1, high 4, orig 8192).
void detect_llama3_rope(const GgufFile& g, ModelConfig* c) {
    const GgufTensor* t = g.find_tensor("rope_freqs.weight");
    if (!t) return;
    if (t->n_elements() != c->head_dim / 2)  // before allocating: the dims may claim 2^50 elements of no type
        throw_error("{}: rope_freqs.weight has {} values, expected head_dim/2 = {}", g.path(), t->n_elements(),
                    c->head_dim / 2);
    std::vector<float> f(size_t(t->n_elements()));
    g.dequantize(*t, f.data());
    float factor = 1.0f;
    for (float x : f) factor = std::max(factor, x);
    RopeScaling rs;
    rs.type = "llama3";
    rs.factor = factor;
    for (size_t i = 0; i < f.size(); i++) {  // llama.cpp convert_hf_to_gguf.py LlamaModel.generate_extra_tensors
        double freq = 1.0 / std::pow(double(c->rope_theta), 2.0 * double(i) / double(c->head_dim));
        double wavelen = 2 * M_PI / freq;
        double low_wavelen = rs.original_max_position / rs.low_freq_factor;
        double high_wavelen = rs.original_max_position / rs.high_freq_factor;
        double expect;
        if (wavelen < high_wavelen) expect = 1;
        else if (wavelen > low_wavelen) expect = factor;
        else {
            double smooth = (rs.original_max_position / wavelen - rs.low_freq_factor) /
                            (rs.high_freq_factor - rs.low_freq_factor);
            expect = 1 / ((1 - smooth) / factor + smooth);
        }
        if (std::fabs(expect - f[i]) > 1e-3 * std::fabs(expect))
            throw_error("{}: rope_freqs.weight does not match llama3 RoPE scaling (factor {}, low 1, high 4, "
                        "original context 8192) at index {}: {} vs {}",
                        g.path(), factor, i, f[i], expect);
    }
    if (factor > 1.0f) c->rope_scaling = rs;
}

// The llama.* keys kvlm reads (or checks against what it computes); any other llama.* key is refused by name,
// since it may change the computation (llama.cpp applies llama.rope.scale_linear, llama.expert_count makes a
// mixture of experts, ...). Keys at their no-op value pass.
void refuse_unimplemented_keys(const GgufFile& g, int32_t head_dim) {
    static const std::set<std::string> kRead = {
        "llama.block_count",           "llama.context_length",        "llama.embedding_length",
        "llama.feed_forward_length",   "llama.attention.head_count",  "llama.attention.head_count_kv",
        "llama.attention.key_length",  "llama.attention.value_length", "llama.attention.layer_norm_rms_epsilon",
        "llama.rope.dimension_count",  "llama.rope.freq_base",        "llama.rope.scaling.type",
        "llama.vocab_size",            "llama.rope.scaling.factor",   "llama.rope.scale_linear",
        "llama.rope.scaling.original_context_length", "llama.rope.scaling.finetuned",
        "llama.expert_count",          "llama.expert_used_count"};
    for (const std::string& key : g.keys()) {
        if (key.rfind("llama.", 0) != 0 || kRead.count(key)) continue;
        throw_error("{}: metadata key {} is not supported (kvlm does not implement it, and it may change the "
                    "computation)",
                    g.path(), key);
    }
    // llama.cpp scales positions linearly by a factor given without a type (or by the older scale_linear).
    for (const char* key : {"llama.rope.scaling.factor", "llama.rope.scale_linear"})
        if (g.has(key) && g.get_float_or(key, 1.0) != 1.0 && g.get_string_or("llama.rope.scaling.type", "") != "llama3")
            throw_error("{}: {} = {} is not supported: linear RoPE scaling is not implemented", g.path(), key,
                        g.get_float_or(key, 1.0));
    for (const char* key : {"llama.expert_count", "llama.expert_used_count"})
        if (g.has(key) && g.get_int(key) > 0)
            throw_error("{}: {} = {} is not supported: mixture-of-experts is not implemented", g.path(), key,
                        g.get_int(key));
    if (g.has("llama.attention.value_length") && g.get_int("llama.attention.value_length") != head_dim)
        throw_error("{}: llama.attention.value_length = {} differs from the key length {} (not supported)", g.path(),
                    g.get_int("llama.attention.value_length"), head_dim);
}

}  // namespace

ConvertSource open_gguf_source(const std::string& path, const std::string& tokenizer_path) {
    auto g = std::shared_ptr<GgufFile>(GgufFile::open(path));
    std::string arch = g->get_string_or("general.architecture", "");
    if (arch != "llama")
        throw_error("{}: GGUF architecture '{}' is not supported (supported: llama)", path, arch);

    ConvertSource src;
    src.kind = "gguf";
    ModelConfig& c = src.metadata.config;
    c.architecture = "llama";
    c.n_layers = int_field(*g, "llama.block_count", 1, 1024);
    c.n_embd = int_field(*g, "llama.embedding_length", 1, 1 << 17);
    c.n_ff = int_field(*g, "llama.feed_forward_length", 1, 1 << 20);
    c.n_heads = int_field(*g, "llama.attention.head_count", 1, 1024);
    c.n_kv_heads = g->has("llama.attention.head_count_kv") ? int_field(*g, "llama.attention.head_count_kv", 1, 1024)
                                                           : c.n_heads;
    c.head_dim = g->has("llama.attention.key_length") ? int_field(*g, "llama.attention.key_length", 2, 1024)
                                                      : c.n_embd / c.n_heads;
    if (g->has("llama.rope.dimension_count") && g->get_int("llama.rope.dimension_count") != c.head_dim)
        throw_error("{}: llama.rope.dimension_count = {} differs from head_dim = {} (partial RoPE is not supported)",
                    path, g->get_int("llama.rope.dimension_count"), c.head_dim);
    c.n_ctx = g->has("llama.context_length") ? int_field(*g, "llama.context_length", 1, 1 << 24) : 2048;
    c.rope_theta = float(g->get_float_or("llama.rope.freq_base", 10000.0));
    c.norm_eps = float(g->get_float_or("llama.attention.layer_norm_rms_epsilon", 1e-5));
    std::string scaling = g->get_string_or("llama.rope.scaling.type", "none");
    if (scaling != "none")
        throw_error("{}: llama.rope.scaling.type '{}' is not supported (supported: none, llama3)", path, scaling);
    refuse_unimplemented_keys(*g, c.head_dim);

    const GgufTensor* embd = g->find_tensor("token_embd.weight");
    if (!embd) throw_error("{}: tensor token_embd.weight is missing", path);
    if (g->has("llama.vocab_size")) c.n_vocab = int_field(*g, "llama.vocab_size", 1, 1 << 22);
    else if (g->has("tokenizer.ggml.tokens")) c.n_vocab = int32_t(g->get_string_array("tokenizer.ggml.tokens").size());
    else c.n_vocab = int32_t(embd->dims.size() == 2 ? embd->dims[1] : 0);
    // Tied when output.weight is absent or a byte-for-byte copy of the embedding.
    const GgufTensor* output = g->find_tensor("output.weight");
    c.tied_embeddings = !output || (output->ggml_type == embd->ggml_type && output->dims == embd->dims &&
                                    output->n_bytes == embd->n_bytes && embd->data && output->data &&
                                    std::memcmp(output->data, embd->data, size_t(embd->n_bytes)) == 0);
    detect_llama3_rope(*g, &c);
    c.validate(path);

    src.tensors = expected_tensors(c, DType::f32);
    std::vector<const GgufTensor*> parts;
    std::map<DType, int> matrix_types;
    for (TensorInfo& t : src.tensors) {
        const GgufTensor* gt = g->find_tensor(t.name);
        if (!gt) throw_error("{}: tensor {} is missing", path, t.name);
        std::vector<int64_t> shape(gt->dims.rbegin(), gt->dims.rend());
        if (shape != t.shape)
            throw_error("{}: tensor {} has shape {} (GGUF dims reversed), expected {}", path, t.name,
                        shape_string(shape), shape_string(t.shape));
        std::optional<DType> stored = kvlm_dtype_of_ggml_type(gt->ggml_type);
        if (!gt->data || !stored)
            throw_error("{}: tensor {} has type {} (ggml type {}), which kvlm cannot import (supported: {})", path,
                        t.name, GgufFile::ggml_type_name(gt->ggml_type), gt->ggml_type, kSupportedGgmlTypes);
        // Matrices keep their type (quantized blocks are copied as they are); 1-D tensors become f32.
        if (t.shape.size() > 1) {
            t.dtype = *stored;
            matrix_types[*stored]++;
        }
        parts.push_back(gt);
    }
    // Every tensor of the file is used (a bias, a q/k norm, an expert kvlm left out would change the
    // computation); rope_freqs.weight was checked against llama3 scaling above, and output.weight may be the
    // embedding's copy.
    std::set<std::string> used{"rope_freqs.weight", "output.weight"};
    for (const TensorInfo& t : src.tensors) used.insert(t.name);
    for (const GgufTensor& t : g->tensors())
        if (!used.count(t.name))
            throw_error("{}: tensor {} is not used by kvlm's llama (its computation would be left out); kvlm does not "
                        "implement it",
                        path, t.name);
    src.default_dtype = std::max_element(matrix_types.begin(), matrix_types.end(), [](const auto& a, const auto& b) {
                            return a.second < b.second;
                        })->first;
    const int64_t head_dim = c.head_dim;
    // Source row of kvlm row `row` of tensor i: q/k rows are permuted from GGUF's interleaved RoPE order.
    auto source_row = [parts, tensors = src.tensors, head_dim](size_t i, int64_t row) {
        bool permute = tensors[i].name.find("attn_q.weight") != std::string::npos ||
                       tensors[i].name.find("attn_k.weight") != std::string::npos;
        return permute ? interleaved_source_row(row, head_dim) : row;
    };
    auto row_bytes_of = [parts, tensors = src.tensors](size_t i) {
        return parts[i]->n_bytes / uint64_t(tensor_n_rows(tensors[i]));
    };
    src.read_rows = [g, parts, tensors = src.tensors, source_row, row_bytes_of](size_t i, int64_t row, int64_t n_rows,
                                                                             float* out) {
        const int64_t row_len = tensor_row_len(tensors[i]);
        // Dequantize one source row at a time (rows are whole quantization blocks: ne0 % block == 0).
        GgufTensor one = *parts[i];
        one.dims = {row_len, 1};
        one.n_bytes = row_bytes_of(i);
        for (int64_t r = 0; r < n_rows; r++) {
            one.data = parts[i]->data + uint64_t(source_row(i, row + r)) * one.n_bytes;
            g->dequantize(one, out + r * row_len);
        }
    };
    src.read_stored_rows = [parts, source_row, row_bytes_of](size_t i, int64_t row, int64_t n_rows, void* out) {
        const uint64_t row_bytes = row_bytes_of(i);
        for (int64_t r = 0; r < n_rows; r++)
            std::memcpy(static_cast<uint8_t*>(out) + uint64_t(r) * row_bytes,
                        parts[i]->data + uint64_t(source_row(i, row + r)) * row_bytes, size_t(row_bytes));
    };

    if (!tokenizer_path.empty()) {
        src.metadata.tokenizer = load_tokenizer_source(tokenizer_path, c.n_vocab);
    } else {
        if (!g->has("tokenizer.ggml.tokens"))
            throw_error("{}: no tokenizer.ggml.* metadata; pass --tokenizer PATH", path);
        src.metadata.tokenizer = tokenizer_from_gguf(*g);
    }
    src.metadata.chat_template = g->get_string_or("tokenizer.chat_template", "");
    src.metadata.source = "GGUF " + std::filesystem::path(path).filename().string();
    src.metadata.sampling = gguf_sampling_defaults(*g);
    return src;
}

}  // namespace kvlm
