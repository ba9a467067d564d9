// Checked stdout writes (see output.h).
#include "util/output.h"

#include <cerrno>
#include <cstdio>

#include "util/error.h"

namespace kvlm {

namespace {

bool g_abandoned = false;

[[noreturn]] void throw_output_error(int error_number) {
    throw OutputError(fmt::format("writing output: {}", error_number ? os_error_text(error_number)
                                                                    : "the output stream reported an error"),
                      error_number);
}

}  // namespace

void write_stdout(std::string_view text) {
    errno = 0;
    if (!text.empty() && std::fwrite(text.data(), 1, text.size(), stdout) != text.size()) throw_output_error(errno);
    if (std::fflush(stdout) != 0) throw_output_error(errno);
}

void abandon_stdout() {
    g_abandoned = true;
    std::fflush(stdout);  // fails again; what it could not write is dropped from the buffer
    std::clearerr(stdout);
}

void finish_stdout() {
    if (g_abandoned) return;
    errno = 0;
    // glibc keeps what a failed write could not place, so this flush fails again with the real cause.
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) throw_output_error(errno);
}

}  // namespace kvlm
