// Parsing (and printing) human byte sizes for flags such as --kv-mem. "KiB/MiB/GiB/TiB" and bare "K/M/G/T" are powers
// of 1024; "KB/MB/GB/TB" are powers of 1000 (SI); a plain number or "B" is bytes. Case-insensitive.
#include <cctype>
#include <cmath>
#include <cstring>
#include <string>

#include "util/byte_size.h"
#include "util/error.h"

namespace kvlm {

uint64_t parse_byte_size(const std::string& text, const char* flag_name) {
    auto fail = [&](const char* why) -> uint64_t {
        throw_error("{}: '{}' is not a valid byte size ({}; expected e.g. 512MiB, 4GiB, 1.5GB or a byte count)",
                    flag_name, text, why);
    };
    size_t begin = 0, end = text.size();
    while (begin < end && std::isspace(uint8_t(text[begin]))) begin++;
    while (end > begin && std::isspace(uint8_t(text[end - 1]))) end--;
    size_t pos = begin;
    std::string digits;
    bool seen_point = false;
    while (pos < end && (std::isdigit(uint8_t(text[pos])) || (text[pos] == '.' && !seen_point))) {
        seen_point |= text[pos] == '.';
        digits += text[pos++];
    }
    if (digits.empty() || digits == ".") return fail("no number");
    while (pos < end && text[pos] == ' ') pos++;
    std::string unit;
    for (; pos < end; pos++) unit += char(std::tolower(uint8_t(text[pos])));

    long double multiplier = 0;
    static const char* prefixes = "kmgt";
    if (unit.empty() || unit == "b") {
        multiplier = 1;
    } else if (const char* p = std::strchr(prefixes, unit[0]); p && *p) {
        int power = int(p - prefixes) + 1;
        std::string rest = unit.substr(1);
        if (rest.empty() || rest == "ib") multiplier = std::pow(1024.0L, power);
        else if (rest == "b") multiplier = std::pow(1000.0L, power);
    }
    if (multiplier == 0) return fail("unknown unit");
    long double value = std::stold(digits) * multiplier;
    if (!(value < 18446744073709551616.0L)) return fail("too large");
    return uint64_t(value);
}

std::string byte_size_text(uint64_t bytes) {
    static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    uint64_t scale = 1;
    while (u < 4 && bytes >= scale * 1024) {
        scale *= 1024;
        u++;
    }
    if (u == 0) return std::to_string(bytes) + "B";
    uint64_t tenths = bytes / scale * 10 + (bytes % scale * 10 + scale - 1) / scale;  // rounded up
    if (tenths % 10 == 0) return std::to_string(tenths / 10) + units[u];
    return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + units[u];
}

std::string byte_size_display(uint64_t bytes, int decimals) {
    static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double value = double(bytes);
    int u = 0;
    while (value >= 1024.0 && u < 4) {
        value /= 1024.0;
        u++;
    }
    return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.{}f} {}", value, decimals, units[u]);
}

}  // namespace kvlm
