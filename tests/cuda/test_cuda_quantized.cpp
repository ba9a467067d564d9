// The CUDA backend on quantized models (weights of every quantized type kept quantized on the device) vs the CPU:
// decode (GEMVs dequantizing in registers, f32 activations) equals the CPU forward of the same weights
// decoded to f32 to 1e-4; prefill (dequantized f16 tiles, f16 GEMM inputs) to 2e-2; and
// the CPU's own quantized path (activations rounded to q8 blocks) within 3e-2, through prefill, chunked
// prefill and decode. Without a usable device (or in CUDA=0 builds) each case says "SKIPPED: ..." and passes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <sstream>

#include "compute/backend.h"
#include "compute/cpu_backend.h"
#include "support/cuda_kernel_checks.h"
#include "support/random_model.h"
#include "support/test_util.h"

#ifdef KVLM_CUDA
#include "cuda/backend/cuda_backend.h"
#endif

using namespace kvlm;
using namespace kvlm::test;

#ifndef KVLM_CUDA

TEST_CASE("cuda backend: quantized models match the CPU") {
    MESSAGE("SKIPPED: no CUDA device (this kvlm was built without CUDA)");
}

#else

namespace {

// A CPU backend over `cpu_weights` and a CUDA backend over `cuda_weights` (same config), one shuffled table.
struct Pair {
    std::unique_ptr<Backend> cpu, cuda;
    BlockTable table;
};
Pair make_pair(const ModelConfig& config, const ModelWeights& cpu_weights, const ModelWeights& cuda_weights,
               int32_t block_size, int32_t n_tokens) {
    BackendOptions options;
    options.block_size = block_size;
    options.kv_dtype = DType::f32;
    const int32_t n_table = (n_tokens + block_size - 1) / block_size;
    options.n_kv_blocks = n_table + 5;
    Pair p;
    p.cpu = make_cpu_backend(config, cpu_weights, options);
    p.cuda = make_cuda_backend(config, cuda_weights, options);
    p.table.blocks.resize(size_t(options.n_kv_blocks));
    std::iota(p.table.blocks.begin(), p.table.blocks.end(), 0);
    std::shuffle(p.table.blocks.begin(), p.table.blocks.end(), std::mt19937(3));
    p.table.blocks.resize(size_t(n_table));
    return p;
}

// Prefills n_prefill tokens (all logits; n_prefill 1 is a decode step), then decodes up to n_total, comparing
// the two backends' logits at every step: prefill to prefill_tol, decode to decode_tol.
void compare_run(const Pair& p, int32_t n_vocab, int32_t n_prefill, int32_t n_total, float prefill_tol,
                 float decode_tol, const std::string& what) {
    const std::vector<int32_t> tokens = random_tokens(n_total, n_vocab, 5);
    std::vector<float> cpu(size_t(n_prefill) * n_vocab), gpu(cpu.size());
    p.cpu->forward(tokens.data(), n_prefill, 0, p.table, cpu.data(), true);
    p.cuda->forward(tokens.data(), n_prefill, 0, p.table, gpu.data(), true);
    {
        const float tol = n_prefill > 1 ? prefill_tol : decode_tol;
        check_close(gpu, cpu, tol, tol, what + ": first forward");
    }
    cpu.resize(size_t(n_vocab)), gpu.resize(size_t(n_vocab));
    for (int32_t pos = n_prefill; pos < n_total; pos++) {
        p.cpu->forward(&tokens[size_t(pos)], 1, pos, p.table, cpu.data());
        p.cuda->forward(&tokens[size_t(pos)], 1, pos, p.table, gpu.data());
        check_close(gpu, cpu, decode_tol, decode_tol, what + ": decode at " + std::to_string(pos));
    }
}

std::vector<ModelConfig> configs() {
    ModelConfig small = small_random_config();
    ModelConfig tied = small;  // the quantized token_embd also serves as the head; GQA 8, bias, llama3 RoPE
    tied.tied_embeddings = true;
    tied.n_heads = 8, tied.n_kv_heads = 1, tied.head_dim = 16, tied.qkv_bias = true;
    tied.rope_scaling.type = "llama3", tied.rope_scaling.factor = 8.0f, tied.rope_theta = 500000.0f;
    return {small, tied};
}

const DType kQuantTypes[] = {DType::q8_0, DType::q4_0, DType::q4_1};

// Rows of whole 256-element super-blocks (n_embd 256, n_ff 512, heads of 64): every matrix of the type.
ModelConfig wide_config() {
    ModelConfig c = small_random_config();
    c.n_embd = 256, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 64, c.n_ff = 512;
    c.tied_embeddings = true;
    return c;
}

}  // namespace

