// The release binary itself: it links no test code (the CUDA test API of cuda/testing/ goes only into the
// test binaries).
#include <doctest/doctest.h>

#include <string>

#include "support/test_util.h"

using namespace kvlm::test;

TEST_CASE("release binary: kvlm links none of the CUDA test API") {
    // `nm -C` names every symbol with its namespace; the test API is kvlm::cuda_test. The first count shows
    // that nm read the binary's symbols at all.
    CliResult all = run_shell("nm -C " + kvlm_command({}) + " | grep -c 'kvlm::'");
    REQUIRE_MESSAGE(all.exit_code == 0, all.err);
    CHECK(std::stol(all.out) > 1000);
    CliResult test_api = run_shell("nm -C " + kvlm_command({}) + " | grep 'kvlm::cuda_test::' | head -5");
    REQUIRE_MESSAGE(test_api.exit_code == 0, test_api.err);
    CHECK_MESSAGE(test_api.out.empty(), "test API symbols in the release binary:\n" << test_api.out);
}
