// Error types and checks. Bad input (files, flags, sessions) throws kvlm::Error with a message
// naming the thing, what was expected and what was found; broken internal invariants use KVLM_ASSERT.
#pragma once
#include <fmt/format.h>
#include <stdexcept>
#include <string>

namespace kvlm {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// throw_error("{}: tensor {} has shape {}, expected {}", path, name, got, want)
template <typename... Args>
[[noreturn]] void throw_error(fmt::format_string<Args...> format, Args&&... args) {
    throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// strerror(err), plus what it means for the user where that is not obvious: "File too large (EFBIG: a file
// size limit, see ulimit -f)", "No space left on device (ENOSPC: the disk is full)".
std::string os_error_text(int err);

[[noreturn]] void assertion_failed(const char* condition, const char* file, int line, const std::string& message);

}  // namespace kvlm

// Internal invariant (never used on file contents or user input).
#define KVLM_ASSERT(condition, message)                                                   \
    do {                                                                                  \
        if (!(condition)) ::kvlm::assertion_failed(#condition, __FILE__, __LINE__, message); \
    } while (0)