TEST_CASE("cuda backend: quantized models decode as their f32 decoding on the CPU, prefill within f16 rounding") {
    if (!have_cuda()) return;
    for (const ModelConfig& config : configs()) {
        for (DType dtype : kQuantTypes) {
            auto quantized = make_random_model(config, dtype, 42);
            auto decoded = dequantized_copy(*quantized);
            const std::string what = std::string(dtype_name(dtype)) + (config.tied_embeddings ? " tied" : "");
            // Decode only (from position 0): the same weights and f32 activations, summed in another order.
            compare_run(make_pair(config, decoded->weights, quantized->weights, 4, 24), config.n_vocab, 1, 24, 0, 1e-4f,
                        what + " decode vs f32 decoding");
            // Prefill: weight tiles and GEMM inputs rounded to f16 (errors up to 9e-3 on the tied model's larger
            // logits in emulation); the decode after it reads that K/V, so it inherits the rounding.
            compare_run(make_pair(config, decoded->weights, quantized->weights, 5, 30), config.n_vocab, 23, 30, 2e-2f,
                        2e-2f, what + " prefill vs f32 decoding");
        }
    }
}

TEST_CASE("cuda backend: models of the other quantized types decode as their f32 decoding, prefill within f16") {
    if (!have_cuda()) return;
    // The same two runs as above over the 32-element q5_0, q5_1, iq4_nl and the super-block types; the
    // quantized token_embd is also the head.
    const ModelConfig config = wide_config();
    for (DType dtype : {DType::q5_0, DType::q5_1, DType::iq4_nl, DType::q2_k, DType::q3_k, DType::q4_k, DType::q5_k,
                        DType::q6_k, DType::iq4_xs}) {
        auto quantized = make_random_model(config, dtype, 43);
        auto decoded = dequantized_copy(*quantized);
        const std::string what = dtype_name(dtype);
        compare_run(make_pair(config, decoded->weights, quantized->weights, 4, 12), config.n_vocab, 1, 12, 0, 1e-4f,
                    what + " decode vs f32 decoding");
        compare_run(make_pair(config, decoded->weights, quantized->weights, 5, 20), config.n_vocab, 15, 20, 2e-2f,
                    2e-2f, what + " prefill vs f32 decoding");
    }
}

TEST_CASE("cuda backend: quantized models match the CPU's quantized path") {
    if (!have_cuda()) return;
    // The CPU rounds the activations of quantized products to q8_0 blocks (1/254 of each block's largest
    // value at most); the GPU keeps them in f32 (decode) or f16 (prefill): the logits differ by that rounding
    // carried through the layers (up to 6.4e-3 in emulation).
    for (const ModelConfig& config : configs()) {
        for (DType dtype : kQuantTypes) {
            auto m = make_random_model(config, dtype, 7);
            const std::string what = std::string(dtype_name(dtype)) + (config.tied_embeddings ? " tied" : "");
            compare_run(make_pair(config, m->weights, m->weights, 16, 31), config.n_vocab, 23, 31, 3e-2f, 3e-2f,
                        what + " vs CPU quantized");
        }
    }
}

TEST_CASE("cuda backend: a long prompt over quantized weights (two prefill chunks) then decode") {
    if (!have_cuda()) return;
    // Past the 2048-token batch: the second chunk's tiles and attention over the first's blocks.
    auto m = make_random_model(small_random_config(), DType::q4_1, 9);
    auto decoded = dequantized_copy(*m);
    compare_run(make_pair(m->config, decoded->weights, m->weights, 16, 2060), m->config.n_vocab, 2056, 2060, 2e-2f,
                2e-2f, "q4_1 2056-token prompt vs f32 decoding");
}

#endif  // KVLM_CUDA
