// Random in-memory Llama models for tests: a ModelConfig plus ModelWeights whose views point into
// storage owned by the RandomModel (keep it alive as long as a backend uses the weights). Writing one to a
// .kvlm file is tiny_model.h's job.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "compute/cpu_features.h"
#include "format/model_config.h"
#include "format/model_weights.h"

namespace kvlm::test {

struct RandomModel {
    ModelConfig config;
    ModelWeights weights;
    std::vector<std::vector<uint8_t>> storage;  // backing bytes of every view
};

// 2 layers, n_embd 64, 4 heads of 16, 2 KV heads, n_ff 96, vocab 100, n_ctx 1024, untied, no bias.
ModelConfig small_random_config();

// Every tensor uniform random (matrices scaled by 1/sqrt(in_features), norms near 1, embeddings in
// [-1, 1]); matrices stored in `dtype`, 1-D tensors f32. q8_0, q4_0 and q4_1 are quantized;
// the other block types get random_quant_blocks of the same amplitudes (every bit pattern a GGUF may hold). Same seed = same model.
std::unique_ptr<RandomModel> make_random_model(const ModelConfig& config, DType dtype, uint64_t seed);

// A copy of `model` whose quantized matrices are replaced by their f32 decoding (convert_to_f32), every
// other tensor shared with `model` (keep it alive too): the exact weights a kernel that dequantizes sees.
std::unique_ptr<RandomModel> dequantized_copy(const RandomModel& model);

// Runs fn(path) with the CPU kernels switched to each SIMD path this CPU has other than the current one, then
// switches back (every path must give the same bits: compute/cpu_kernels.h).
void for_each_cpu_path(const std::function<void(CpuPath)>& fn);

// n_elements (whole blocks) of a quantized type drawn as raw blocks: every bit of every field random, the f16
// scales finite and of either sign, block 1 (where there is one) all zero; then the scales are scaled so the
// largest decoded |value| is about max_abs. The only way to get weights of the types kvlm has no quantizer
// for (q5_0 .. iq4_xs), and a harder test than quantized values for the others.
std::vector<uint8_t> random_quant_blocks(DType dtype, int64_t n_elements, float max_abs, uint64_t seed);

// Uniform floats in [lo, hi) from a portable generator (same seed = same values everywhere).
std::vector<float> random_floats(size_t n, float lo, float hi, uint64_t seed);

}  // namespace kvlm::test
