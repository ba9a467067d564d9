// Progress bar drawing: "\r<label> [#####.....]  42%  1.2/2.9 GB  <detail>" rewritten in place.
#include "util/progress.h"

#include <unistd.h>

#include <cstdio>

namespace kvlm {

ProgressBar::ProgressBar(std::string label, uint64_t total, bool enabled, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total), active_(enabled && ::isatty(STDERR_FILENO)) {
    start_ = last_draw_ = std::chrono::steady_clock::now();
}

ProgressBar::~ProgressBar() {
    if (active_ && drawn_) std::fprintf(stderr, "\r\033[K");
}

void ProgressBar::update(uint64_t done, const std::string& detail) {
    if (!active_) return;
    auto now = std::chrono::steady_clock::now();
    if (drawn_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    draw(done, detail);
}

void ProgressBar::finish() {
    if (!active_) return;
    draw(total_, "");
    std::fprintf(stderr, "\n");
    active_ = false;
}

void ProgressBar::draw(uint64_t done, const std::string& detail) {
    constexpr int kWidth = 30;
    double fraction = total_ ? double(done) / double(total_) : 1.0;
    if (fraction > 1.0) fraction = 1.0;
    int filled = int(fraction * kWidth);
    char bar[kWidth + 1];
    for (int i = 0; i < kWidth; i++) bar[i] = i < filled ? '#' : '.';
    bar[kWidth] = '\0';
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    char amount[64];
    if (unit_.empty())
        std::snprintf(amount, sizeof amount, "%.2f/%.2f GB", double(done) / 1e9, double(total_) / 1e9);
    else
        std::snprintf(amount, sizeof amount, "%llu/%llu", (unsigned long long)done, (unsigned long long)total_);
    std::fprintf(stderr, "\r\033[K%s [%s] %3d%%  %s%s%s  %.0fs  %s", label_.c_str(), bar, int(fraction * 100), amount,
                 unit_.empty() ? "" : " ", unit_.c_str(), seconds, detail.c_str());
    std::fflush(stderr);
    drawn_ = true;
}

}  // namespace kvlm
