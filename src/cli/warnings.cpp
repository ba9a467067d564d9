// Warnings the subcommands print about user text, in one wording.
#include <cstdio>

#include "cli/cli.h"
#include "tokenizer/tokenizer.h"

namespace kvlm {

void warn_dropped_bytes(const Tokenizer& tokenizer, std::string_view text, std::string_view what) {
    if (std::string w = tokenizer.dropped_bytes_warning(text, what); !w.empty())
        std::fprintf(stderr, "kvlm: warning: %s\n", w.c_str());
}

}  // namespace kvlm
