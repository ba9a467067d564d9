// Sampling settings with unset fields: parsing "name=value" lists and the range checks shared by the
// flags, the model file and `kvlm convert --sampling`.
#include "format/sampling_settings.h"

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "util/error.h"

namespace kvlm {

namespace {

// Shortest text that reads back as the same float ("0.2", not "0.200000003").
std::string float_text(float value) { return fmt::format("{}", value); }

std::string with_what(const std::string& what, const std::string& message) {
    return what.empty() ? message : what + ": " + message;
}

float parse_float(const std::string& name, const std::string& text, const std::string& what) {
    char* end = nullptr;
    errno = 0;
    float value = std::strtof(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE)
        throw_error("{}", with_what(what, fmt::format("{}: '{}' is not a number", name, text)));
    return value;
}

int32_t parse_int(const std::string& name, const std::string& text, const std::string& what) {
    int32_t value = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || error != std::errc() || end != text.data() + text.size())
        throw_error("{}", with_what(what, fmt::format("{}: '{}' is not a whole number", name, text)));
    return value;
}

}  // namespace

bool SamplingSettings::empty() const {
    return !temperature && !top_k && !top_p && !min_p && !repeat_penalty && !repeat_last_n;
}

std::string SamplingSettings::to_string() const {
    std::vector<std::string> parts;
    if (temperature) parts.push_back("temp=" + float_text(*temperature));
    if (top_k) parts.push_back(fmt::format("top-k={}", *top_k));
    if (top_p) parts.push_back("top-p=" + float_text(*top_p));
    if (min_p) parts.push_back("min-p=" + float_text(*min_p));
    if (repeat_penalty) parts.push_back("repeat-penalty=" + float_text(*repeat_penalty));
    if (repeat_last_n) parts.push_back(fmt::format("repeat-last-n={}", *repeat_last_n));
    return fmt::format("{}", fmt::join(parts, ","));
}

SamplingSettings overlay(const SamplingSettings& base, const SamplingSettings& over) {
    SamplingSettings s = base;
    if (over.temperature) s.temperature = over.temperature;
    if (over.top_k) s.top_k = over.top_k;
    if (over.top_p) s.top_p = over.top_p;
    if (over.min_p) s.min_p = over.min_p;
    if (over.repeat_penalty) s.repeat_penalty = over.repeat_penalty;
    if (over.repeat_last_n) s.repeat_last_n = over.repeat_last_n;
    return s;
}

SamplingSettings parse_sampling_settings(const std::string& text, const std::string& what) {
    SamplingSettings s;
    size_t start = 0;
    while (start <= text.size()) {
        size_t comma = text.find(',', start);
        std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        size_t eq = item.find('=');
        if (eq == std::string::npos)
            throw_error("{}", with_what(what, fmt::format("'{}' is not NAME=VALUE (names: temp, top-k, top-p, "
                                                          "min-p, repeat-penalty, repeat-last-n)",
                                                          item)));
        std::string name = item.substr(0, eq), value = item.substr(eq + 1);
        if (name == "temp") s.temperature = parse_float(name, value, what);
        else if (name == "top-k") s.top_k = parse_int(name, value, what);
        else if (name == "top-p") s.top_p = parse_float(name, value, what);
        else if (name == "min-p") s.min_p = parse_float(name, value, what);
        else if (name == "repeat-penalty") s.repeat_penalty = parse_float(name, value, what);
        else if (name == "repeat-last-n") s.repeat_last_n = parse_int(name, value, what);
        else
            throw_error("{}", with_what(what, fmt::format("unknown setting '{}' (names: temp, top-k, top-p, min-p, "
                                                          "repeat-penalty, repeat-last-n)",
                                                          name)));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    check_sampling_settings(s, what);
    return s;
}

void check_sampling_settings(const SamplingSettings& s, const std::string& what) {
    // A command line's values are named as its flags (--temp), the others as the settings (temp).
    auto fail = [&](const char* name, const std::string& value, const char* range) {
        std::string message = fmt::format("{}{}: {} is out of range ({})", what.empty() ? "--" : "", name, value, range);
        throw_error("{}", with_what(what, message));
    };
    if (s.temperature && (!std::isfinite(*s.temperature) || *s.temperature < 0))
        fail("temp", float_text(*s.temperature), "a finite number >= 0; 0 = greedy");
    if (s.top_k && *s.top_k < 0) fail("top-k", std::to_string(*s.top_k), "0 = off, or 1 or more");
    if (s.top_p && !(*s.top_p > 0 && *s.top_p <= 1)) fail("top-p", float_text(*s.top_p), "above 0, at most 1; 1 = off");
    if (s.min_p && !(*s.min_p >= 0 && *s.min_p <= 1)) fail("min-p", float_text(*s.min_p), "0 to 1; 0 = off");
    if (s.repeat_penalty && (!std::isfinite(*s.repeat_penalty) || *s.repeat_penalty <= 0))
        fail("repeat-penalty", float_text(*s.repeat_penalty), "a finite number above 0; 1 = off");
    if (s.repeat_last_n && *s.repeat_last_n < -1)
        fail("repeat-last-n", std::to_string(*s.repeat_last_n), "0 = off, -1 = every token so far, or 1 or more");
}

}  // namespace kvlm
