#include "backend/decode_profile.h"

#include <fmt/format.h>

#include "runtime/cuda_check.h"

namespace kvlm {

DecodeProfile::DecodeProfile(cudaStream_t stream) : stream_(stream) {}

DecodeProfile::~DecodeProfile() {
    for (cudaEvent_t event : events_) cudaEventDestroy(event);
}

void DecodeProfile::begin_step() {
    marks_.clear();
    if (events_.empty()) {
        events_.push_back(nullptr);
        CUDA_CHECK(cudaEventCreate(&events_[0]));
    }
    CUDA_CHECK(cudaEventRecord(events_[0], stream_));
}

void DecodeProfile::mark(const char* stage, double bytes) {
    size_t index = 0;
    while (index < stages_.size() && stages_[index].name != stage) index++;
    if (index == stages_.size()) stages_.push_back(Stage{stage});
    marks_.emplace_back(index, bytes);
    if (events_.size() <= marks_.size()) {
        events_.push_back(nullptr);
        CUDA_CHECK(cudaEventCreate(&events_.back()));
    }
    CUDA_CHECK(cudaEventRecord(events_[marks_.size()], stream_));
}

void DecodeProfile::end_step() {
    if (marks_.empty()) return;
    CUDA_CHECK(cudaEventSynchronize(events_[marks_.size()]));
    for (size_t i = 0; i < marks_.size(); i++) {
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
        Stage& stage = stages_[marks_[i].first];
        stage.ms += ms;
        stage.bytes += marks_[i].second;
        stage.launches++;
    }
    steps_++;
}

std::string DecodeProfile::table() const {
    if (steps_ == 0) return "";
    double total_ms = 0, total_bytes = 0;
    for (const Stage& s : stages_) total_ms += s.ms, total_bytes += s.bytes;
    const double steps = double(steps_);
    auto row = [&](const std::string& name, double launches, double ms, double bytes) {
        const double us = ms * 1e3 / steps, mb = bytes / steps / 1e6;
        return fmt::format("| {} | {:.0f} | {:.1f} | {:.1f}% | {:.3f} | {:.0f} |\n", name, launches / steps, us,
                           total_ms > 0 ? 100.0 * ms / total_ms : 0.0, mb, ms > 0 ? bytes / (ms * 1e-3) / 1e9 : 0.0);
    };
    std::string out = fmt::format(
        "kvlm: decode profile over {} steps (KVLM_CUDA_PROFILE=1: kernels launched one by one, an event after each "
        "stage)\n| stage | launches per step | us per step | share | MB per step | GB/s |\n| --- | ---: | ---: | ---: | "
        "---: | ---: |\n",
        steps_);
    int64_t launches = 0;
    for (const Stage& s : stages_) {
        out += row(s.name, double(s.launches), s.ms, s.bytes);
        launches += s.launches;
    }
    out += row("total", double(launches), total_ms, total_bytes);
    return out;
}

}  // namespace kvlm
