#include "backend/decode_slots.h"

#include "util/error.h"

namespace kvlm {

DecodeSlots::~DecodeSlots() {
    for (Slot& slot : slots_)
        if (slot.done) cudaEventDestroy(slot.done);
}

DecodeSlots::Slot& DecodeSlots::claim(int64_t n_blocks) {
    KVLM_ASSERT(n_in_flight_ < kSlots, "more decode steps in flight than there are slots");
    Slot& slot = slots_[(oldest_ + n_in_flight_) % kSlots];
    if (!slot.done) {
        CUDA_CHECK(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming));
        slot.sample_memory = std::make_unique<PinnedBuffer>(sizeof(SampleInputs) + sizeof(SampleResult));
        slot.sample_in = reinterpret_cast<SampleInputs*>(slot.sample_memory->data());
        slot.sample_out = reinterpret_cast<SampleResult*>(slot.sample_memory->data() + sizeof(SampleInputs));
    }
    if (n_blocks > slot.table_capacity) {
        slot.input_memory = std::make_unique<PinnedBuffer>(size_t(2 + n_blocks) * sizeof(int32_t));
        slot.inputs = reinterpret_cast<int32_t*>(slot.input_memory->data());
        slot.table_capacity = n_blocks;
    }
    n_in_flight_++;
    return slot;
}

DecodeSlots::Slot& DecodeSlots::oldest() {
    KVLM_ASSERT(n_in_flight_ > 0, "no decode step in flight");
    return slots_[oldest_];
}

void DecodeSlots::release_oldest() {
    KVLM_ASSERT(n_in_flight_ > 0, "no decode step in flight");
    oldest_ = (oldest_ + 1) % kSlots;
    n_in_flight_--;
}

}  // namespace kvlm
