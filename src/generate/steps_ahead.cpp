#include "generate/steps_ahead.h"

#include "util/error.h"

namespace kvlm {

StepsAhead::StepsAhead(Backend& backend, PrefixCache& cache, Sequence& seq, Sampler& sampler)
    : backend_(backend), cache_(cache), seq_(seq), sampler_(sampler) {}

StepsAhead::~StepsAhead() {
    try {
        drop();
    } catch (...) {  // already leaving through an exception
    }
}

SampleOutcome StepsAhead::step(int32_t pos, int32_t n_vocab, bool queue_next, float* logits, SampleRequest& request) {
    const int32_t token = seq_.tokens.back();
    if (!queued_) {
        request = sampler_.device_request(seq_.tokens, n_vocab);
        if (!queue_next || !backend_.chains_decode_steps(request))
            return backend_.decode_sample(token, pos, seq_.table, request, logits);
        backend_.enqueue_decode_step(token, pos, seq_.table, request);
        n_in_flight_++;
    }
    queued_ = false;
    if (queue_next) queue_after(pos + 1, n_vocab);
    n_in_flight_--;
    return backend_.wait_decode_step();
}

void StepsAhead::queue_after(int32_t pos, int32_t n_vocab) {
    generator_before_ = sampler_.generator();
    const SampleRequest request = sampler_.step_ahead_request(seq_.tokens, n_vocab);
    bool room = backend_.chains_decode_steps(request);
    if (room) {
        try {
            cache_.reserve(seq_, pos + 1);
        } catch (const Error&) {
            room = false;  // the next step runs on its own and reports the full pool
        }
    }
    if (!room) {
        sampler_.restore_generator(generator_before_);
        return;
    }
    backend_.enqueue_decode_step(Backend::kTokenFromDevice, pos, seq_.table, request);
    n_in_flight_++;
    queued_ = true;
    n_queued_++;
}

void StepsAhead::drop() {
    for (; n_in_flight_ > 0; n_in_flight_--) backend_.wait_decode_step();
    if (!queued_) return;
    queued_ = false;
    sampler_.restore_generator(generator_before_);
    cache_.truncate(seq_, seq_.table.n_tokens);
}

}  // namespace kvlm
