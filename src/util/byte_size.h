// Human byte sizes for flags and messages (--kv-mem, --session-quota, "raise --kv-mem to 160KiB").
#pragma once
#include <cstdint>
#include <string>

namespace kvlm {

// "512MiB", "4GiB", "1000000" (bytes) -> bytes; throws Error naming the flag on bad input.
uint64_t parse_byte_size(const std::string& text, const char* flag_name);
// bytes -> "96KiB", "1.3GiB": rounded up to one decimal, so parse_byte_size of it is at least `bytes`.
std::string byte_size_text(uint64_t bytes);
// bytes -> "123 B", "97.3 KiB" (decimals 1), "8.00 KiB" (decimals 2): for listings (inspect, session ls), not
// for flags.
std::string byte_size_display(uint64_t bytes, int decimals);

}  // namespace kvlm
