// `kvlm run --samples N` through the real binary on stories260K: N completions separated by the
// documented "\n--- sample i ---\n" line, sample i equal to a plain run seeded seed + i - 1 (the samples
// decode side by side), greedy samples all equal, and --verbose showing the prompt prefilled once and
// reused by the other samples.
#include <doctest/doctest.h>

#include <regex>
#include <string>
#include <vector>

#include "support/test_util.h"

using namespace kvlm::test;

namespace {

std::string stories_kvlm() { return converted_model("stories-gguf", {data_path("stories260K/stories260K.gguf")}); }

CliResult run(const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"run", "-m", stories_kvlm()};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_kvlm(args);
}

// Splits stdout at the "\n--- sample i ---\n" separators (i = 2, 3, ...).
std::vector<std::string> split_samples(const std::string& out) {
    std::vector<std::string> samples;
    size_t start = 0;
    for (int i = 2;; i++) {
        std::string separator = "\n--- sample " + std::to_string(i) + " ---\n";
        size_t at = out.find(separator, start);
        if (at == std::string::npos) break;
        samples.push_back(out.substr(start, at - start));
        start = at + separator.size();
    }
    samples.push_back(out.substr(start));
    return samples;
}

size_t count(const std::string& text, const std::string& needle) {
    size_t n = 0;
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) n++;
    return n;
}

}  // namespace

TEST_CASE("run --samples: N completions of one prefilled prompt, the first equal to a plain run") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    // A 21-token prompt with block size 8: forks share two full blocks and a partial one.
    std::vector<std::string> common = {"-p", "Once upon a time, there was a little dog named Max. He",
                                       "-n", "30", "--temp", "1.0", "--seed", "42", "--block-size", "8"};
    auto with = [&](std::vector<std::string> extra) {
        extra.insert(extra.begin(), common.begin(), common.end());
        return run(extra);
    };
    CliResult plain = with({"-q"});
    CliResult three = with({"--samples", "3", "--verbose"});
    REQUIRE(plain.exit_code == 0);
    REQUIRE_MESSAGE(three.exit_code == 0, three.err);
    std::vector<std::string> samples = split_samples(three.out);
    REQUIRE(samples.size() == 3);
    CHECK(samples[0] == plain.out);
    CHECK(!samples[1].empty());
    CHECK((samples[1] != samples[0] || samples[2] != samples[0]));  // other seeds, other text

    // Sample i is seeded seed + i - 1: sample 2 equals a plain run with seed 43.
    std::vector<std::string> seed43 = common;
    seed43[seed43.size() - 3] = "43";
    seed43.push_back("-q");
    CHECK(samples[1] == run(seed43).out);
    // The samples decode side by side (one forward per step for all, cli/run.cpp samples_together), each
    // exactly as alone: sample 3 is a plain run with seed 44.
    std::vector<std::string> seed44 = seed43;
    seed44[seed44.size() - 4] = "44";
    CHECK(samples[2] == run(seed44).out);

    // Prefilled once, reused by the others.
    CHECK_MESSAGE(count(three.err, " prefilled in") == 3, three.err);
    CHECK_MESSAGE(three.err.find("sample 1: ") != std::string::npos, three.err);
    CHECK_MESSAGE(count(three.err, "0 reused from the pool, 0 restored from disk, 0 prefilled") == 0, three.err);
    std::string tokens_line = three.err.substr(three.err.find("sample 1: "));
    size_t at = tokens_line.find("prompt ");
    int n_prompt = std::stoi(tokens_line.substr(at + 7));
    REQUIRE(n_prompt > 16);
    std::string first = "prompt " + std::to_string(n_prompt) + " tokens: 0 reused from the pool, 0 restored from disk, " +
                        std::to_string(n_prompt) + " prefilled";
    std::string later = "prompt " + std::to_string(n_prompt) + " tokens: " + std::to_string(n_prompt) +
                        " reused from the pool, 0 restored from disk, 0 prefilled";
    CHECK_MESSAGE(count(three.err, first) == 1, three.err);
    CHECK_MESSAGE(count(three.err, later) == 2, three.err);
    // -v adds the batch's aggregate rate (each sample's own line divides its tokens by the batch's time).
    std::smatch m;
    REQUIRE_MESSAGE(std::regex_search(three.err, m, std::regex("3 samples side by side \\(one forward per step for all of "
                                                               "them\\): ([0-9]+) tokens in [0-9.]+ s, [0-9.]+ tok/s in all")),
                    three.err);
    CHECK(std::stoi(m[1].str()) == 90);  // 3 x -n 30 (stories260K does not end its stories early)
}

