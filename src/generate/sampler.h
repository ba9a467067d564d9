// Turning logits into the next token: repetition penalty, then greedy or temperature + top-k + top-p +
// min-p sampling with a seeded generator (same seed and inputs = same tokens).
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace kvlm {

struct SamplingParams {
    float temperature = 0.8f;     // <= 0: greedy
    int32_t top_k = 40;           // <= 0: off
    float top_p = 0.95f;          // >= 1: off
    float min_p = 0.05f;          // <= 0: off
    float repeat_penalty = 1.0f;  // 1: off
    int32_t repeat_last_n = 64;   // how many recent tokens the penalty looks at
    uint64_t seed = 0;            // fixed default so runs repeat; CLI may pass a random one
};

// Throws Error naming the flag (--temp, --top-k, ...) and its valid range when a value is out of it (NaN
// and infinities included): a bad value must not silently mean "off" or sample garbage.
void check_sampling_params(const SamplingParams& params);

class Sampler {
public:
    explicit Sampler(const SamplingParams& params);
    // logits: [n_vocab], modified in place. history: tokens so far (prompt + generated). Throws Error if a
    // logit is NaN or infinite.
    int32_t sample(float* logits, int32_t n_vocab, const std::vector<int32_t>& history);

private:
    SamplingParams params_;
    std::mt19937_64 rng_;
    std::vector<std::pair<float, int32_t>> candidates_;
};

}  // namespace kvlm
