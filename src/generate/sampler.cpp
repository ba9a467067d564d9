// Sampling: repetition penalty, then greedy, or top-k -> softmax(temperature) -> top-p -> min-p -> draw.
// Candidates are ordered by (logit desc, id asc), so ties resolve the same way on every run.
#include "generate/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "compute/best_tokens.h"
#include "compute/cpu_ops.h"
#include "util/error.h"

namespace kvlm {

namespace {

bool better(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// The tokens the penalty touches: each distinct token of the last repeat_last_n once, in order of first
// appearance in that window (none when the penalty is off).
void penalty_window(std::vector<int32_t>& out, const std::vector<int32_t>& history, float penalty, int32_t last_n) {
    out.clear();
    if (penalty == 1.0f || last_n == 0 || history.empty()) return;
    size_t window = last_n < 0 ? history.size() : std::min(history.size(), size_t(last_n));
    for (size_t i = history.size() - window; i < history.size(); i++)
        if (std::find(out.begin(), out.end(), history[i]) == out.end()) out.push_back(history[i]);
}

// llama.cpp-style penalty over the window's distinct tokens: positive logits are divided by the penalty,
// negative ones multiplied.
void apply_repeat_penalty(float* logits, int32_t n_vocab, const int32_t* tokens, int32_t n_tokens, float penalty) {
    for (int32_t k = 0; k < n_tokens; k++) {
        const int32_t token = tokens[k];
        if (token < 0 || token >= n_vocab) continue;
        // A finite logit stays finite (clamped): an extreme penalty (1e38) must move it, not push it past
        // float range, which the finiteness check after the penalty would blame on the weights. A logit
        // that was not finite stays as it is, for that check to report.
        float& l = logits[token];
        if (!std::isfinite(l)) continue;
        const float max = std::numeric_limits<float>::max();
        l = std::clamp(l > 0.0f ? l / penalty : l * penalty, -max, max);
    }
}

// Index of the largest logit. The same scan refuses NaN or infinite logits: they come from damaged weights
// or an overflow, no token drawn from them means anything, so generation stops instead of printing garbage.
int32_t checked_argmax(const float* logits, int32_t n_vocab, size_t n_history) {
    bool all_finite = false;
    const int32_t best = argmax_cpu(logits, n_vocab, &all_finite);
    if (!all_finite)
        for (int32_t i = 0; i < n_vocab; i++)
            if (!std::isfinite(logits[i])) throw_bad_logit(std::isnan(logits[i]), i, n_history);
    return best;
}

}  // namespace

void throw_bad_logit(bool is_nan, int32_t token, size_t n_history) {
    throw_error("the model computed {} logit (token {}) after {} tokens: its weights may be damaged "
                "(check with `kvlm inspect --verify`) or the computation overflowed",
                is_nan ? "a NaN" : "an infinite", token, n_history);
}

SamplingParams resolve_sampling(const SamplingSettings& flags, const SamplingSettings& model, uint64_t seed) {
    const SamplingSettings s = overlay(model, flags);
    SamplingParams p;
    p.temperature = s.temperature.value_or(p.temperature);
    p.top_k = s.top_k.value_or(p.top_k);
    p.top_p = s.top_p.value_or(p.top_p);
    p.min_p = s.min_p.value_or(p.min_p);
    p.repeat_penalty = s.repeat_penalty.value_or(p.temperature > 0 ? kDefaultSamplingRepeatPenalty : 1.0f);
    p.repeat_last_n = s.repeat_last_n.value_or(p.repeat_last_n);
    p.seed = seed;
    return p;
}

std::string describe_sampling(const SamplingParams& p, const SamplingSettings& flags, const SamplingSettings& model) {
    // Only the values that act: greedy ignores top-k/p and min-p, a penalty of 1 its window.
    std::vector<std::string> values, from_flags, from_model, from_kvlm;
    auto add = [&](const char* name, const std::string& value, bool in_flags, bool in_model) {
        values.push_back(fmt::format("{} {}", name, value));
        (in_flags ? from_flags : in_model ? from_model : from_kvlm).push_back(name);
    };
    add("temp", fmt::format("{}{}", p.temperature, p.temperature <= 0 ? " (greedy)" : ""), bool(flags.temperature),
        bool(model.temperature));
    if (p.temperature > 0) {
        add("top-k", fmt::format("{}", p.top_k), bool(flags.top_k), bool(model.top_k));
        add("top-p", fmt::format("{}", p.top_p), bool(flags.top_p), bool(model.top_p));
        add("min-p", fmt::format("{}", p.min_p), bool(flags.min_p), bool(model.min_p));
    }
    add("repeat-penalty", fmt::format("{}{}", p.repeat_penalty, p.repeat_penalty == 1.0f ? " (off)" : ""),
        bool(flags.repeat_penalty), bool(model.repeat_penalty));
    if (p.repeat_penalty != 1.0f)
        add("repeat-last-n", fmt::format("{}", p.repeat_last_n), bool(flags.repeat_last_n), bool(model.repeat_last_n));
    std::vector<std::string> sources;
    if (!from_flags.empty()) sources.push_back(fmt::format("flags: {}", fmt::join(from_flags, ", ")));
    if (!from_model.empty()) sources.push_back(fmt::format("the model file: {}", fmt::join(from_model, ", ")));
    if (!from_kvlm.empty()) sources.push_back(fmt::format("kvlm's defaults: {}", fmt::join(from_kvlm, ", ")));
    return fmt::format("{} (from {})", fmt::join(values, ", "), fmt::join(sources, "; "));
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

double Sampler::draw(int32_t n_vocab) {
    if (params_.temperature <= 0.0f || n_vocab == 1) return 0.0;
    // 53 random bits -> u in [0, 1): portable, unlike std::uniform_real_distribution.
    return double(rng_() >> 11) * (1.0 / 9007199254740992.0);
}

SampleRequest Sampler::device_request(const std::vector<int32_t>& history, int32_t n_vocab) {
    penalty_window(penalty_tokens_, history, params_.repeat_penalty, params_.repeat_last_n);
    SampleRequest r;
    r.temperature = params_.temperature, r.top_p = params_.top_p, r.min_p = params_.min_p;
    r.repeat_penalty = params_.repeat_penalty, r.top_k = params_.top_k;
    r.penalty_tokens = penalty_tokens_.data(), r.n_penalty = int32_t(penalty_tokens_.size());
    r.u01 = draw(n_vocab);
    r.want_probability = report_probability_;
    return r;
}

SampleRequest Sampler::step_ahead_request(const std::vector<int32_t>& known, int32_t n_vocab) {
    const int32_t last_n = params_.repeat_last_n;
    SampleRequest r = device_request(known, n_vocab);
    // The window of known + [next] is next and the last_n - 1 known tokens before it.
    penalty_window(penalty_tokens_, known, params_.repeat_penalty, last_n < 0 ? last_n : std::max(0, last_n - 1));
    r.penalty_tokens = penalty_tokens_.data(), r.n_penalty = int32_t(penalty_tokens_.size());
    r.penalize_step_token = params_.repeat_penalty != 1.0f && last_n != 0;
    return r;
}

int32_t Sampler::sample(float* logits, int32_t n_vocab, const std::vector<int32_t>& history, double u01) {
    penalty_window(penalty_tokens_, history, params_.repeat_penalty, params_.repeat_last_n);
    return choose(logits, n_vocab, penalty_tokens_.data(), int32_t(penalty_tokens_.size()), history.size(), u01);
}

int32_t Sampler::sample(float* logits, int32_t n_vocab, const SampleRequest& request, size_t n_history) {
    KVLM_ASSERT(!request.allowed || request.n_allowed > 0, "sampling needs at least one allowed token");
    return choose(logits, n_vocab, request.penalty_tokens, request.n_penalty, n_history, request.u01, request.allowed,
                  request.allowed ? request.n_allowed : 0);
}

SampleRequest Sampler::allowed_request(const std::vector<int32_t>& history, int32_t n_vocab,
                                       const std::vector<int32_t>& allowed) {
    KVLM_ASSERT(!allowed.empty(), "sampling needs at least one allowed token");
    SampleRequest r = device_request(history, n_vocab);
    r.allowed = allowed.data(), r.n_allowed = int32_t(allowed.size());
    return r;
}

int32_t Sampler::sample_allowed(float* logits, int32_t n_vocab, const std::vector<int32_t>& history,
                                const std::vector<int32_t>& allowed) {
    return sample(logits, n_vocab, allowed_request(history, n_vocab, allowed), history.size());
}

int32_t Sampler::choose(float* logits, int32_t n_vocab, const int32_t* penalty_tokens, int32_t n_penalty,
                        size_t n_history, double u01, const int32_t* allowed, int32_t n_allowed) {
    const int32_t token = pick(logits, n_vocab, penalty_tokens, n_penalty, n_history, u01, allowed, n_allowed);
    last_probability_ = report_probability_ ? token_probability(logits, n_vocab, token) : -1.0f;
    return token;
}

float token_probability(const float* logits, int32_t n_vocab, int32_t token) {
    const float max_logit = logits[argmax_cpu(logits, n_vocab)];  // std::max_element: 0.2 ms a 49,152 row here
    // The SIMD exp of the CPU kernels: libm's took 0.55 ms for 49,152 logits (5% of a SmolLM2 token).
    const double total = exp_sum_cpu(logits, n_vocab, max_logit);
    return float(std::exp(double(logits[token] - max_logit)) / total);
}

int32_t Sampler::pick(float* logits, int32_t n_vocab, const int32_t* penalty_tokens, int32_t n_penalty,
                      size_t n_history, double u01, const int32_t* allowed, int32_t n_allowed) {
    // The finiteness check runs after the penalty (which keeps finite logits finite), over every logit: a
    // damaged model is refused whether or not a constraint would have hidden the bad value.
    apply_repeat_penalty(logits, n_vocab, penalty_tokens, n_penalty, params_.repeat_penalty);
    int32_t best = checked_argmax(logits, n_vocab, n_history);
    // The candidates: every token, or the allowed ones (ascending ids, so ties resolve as without a mask).
    const int32_t n_candidates = allowed ? n_allowed : n_vocab;
    auto candidate = [&](int32_t i) { return allowed ? allowed[i] : i; };
    if (allowed) {
        best = allowed[0];
        for (int32_t i = 1; i < n_allowed; i++)
            if (logits[allowed[i]] > logits[best]) best = allowed[i];
    }
    if (params_.temperature <= 0.0f || n_candidates == 1) return best;

    const float inv_temp = 1.0f / params_.temperature, max_logit = logits[best];
    const int32_t k = params_.top_k > 0 ? std::min(params_.top_k, n_candidates) : n_candidates;
    auto weight = [&](float logit) { return std::exp(double((logit - max_logit) * inv_temp)); };
    // Without top-k, tokens that min-p drops in the end anyway (p < min_p * p_max) are left out of the sort;
    // they come after every kept token, so they cannot move the top-p cut either. The floor has a small
    // margin so that the min-p test on probabilities below makes the final decision.
    const bool use_floor = k == n_candidates && params_.min_p > 0.0f && params_.min_p <= 1.0f;
    const float floor_logit =
        use_floor ? max_logit + (std::log(params_.min_p) - 0.01f) * params_.temperature : -INFINITY;

    std::vector<std::pair<float, int32_t>>& c = candidates_;
    size_t n_keep = 0;
    if (k < n_candidates) {
        // best_k's one pass (0.06 ms over 49,152 logits here, where selecting among all, then sorting, took
        // 0.4 ms); by `better`, the logit itself.
        const auto logit = [&](int32_t i) { return logits[i]; };
        const auto itself = [](int32_t j) { return j; };  // without an allowed set: the pass vectorizes
        if (allowed)
            best_k(logits, n_candidates, candidate, logit, size_t(k), c);
        else
            best_k(logits, n_candidates, itself, logit, size_t(k), c);
        n_keep = c.size();
    } else {
        c.clear();
        for (int32_t j = 0; j < n_candidates; j++) {
            const int32_t i = candidate(j);
            if (logits[i] >= floor_logit || i == best) c.emplace_back(logits[i], i);
        }
        n_keep = c.size();
        std::sort(c.begin(), c.end(), better);  // `better` is a total order: one order whatever the input's
    }

    // Softmax with temperature over the top-k set (the whole vocabulary when top-k is off).
    double total = 0.0;
    if (k < n_candidates) {
        for (size_t i = 0; i < n_keep; i++) total += weight(c[i].first);
    } else {
        for (int32_t j = 0; j < n_candidates; j++) total += weight(logits[candidate(j)]);
    }
    for (size_t i = 0; i < n_keep; i++) c[i].first = float(weight(c[i].first) / total);

    if (params_.top_p < 1.0f) {
        double cumulative = 0.0;
        for (size_t i = 0; i < n_keep; i++) {
            cumulative += c[i].first;
            if (cumulative >= params_.top_p) {
                n_keep = i + 1;
                break;
            }
        }
    }
    if (params_.min_p > 0.0f) {
        float threshold = params_.min_p * c[0].first;
        size_t i = 1;
        while (i < n_keep && c[i].first >= threshold) i++;
        n_keep = i;
    }

    double kept = 0.0;
    for (size_t i = 0; i < n_keep; i++) kept += c[i].first;
    double u = u01 * kept;
    double cumulative = 0.0;
    for (size_t i = 0; i < n_keep; i++) {
        cumulative += c[i].first;
        if (u < cumulative) return c[i].second;
    }
    return c[n_keep - 1].second;
}

}  // namespace kvlm
