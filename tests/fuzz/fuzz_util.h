// Shared pieces of the libFuzzer targets (tests/fuzz/fuzz_*.cpp, docs/FUZZING.md). kvlm's parsers read
// paths, so each input is written to a per-process scratch file on tmpfs first. A target catches only
// kvlm::Error - the documented way to refuse bad input; any other exception escapes, aborts, and
// libFuzzer reports it as a finding, as it does sanitizer reports, leaks, timeouts and huge allocations.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "import/convert.h"

namespace kvlm::fuzz {

// A directory private to this process (under /dev/shm when it exists), created on first use.
const std::string& scratch_dir();
// Writes the bytes to scratch_dir()/name (replacing it) and returns the path.
std::string write_scratch(const std::string& name, const uint8_t* data, size_t size);
std::string write_scratch(const std::string& name, std::string_view text);
// A file of the shared test data: $KVLM_TEST_DATA/relative, default ../shared/models; aborts with a
// message naming the path when it is missing (targets that need real files cannot run without them).
std::string test_data(const std::string& relative);

// The importers' end-to-end check: when `source` (already opened as `opened`) has at most 2^17 weights,
// converts it (with `tokenizer`, may be empty) to a scratch .kvlm and aborts, naming `target`, unless that
// file opens and verifies - the converter must never write a file kvlm refuses. Throws what convert throws.
void convert_if_small_and_verify(const ConvertSource& opened, const std::string& source, const std::string& tokenizer,
                                 const char* target);

}  // namespace kvlm::fuzz

// Runs `statement`, accepting a kvlm::Error as the parser refusing the input.
#define KVLM_FUZZ_ACCEPT_ERRORS(...) \
    try {                            \
        __VA_ARGS__;                 \
    } catch (const ::kvlm::Error&) { \
    }
