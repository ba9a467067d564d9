// Sampling settings that may each be unset. A model file carries the ones its source recommends
// (generation_config.json, GGUF general.sampling.* keys, or `kvlm convert --sampling`); the sampling
// flags of a command line are another set. generate/sampler.h resolves a run's values: the flags', else
// the model's, else kvlm's own defaults.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace kvlm {

struct SamplingSettings {
    std::optional<float> temperature;     // 0 = greedy
    std::optional<int32_t> top_k;         // 0 = off
    std::optional<float> top_p;           // 1 = off
    std::optional<float> min_p;           // 0 = off
    std::optional<float> repeat_penalty;  // 1 = off
    std::optional<int32_t> repeat_last_n; // -1 = every token so far, 0 = off

    bool empty() const;
    // The set values as "temp=0.2,top-p=0.9" (the names --sampling and the run flags use); "" when empty.
    std::string to_string() const;
};

// Calls f(name, member) for each field, in the order above, with its stored name ("temp", "top_k",
// "top_p", "min_p", "repeat_penalty", "repeat_last_n": the model file's key after "sampling.", inspect's
// JSON key; with '-' for '_', the run flag) and a pointer to the member.
template <typename F>
void for_each_sampling_field(F&& f) {
    f("temp", &SamplingSettings::temperature);
    f("top_k", &SamplingSettings::top_k);
    f("top_p", &SamplingSettings::top_p);
    f("min_p", &SamplingSettings::min_p);
    f("repeat_penalty", &SamplingSettings::repeat_penalty);
    f("repeat_last_n", &SamplingSettings::repeat_last_n);
}

// `base` with every value `over` sets replacing base's.
SamplingSettings overlay(const SamplingSettings& base, const SamplingSettings& over);

// Parses "temp=0.2,top-p=0.9,top-k=40,min-p=0.05,repeat-penalty=1.1,repeat-last-n=64" (any subset).
// Throws Error naming `what` (e.g. "--sampling") for an unknown name, a value that is not a number or
// one out of range.
SamplingSettings parse_sampling_settings(const std::string& text, const std::string& what);

// Throws Error when a set value is out of its range (NaN and infinities included), naming the setting as
// the run flag that sets it (--temp, --top-k, ...) after `what` when given ("model.kvlm: sampling
// defaults: --temp ...").
void check_sampling_settings(const SamplingSettings& settings, const std::string& what = "");

}  // namespace kvlm
