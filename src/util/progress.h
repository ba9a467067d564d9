// A one-line progress bar on stderr for long jobs (convert, perplexity). Draws only when enabled and stderr is a
// terminal, at most ~10 times a second; otherwise every call is a no-op, so output in pipes and tests is clean.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace kvlm {

class ProgressBar {
public:
    // `unit` empty: done and total are bytes, shown in GB; otherwise counts shown as "3/12 <unit>".
    ProgressBar(std::string label, uint64_t total, bool enabled, std::string unit = "");
    ~ProgressBar();  // clears the line if finish() was not called (e.g. on an exception)
    void update(uint64_t done, const std::string& detail = "");
    void finish();   // draws 100% and ends the line
    bool active() const { return active_; }

private:
    void draw(uint64_t done, const std::string& detail);
    std::string label_;
    std::string unit_;
    uint64_t total_;
    bool active_;
    bool drawn_ = false;
    std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace kvlm
