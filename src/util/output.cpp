// Checked stdout writes (see output.h).
#include "util/output.h"

#include <cerrno>
#include <cstdio>

#include "util/error.h"

namespace kvlm {

namespace {

[[noreturn]] void throw_output_error(int error_number) {
    throw_error("writing output: {}", error_number ? os_error_text(error_number) : "the output stream reported an error");
}

}  // namespace

void write_stdout(std::string_view text) {
    errno = 0;
    if (!text.empty() && std::fwrite(text.data(), 1, text.size(), stdout) != text.size()) throw_output_error(errno);
    if (std::fflush(stdout) != 0) throw_output_error(errno);
}

void finish_stdout() {
    errno = 0;
    // glibc keeps what a failed write could not place, so this flush fails again with the real cause.
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) throw_output_error(errno);
}

}  // namespace kvlm
