// Internal assertion reporting.
#include "error.h"

#include <cstdio>
#include <cstdlib>

namespace kvlm {

void assertion_failed(const char* condition, const char* file, int line, const std::string& message) {
    std::fprintf(stderr, "kvlm: internal error at %s:%d: %s (%s)\n", file, line, message.c_str(), condition);
    std::abort();
}

}  // namespace kvlm
