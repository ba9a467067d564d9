// Standard output, checked: model text and requested reports go to stdout, and a write that fails (a full
// disk, /dev/full, a closed descriptor) is an Error naming the cause instead of an exit 0 with lost output.
// A closed pipe still ends the process quietly through SIGPIPE, as for any filter.
#pragma once
#include <string_view>

#include "util/error.h"

namespace kvlm {

// A failed write to stdout; error_number is the errno (EPIPE: the reader went away).
class OutputError : public Error {
public:
    OutputError(const std::string& message, int error_number) : Error(message), error_number(error_number) {}
    int error_number;
};

// Writes `text` to stdout and flushes it (streamed text must reach a pipe as it is generated).
// Throws OutputError("writing output: <reason>").
void write_stdout(std::string_view text);

// After a failed write was reported in full (the reader went away, the turn was saved and said so):
// finish_stdout then checks nothing, and what stdout still buffers is dropped.
void abandon_stdout();

// Flushes stdout and checks that no earlier write to it (printf included) failed. Call once before a
// command reports success. Throws OutputError("writing output: <reason>").
void finish_stdout();

}  // namespace kvlm
