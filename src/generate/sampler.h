// Turning logits into the next token: repetition penalty, then greedy or temperature + top-k + top-p +
// min-p sampling with a seeded generator (same seed and inputs = same tokens).
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "compute/backend.h"
#include "format/sampling_settings.h"

namespace kvlm {

// The values one generation uses. The initializers are kvlm's defaults (llama.cpp's), except the repeat
// penalty: see resolve_sampling.
struct SamplingParams {
    float temperature = 0.8f;     // <= 0: greedy
    int32_t top_k = 40;           // <= 0: off
    float top_p = 0.95f;          // >= 1: off
    float min_p = 0.05f;          // <= 0: off
    float repeat_penalty = 1.0f;  // 1: off
    int32_t repeat_last_n = 64;   // how many recent tokens the penalty looks at
    uint64_t seed = 0;            // fixed default so runs repeat; CLI may pass a random one
};

// kvlm's repeat penalty when neither the flags nor the model set one and the run samples: mild, so that a
// small model at temperature 0.8 does not loop (llama.cpp's long-time default, Ollama's today).
constexpr float kDefaultSamplingRepeatPenalty = 1.1f;

// Each value from `flags` if set, else from the model file's `model_defaults`, else kvlm's default. The
// default repeat penalty applies only when sampling: greedy decoding (temperature 0) stays the plain argmax
// that the references are checked against, unless a penalty is asked for. Both sets must have passed
// check_sampling_settings.
SamplingParams resolve_sampling(const SamplingSettings& flags, const SamplingSettings& model_defaults,
                                uint64_t seed);

// One line for -v: the values that act and where each came from, e.g. "temp 0 (greedy), repeat-penalty 1
// (off) (from the model file: temp; kvlm's defaults: repeat-penalty)".
std::string describe_sampling(const SamplingParams& params, const SamplingSettings& flags,
                              const SamplingSettings& model_defaults);

class Sampler {
public:
    explicit Sampler(const SamplingParams& params);
    // logits: [n_vocab], modified in place. history: tokens so far (prompt + generated). Throws Error if a
    // logit is NaN or infinite.
    int32_t sample(float* logits, int32_t n_vocab, const std::vector<int32_t>& history) {
        return sample(logits, n_vocab, history, draw(n_vocab));
    }
    // sample() in two halves: the step's random draw in [0, 1) (taken from the generator only when the step
    // samples: temperature > 0 and more than one token), then the choice given that draw. A step sampled on
    // the device takes its draw here too, so the generator advances exactly as on the CPU.
    double draw(int32_t n_vocab);
    int32_t sample(float* logits, int32_t n_vocab, const std::vector<int32_t>& history, double u01);
    // The same for a step whose device_request came back to the host (its penalty tokens and draw, reused).
    int32_t sample(float* logits, int32_t n_vocab, const SampleRequest& request, size_t n_history);
    // sample() choosing only among `allowed` (ascending token ids, not empty): the distribution renormalized
    // over them, after the penalty; every logit is still checked for NaN and infinity.
    int32_t sample_allowed(float* logits, int32_t n_vocab, const std::vector<int32_t>& history,
                           const std::vector<int32_t>& allowed);
    // device_request for a pick among `allowed` (constrained output; the list must outlive the request).
    SampleRequest allowed_request(const std::vector<int32_t>& history, int32_t n_vocab,
                                  const std::vector<int32_t>& allowed);
    // What Backend::decode_sample needs for the step after `history`: the settings, the distinct tokens the
    // repetition penalty touches, and this step's draw. Valid until the next call.
    SampleRequest device_request(const std::vector<int32_t>& history, int32_t n_vocab);
    // device_request for the step after `known` plus one token the host does not have yet (a decode step
    // enqueued behind the one that picks it): the window without that token, which the device adds.
    SampleRequest step_ahead_request(const std::vector<int32_t>& known, int32_t n_vocab);
    // The generator, to give a draw back: a step enqueued ahead and then not used must not advance it.
    std::mt19937_64 generator() const { return rng_; }
    void restore_generator(const std::mt19937_64& generator) { rng_ = generator; }
    const SamplingParams& params() const { return params_; }
    // With report_probabilities(true), each sample() notes the model's probability for the token it picked
    // (token_probability of the penalized logits), and device requests ask the device for it (-v).
    void report_probabilities(bool on) { report_probability_ = on; }
    bool reports_probabilities() const { return report_probability_; }
    float last_probability() const { return last_probability_; }  // -1 when not reported

private:
    SamplingParams params_;
    std::mt19937_64 rng_;
    std::vector<std::pair<float, int32_t>> candidates_;
    std::vector<int32_t> penalty_tokens_;

    bool report_probability_ = false;
    float last_probability_ = -1.0f;

    int32_t choose(float* logits, int32_t n_vocab, const int32_t* penalty_tokens, int32_t n_penalty, size_t n_history,
                   double u01, const int32_t* allowed = nullptr, int32_t n_allowed = 0);
    int32_t pick(float* logits, int32_t n_vocab, const int32_t* penalty_tokens, int32_t n_penalty, size_t n_history,
                 double u01, const int32_t* allowed, int32_t n_allowed);
};

// The model's probability for `token`: softmax of the logits at temperature 1 over the whole vocabulary
// (after the repetition penalty when the sampler's logits are passed), whatever the sampling settings.
float token_probability(const float* logits, int32_t n_vocab, int32_t token);

// The error for a NaN or infinite logit (token `token`) after `n_history` tokens, wherever it was found.
[[noreturn]] void throw_bad_logit(bool is_nan, int32_t token, size_t n_history);

}  // namespace kvlm
