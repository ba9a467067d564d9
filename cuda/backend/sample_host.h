// The host side of sample.cu, shared by CudaBackend::decode_sample and the parity tests: a SampleRequest as
// the kernel's inputs, and its result as a SampleOutcome.
#pragma once
#include <algorithm>

#include "compute/backend.h"
#include "kernels/cuda_ops.h"

namespace kvlm {

// Words of an allowed-token bitset over n_vocab tokens (SampleInputs::allowed).
inline size_t allowed_words(int32_t n_vocab) { return (size_t(n_vocab) + 31) / 32; }

// The request's allowed tokens as a bitset into bits[allowed_words(n_vocab)] (host memory, to upload).
inline void fill_allowed_bits(uint32_t* bits, int32_t n_vocab, const SampleRequest& r) {
    std::fill_n(bits, allowed_words(n_vocab), 0u);
    for (int32_t i = 0; i < r.n_allowed; i++) bits[r.allowed[i] >> 5] |= 1u << (r.allowed[i] & 31);
}

// Fills `in`; returns how many of its bytes to upload (the penalty list is cut to what is used).
// device_allowed: where the request's allowed bitset lies on the device (needed when it has one).
inline size_t fill_sample_inputs(SampleInputs* in, const SampleRequest& r, const uint32_t* device_allowed = nullptr) {
    in->n_allowed = r.n_allowed > 0 ? r.n_allowed : 0, in->unused = 0;
    in->allowed = r.n_allowed > 0 ? device_allowed : nullptr;
    in->temperature = r.temperature, in->top_p = r.top_p, in->min_p = r.min_p;
    in->repeat_penalty = r.repeat_penalty, in->top_k = r.top_k, in->u01 = r.u01;
    in->penalize_step_token = r.penalize_step_token ? 1 : 0;
    in->want_probability = r.want_probability ? 1 : 0;
    in->n_penalty = std::clamp(r.n_penalty, 0, kSampleMaxPenalty);  // Sampler lists none when the penalty is off
    std::copy(r.penalty_tokens, r.penalty_tokens + in->n_penalty, in->penalty_tokens);
    return offsetof(SampleInputs, penalty_tokens) + size_t(in->n_penalty) * sizeof(int32_t);
}

inline SampleOutcome sample_outcome(const SampleResult& r) {
    SampleOutcome out;
    out.logits_digest = r.digest;
    if (r.status == kSampleOk) {
        out.status = SampleOutcome::kToken, out.token = r.token, out.probability = r.probability;
    } else if (r.status == kSampleBadNan || r.status == kSampleBadInf) {
        out.status = SampleOutcome::kBadLogit, out.bad_index = r.bad_index, out.bad_is_nan = r.status == kSampleBadNan;
    }  // else kNeedsHost: the logits are as they came
    return out;
}

}  // namespace kvlm
