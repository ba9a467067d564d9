// Internal assertion reporting and OS error texts.
#include "util/error.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kvlm {

std::string os_error_text(int err) {
    std::string text = std::strerror(err);
    switch (err) {
        case ENOSPC: return text + " (ENOSPC: the disk is full)";
        case EFBIG: return text + " (EFBIG: over the file size limit, see ulimit -f)";
        case EDQUOT: return text + " (EDQUOT: over the disk quota)";
        default: return text;
    }
}

void assertion_failed(const char* condition, const char* file, int line, const std::string& message) {
    std::fprintf(stderr, "kvlm: internal error at %s:%d: %s (%s)\n", file, line, message.c_str(), condition);
    std::abort();
}

}  // namespace kvlm
