// Where a decode step's time goes, without a profiler (KVLM_CUDA_PROFILE=1): every launch of a decode step
// is followed by a CUDA event, and the intervals between events are summed per stage ("gemv q/k/v",
// "attention", ...). The table - stage, launches and microseconds per step, share, bytes the stage must move
// and the bandwidth that makes - goes to stderr when the backend closes. Graphs are off while it runs (the
// same kernels, launched one by one), so the times include each launch's gap, as a profile of eager launches.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kvlm {

class DecodeProfile {
public:
    explicit DecodeProfile(cudaStream_t stream);
    ~DecodeProfile();
    DecodeProfile(const DecodeProfile&) = delete;
    DecodeProfile& operator=(const DecodeProfile&) = delete;

    void begin_step();
    // After the launches of one stage: records an event; `bytes` is what the stage must read and write.
    void mark(const char* stage, double bytes);
    // Waits for the step and adds each interval to its stage.
    void end_step();
    int64_t steps() const { return steps_; }
    // Markdown table, one row per stage in launch order, then the total.
    std::string table() const;

private:
    struct Stage {
        std::string name;
        double ms = 0, bytes = 0;
        int64_t launches = 0;
    };
    cudaStream_t stream_;
    std::vector<cudaEvent_t> events_;        // events_[0] opens the step; events_[i] closes marks_[i - 1]
    std::vector<std::pair<size_t, double>> marks_;  // (stage index, bytes) of this step's marks
    std::vector<Stage> stages_;
    int64_t steps_ = 0;
};

}  // namespace kvlm
