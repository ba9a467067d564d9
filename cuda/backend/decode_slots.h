// The host side of the decode steps in flight (CudaBackend::enqueue_decode_step): at most two, the one the
// host waits for and the one enqueued behind it. Each has its own pinned staging for its inputs (token,
// position, block table; the sampler's inputs), its result, and an event after the result's copy; a slot
// is refilled only after the host has waited for its previous step, so no pinned buffer changes under a
// copy still queued.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "kernels/cuda_ops.h"
#include "runtime/pinned_buffer.h"

namespace kvlm {

class DecodeSlots {
public:
    struct Slot {
        int32_t* inputs = nullptr;  // [token][position][block table ...]
        SampleInputs* sample_in = nullptr;
        SampleResult* sample_out = nullptr;
        cudaEvent_t done = nullptr;  // recorded after sample_out's copy
        std::unique_ptr<PinnedBuffer> input_memory, sample_memory;
        int64_t table_capacity = 0;
    };
    static constexpr int kSlots = 2;

    DecodeSlots() = default;
    ~DecodeSlots();
    DecodeSlots(const DecodeSlots&) = delete;
    DecodeSlots& operator=(const DecodeSlots&) = delete;

    // The slot for the next step, with room for a table of n_blocks (throws if kSlots are in flight).
    Slot& claim(int64_t n_blocks);
    // The oldest step in flight (throws if none), then handing its slot back.
    Slot& oldest();
    void release_oldest();
    int in_flight() const { return n_in_flight_; }

private:
    Slot slots_[kSlots];
    int oldest_ = 0, n_in_flight_ = 0;
};

}  // namespace kvlm
