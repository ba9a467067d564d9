// Decode steps queued one ahead (Backend::enqueue_decode_step), so that the device does not wait for the
// host between tokens: while the device runs the step for the sequence's last token, the step after it is
// already queued with the token the device is picking as its input. Same tokens as one step at a time: the
// queued step takes the next draw from the sampler and its penalty window is completed on the device.
// A queued step that turns out unwanted (the token before it ended the generation) is dropped: waited for,
// its draw given back to the sampler, the blocks reserved for it released; its K/V slot past the
// sequence's end is overwritten by whatever comes next there, as a rejected draft's is.
#pragma once
#include <cstdint>
#include <random>

#include "compute/backend.h"
#include "generate/sampler.h"
#include "kv/prefix_cache.h"

namespace kvlm {

class StepsAhead {
public:
    StepsAhead(Backend& backend, PrefixCache& cache, Sequence& seq, Sampler& sampler);
    ~StepsAhead();  // drops what is still in flight (leaving through an exception), errors ignored

    // Backend::decode_sample for seq.tokens.back() at `pos` (queued already if the step before queued it),
    // with the step after it queued behind it when `queue_next` (its token may be wanted), the settings
    // chain and the pool has room. `request`: the step's request, for a host-side sample (kNeedsHost).
    SampleOutcome step(int32_t pos, int32_t n_vocab, bool queue_next, float* logits, SampleRequest& request);
    // Drops the queued step, if there is one (the generation ended after seq.tokens.back()).
    void drop();
    int64_t n_queued() const { return n_queued_; }  // steps queued behind another so far

private:
    void queue_after(int32_t pos, int32_t n_vocab);

    Backend& backend_;
    PrefixCache& cache_;
    Sequence& seq_;
    Sampler& sampler_;
    bool queued_ = false;          // the step after seq.tokens.back() is in flight
    int32_t n_in_flight_ = 0;      // steps enqueued and not yet waited for
    int64_t n_queued_ = 0;
    std::mt19937_64 generator_before_;  // the sampler's generator before the queued step's draw
};

}  // namespace kvlm