TEST_CASE("run --samples without -n: each sample is its solo run, however alike they begin") {
    // Samples run in turn and each goes to a full context. Samples that begin alike fill their first blocks with
    // the same tokens; the copies an earlier sample cached must not stay pinned in a pool sized for one
    // context (sample 2 stopped at 47 of 63 tokens: "KV cache full").
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    const std::vector<std::string> common = {"-p", "Once", "-c", "64", "--temp", "0.8"};
    auto with = [&](std::vector<std::string> extra) {
        extra.insert(extra.begin(), common.begin(), common.end());
        return run(extra);
    };
    CliResult three = with({"--samples", "3", "--seed", "1"});
    REQUIRE_MESSAGE(three.exit_code == 0, three.err);
    CHECK_MESSAGE(three.err.find("KV cache full") == std::string::npos, three.err);
    CHECK(count(three.err, "context full") == 3);
    const std::vector<std::string> samples = split_samples(three.out);
    REQUIRE(samples.size() == 3);
    for (int i = 0; i < 3; i++) {
        CAPTURE(i);
        CHECK(samples[size_t(i)] == with({"--seed", std::to_string(1 + i), "-q"}).out);
    }
}

TEST_CASE("run --samples and --beams: the pool is sized for at most a context per sequence, in 64 bits") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    // -n past int32's blocks: sized as -n of the context (it overflowed to "n_spare_blocks = -268435451").
    CliResult huge_n = run({"-p", "Once", "--samples", "3", "-n", "2147483647", "-c", "64", "--temp", "0.8"});
    REQUIRE_MESSAGE(huge_n.exit_code == 0, huge_n.err);
    CHECK(count(huge_n.err, "context full") == 3);
    CHECK(split_samples(huge_n.out).size() == 3);
    // 64 beams of -n 1000000 on a 64-token context: 64 contexts' worth of blocks, not a million tokens each.
    CliResult beams = run({"-p", "Once", "--beams", "64", "-n", "1000000", "-c", "64", "-v"});
    REQUIRE_MESSAGE(beams.exit_code == 0, beams.err);
    CHECK_MESSAGE(beams.err.find("| stop: context full") != std::string::npos,
                  beams.err);
    // A pool past what kvlm can address names the flag to lower, and exits non-zero.
    CliResult too_many = run({"-p", "Once", "--samples", "100000000", "-n", "2048"});
    CHECK(too_many.exit_code != 0);
    CHECK(too_many.out.empty());
    CHECK_MESSAGE(too_many.err.find("--samples 100000000 with up to 2048 new tokens each needs a KV pool of") !=
                      std::string::npos,
                  too_many.err);
    CHECK_MESSAGE(too_many.err.find("lower --samples or -n") != std::string::npos, too_many.err);
    // A pool fixed by --kv-mem: more samples than its blocks are refused before any fork (the probe's hang).
    CliResult past_pool = run({"-p", "Once", "--samples", "100000000", "-n", "100", "--kv-mem", "1MiB"});
    CHECK(past_pool.exit_code != 0);
    CHECK(past_pool.out.empty());
    CHECK_MESSAGE(past_pool.err.find("--samples 100000000: the KV pool holds ") != std::string::npos, past_pool.err);
    CHECK_MESSAGE(past_pool.err.find("lower --samples or raise --kv-mem") != std::string::npos, past_pool.err);
}

TEST_CASE("run --samples: greedy samples are all equal; bad counts are errors") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    CliResult greedy = run({"-p", "Lily", "-n", "20", "--temp", "0", "--samples", "4", "-q"});
    REQUIRE(greedy.exit_code == 0);
    std::vector<std::string> samples = split_samples(greedy.out);
    REQUIRE(samples.size() == 4);
    for (const std::string& s : samples) CHECK(s == samples[0]);
    CHECK(samples[0] == run({"-p", "Lily", "-n", "20", "--temp", "0", "-q"}).out);

    // Samples running into a full context each stop there, like a plain run.
    CliResult full = run({"-p", "", "-n", "100", "--temp", "0", "-c", "32", "--samples", "2"});
    REQUIRE(full.exit_code == 0);
    CHECK(count(full.err, "context full") == 2);
    samples = split_samples(full.out);
    REQUIRE(samples.size() == 2);
    CHECK(samples[0] == samples[1]);

    CliResult zero = run({"-p", "x", "--samples", "0"});
    CHECK(zero.exit_code != 0);
    CHECK(zero.out.empty());
    CHECK(zero.err.find("--samples") != std::string::npos);
}
