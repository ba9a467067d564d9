#include "generate/speculative.h"

#include <algorithm>

#include "util/error.h"

namespace kvlm {

void parse_spec_mode(const std::string& name, SpecOptions* options) {
    if (name == "off") options->mode = SpecOptions::Mode::off;
    else if (name == "lookup") options->mode = SpecOptions::Mode::lookup;
    else if (name == "draft") options->mode = SpecOptions::Mode::draft;
    else throw_error("--spec: unknown mode '{}' (expected lookup, draft or off)", name);
}

std::vector<int32_t> lookup_draft(const std::vector<int32_t>& history, int32_t max_tokens) {
    const size_t n_history = history.size();
    if (max_tokens <= 0) return {};
    for (size_t n = 3; n >= 2; n--) {
        if (n_history < n + 1) continue;
        const int32_t* suffix = history.data() + n_history - n;
        // Latest first: the most recent context is the likeliest to continue the same way.
        for (size_t start = n_history - n; start-- > 0;) {
            if (!std::equal(suffix, suffix + n, history.data() + start)) continue;
            const size_t from = start + n, to = std::min(n_history, from + size_t(max_tokens));
            return std::vector<int32_t>(history.begin() + std::ptrdiff_t(from), history.begin() + std::ptrdiff_t(to));
        }
    }
    return {};
}

}  // namespace kvlm
