// Standard output, checked: model text and requested reports go to stdout, and a write that fails (a full
// disk, /dev/full, a closed descriptor) is an Error naming the cause instead of an exit 0 with lost output.
// A closed pipe still ends the process quietly through SIGPIPE, as for any filter.
#pragma once
#include <string_view>

namespace kvlm {

// Writes `text` to stdout and flushes it (streamed text must reach a pipe as it is generated).
// Throws Error("writing output: <reason>").
void write_stdout(std::string_view text);

// Flushes stdout and checks that no earlier write to it (printf included) failed. Call once before a
// command reports success. Throws Error("writing output: <reason>").
void finish_stdout();

}  // namespace kvlm
