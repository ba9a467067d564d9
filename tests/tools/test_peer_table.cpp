// bench/peer_table.py, the table of tools/gpu_session.sh's peer stage: llama-bench's JSON and kvlm bench's
// JSON of the same tests become one row per test (by depth, prefill before decode) with kvlm / llama.cpp; a
// test that only one engine ran is an error naming both sets, never a row with a blank or a wrong pairing.
#include <doctest/doctest.h>

#include <string>

#include "support/test_util.h"

using namespace kvlm::test;

namespace {

// llama-bench -o json: one object per test (fields it writes beside these left out).
const char* kLlamaBench = R"([
  {"model_type": "llama 135M BF16", "n_prompt": 512, "n_gen": 0, "n_depth": 0, "avg_ts": 40000.0, "stddev_ts": 100.0},
  {"model_type": "llama 135M BF16", "n_prompt": 0, "n_gen": 128, "n_depth": 0, "avg_ts": 1000.0, "stddev_ts": 2.5},
  {"model_type": "llama 135M BF16", "n_prompt": 512, "n_gen": 0, "n_depth": 4096, "avg_ts": 20000.0, "stddev_ts": 50.0},
  {"model_type": "llama 135M BF16", "n_prompt": 0, "n_gen": 128, "n_depth": 4096, "avg_ts": 800.0, "stddev_ts": 1.0}
])";

std::string kvlm_result(int depth, const std::string& kind, int n, double mean, double sd) {
    const std::string test = (kind == "prefill" ? "pp" : "tg") + std::to_string(n) +
                             (depth ? " @ d" + std::to_string(depth) : "");
    return R"({"depth": )" + std::to_string(depth) + R"(, "kind": ")" + kind + R"(", "n_tokens": )" +
           std::to_string(n) + R"(, "test": ")" + test + R"(", "tokens_per_second": {"mean": )" +
           std::to_string(mean) + R"(, "n": 3, "stddev": )" + std::to_string(sd) + "}}";
}

CliResult table(const TempDir& dir, const std::string& kvlm_results, const char* extra = "") {
    write_file(dir.file("llama.json"), kLlamaBench);
    write_file(dir.file("kvlm.json"), R"({"backend": "cuda", "results": [)" + kvlm_results + "]}");
    return run_shell("python3 bench/peer_table.py smollm2 " + shell_quote(dir.file("llama.json")) + " " +
                     shell_quote(dir.file("kvlm.json")) + " " + extra);
}

}  // namespace

TEST_CASE("tools: peer_table pairs llama-bench and kvlm bench by test and depth") {
    TempDir dir;
    // kvlm lists decode before prefill and the deep tests first: the table orders by depth, pp then tg.
    const std::string results = kvlm_result(4096, "decode", 128, 1200.0, 3.0) + "," +
                                kvlm_result(4096, "prefill", 512, 10000.0, 10.0) + "," +
                                kvlm_result(0, "decode", 128, 1500.0, 2.0) + "," +
                                kvlm_result(0, "prefill", 512, 50000.0, 500.0);
    CliResult r = table(dir, results, "--header");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(r.out ==
          "| model | test | llama.cpp t/s | kvlm t/s | kvlm / llama.cpp |\n"
          "| --- | --- | ---: | ---: | ---: |\n"
          "| smollm2 | pp512 | 40,000.0 ± 100.0 | 50,000.0 ± 500.0 | 1.25 |\n"
          "| smollm2 | tg128 | 1,000.0 ± 2.5 | 1,500.0 ± 2.0 | 1.50 |\n"
          "| smollm2 | pp512 @ d4096 | 20,000.0 ± 50.0 | 10,000.0 ± 10.0 | 0.50 |\n"
          "| smollm2 | tg128 @ d4096 | 800.0 ± 1.0 | 1,200.0 ± 3.0 | 1.50 |\n");
    CliResult plain = table(dir, results);  // without --header: rows only, to append to a table
    CHECK(plain.out.find("| model |") == std::string::npos);
    CHECK(contains(plain.out, "| smollm2 | tg128 | 1,000.0"));
}

TEST_CASE("tools: peer_table refuses tests that only one engine ran") {
    TempDir dir;
    CliResult r = table(dir, kvlm_result(0, "decode", 128, 1500.0, 2.0) + "," +
                                 kvlm_result(0, "prefill", 512, 50000.0, 500.0));
    CHECK(r.exit_code != 0);
    CHECK(r.out.empty());
    CHECK(contains(r.err, "llama.cpp ran pp512, tg128, pp512 @ d4096, tg128 @ d4096; kvlm ran pp512, tg128"));
    write_file(dir.file("broken.json"), "[{\"n_prompt\": 512");
    CliResult broken = run_shell("python3 bench/peer_table.py m " + shell_quote(dir.file("broken.json")) + " " +
                                 shell_quote(dir.file("kvlm.json")));
    CHECK(broken.exit_code != 0);
    CHECK(contains(broken.err, "peer_table: error"));
}
