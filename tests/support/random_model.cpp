// Random in-memory models for backend tests.
#include "support/random_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "compute/matmul_cpu.h"

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

std::vector<uint8_t> random_quant_blocks(DType dtype, int64_t n_elements, float max_abs, uint64_t seed) {
    std::mt19937_64 rng(seed);
    const size_t block_bytes = dtype_block_bytes(dtype);
    std::vector<int> scales;  // byte offsets of the block's f16 scales (docs/FORMAT.md)
    switch (dtype) {
        case DType::q4_1: case DType::q5_1: case DType::q4_k: case DType::q5_k: scales = {0, 2}; break;
        case DType::q2_k: scales = {80, 82}; break;
        case DType::q3_k: scales = {108}; break;
        case DType::q6_k: scales = {208}; break;
        default: scales = {0};
    }
    std::vector<uint8_t> bytes(size_t(dtype_bytes(dtype, uint64_t(n_elements))));
    const size_t n_blocks = bytes.size() / block_bytes;
    for (size_t b = 0; b < n_blocks; b++) {
        uint8_t* block = bytes.data() + b * block_bytes;
        for (size_t i = 0; i < block_bytes; i++) block[i] = uint8_t(rng());
        for (int at : scales) {
            const float v = (0.0005f + 0.01f * float(rng() % 1000) / 1000.0f) * (rng() % 2 ? 1.0f : -1.0f);
            const uint16_t h = f32_to_f16(v);
            std::memcpy(block + at, &h, 2);
        }
        if (b == 1) std::memset(block, 0, block_bytes);
    }
    std::vector<float> values(static_cast<size_t>(n_elements));
    convert_to_f32(dtype, bytes.data(), values.data(), values.size());
    float largest = 0.0f;
    for (float v : values) largest = std::max(largest, std::fabs(v));
    const float factor = largest > 0.0f ? max_abs / largest : 1.0f;
    for (size_t b = 0; b < n_blocks; b++)  // every value is linear in the block's scales
        for (int at : scales) {
            uint8_t* field = bytes.data() + b * block_bytes + size_t(at);
            uint16_t h;
            std::memcpy(&h, field, 2);
            h = f32_to_f16(f16_to_f32(h) * factor);
            std::memcpy(field, &h, 2);
        }
    return bytes;
}

// The types whose random models come from the quantizer (as before the other types had one); the rest get
// random blocks, every bit pattern a GGUF may hold rather than only what kvlm's quantizer writes.
static bool made_by_quantizer(DType dtype) { return dtype == DType::q8_0 || dtype == DType::q4_0 || dtype == DType::q4_1; }

std::unique_ptr<RandomModel> make_random_model(const ModelConfig& config, DType dtype, uint64_t seed) {
    auto model = std::make_unique<RandomModel>();
    model->config = config;
    uint64_t next_seed = seed * 1000003u + 17;
    auto make = [&](std::vector<int64_t> shape, float lo, float hi) {
        TensorView view;
        view.shape = shape;
        view.dtype = shape.size() == 1 ? DType::f32 : dtype;
        if (dtype_is_quantized(view.dtype) && !made_by_quantizer(view.dtype)) {
            model->storage.push_back(random_quant_blocks(view.dtype, view.n_elements(), hi, next_seed++));
        } else {
            std::vector<float> values = random_floats(size_t(view.n_elements()), lo, hi, next_seed++);
            model->storage.emplace_back(view.n_bytes());
            convert_from_f32(view.dtype, values.data(), model->storage.back().data(), values.size());
        }
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

std::unique_ptr<RandomModel> dequantized_copy(const RandomModel& model) {
    auto copy = std::make_unique<RandomModel>();
    copy->config = model.config;
    copy->weights = model.weights;
    auto widen = [&](TensorView* view) {
        if (!view->data || !dtype_is_quantized(view->dtype)) return;
        std::vector<float> values(size_t(view->n_elements()));
        convert_to_f32(view->dtype, view->data, values.data(), values.size());
        copy->storage.emplace_back(values.size() * sizeof(float));
        std::memcpy(copy->storage.back().data(), values.data(), values.size() * sizeof(float));
        view->data = copy->storage.back().data();
        view->dtype = DType::f32;
    };
    ModelWeights& w = copy->weights;
    const bool tied = model.weights.output.data == model.weights.token_embd.data;
    widen(&w.token_embd);
    if (tied) w.output = w.token_embd;
    else widen(&w.output);
    for (LayerWeights& l : w.layers)
        for (TensorView* v : {&l.attn_q, &l.attn_k, &l.attn_v, &l.attn_output, &l.ffn_gate, &l.ffn_up, &l.ffn_down})
            widen(v);
    return copy;
}

void for_each_cpu_path(const std::function<void(CpuPath)>& fn) {
    const CpuPath chosen = cpu_path();
    const CpuFeatures features = detect_cpu_features();
    for (CpuPath path : {CpuPath::scalar, CpuPath::avx2, CpuPath::avx512}) {
        if (path == chosen || !cpu_path_supported(path, features)) continue;
        set_cpu_path(path);
        try {
            fn(path);
        } catch (...) {
            set_cpu_path(chosen);
            throw;
        }
        set_cpu_path(chosen);
    }
}

}  // namespace kvlm::test
