// Sampling settings with unset fields: parsing "name=value" lists and the range checks shared by the
// flags, the model file and `kvlm convert --sampling`.
#include "format/sampling_settings.h"

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <type_traits>
#include <vector>

#include "util/error.h"

namespace kvlm {

namespace {

// Shortest text that reads back as the same float ("0.2", not "0.200000003").
std::string float_text(float value) { return fmt::format("{}", value); }

// A stored field name as its flag: "top_k" -> "top-k".
std::string flag_name(std::string name) {
    for (char& c : name)
        if (c == '_') c = '-';
    return name;
}

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
    bool any = false;
    for_each_sampling_field([&](const char*, auto member) { any |= bool(this->*member); });
    return !any;
}

std::string SamplingSettings::to_string() const {
    std::vector<std::string> parts;
    for_each_sampling_field([&](const char* name, auto member) {
        if (const auto& value = this->*member) parts.push_back(fmt::format("{}={}", flag_name(name), *value));
    });
    return fmt::format("{}", fmt::join(parts, ","));
}

SamplingSettings overlay(const SamplingSettings& base, const SamplingSettings& over) {
    SamplingSettings s = base;
    for_each_sampling_field([&](const char*, auto member) {
        if (over.*member) s.*member = over.*member;
    });
    return s;
}

SamplingSettings parse_sampling_settings(const std::string& text, const std::string& what) {
    const char* names = "names: temp, top-k, top-p, min-p, repeat-penalty, repeat-last-n";
    SamplingSettings s;
    size_t start = 0;
    while (start <= text.size()) {
        size_t comma = text.find(',', start);
        std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        size_t eq = item.find('=');
        if (eq == std::string::npos)
            throw_error("{}", with_what(what, fmt::format("'{}' is not NAME=VALUE ({})", item, names)));
        const std::string name = item.substr(0, eq), value = item.substr(eq + 1);
        bool known = false;
        for_each_sampling_field([&](const char* field, auto member) {
            if (flag_name(field) != name) return;
            known = true;
            using T = typename std::decay_t<decltype(s.*member)>::value_type;
            if constexpr (std::is_same_v<T, float>) s.*member = parse_float(name, value, what);
            else s.*member = parse_int(name, value, what);
        });
        if (!known) throw_error("{}", with_what(what, fmt::format("unknown setting '{}' ({})", name, names)));
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
