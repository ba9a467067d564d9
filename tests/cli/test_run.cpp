// `kvlm run` through the real binary on stories260K: the documented options (-m -p -n --temp --seed
// --top-k --top-p --min-p --repeat-penalty -t), stdin prompts, stdout carrying only model text, and
// clear errors (non-zero exit, message on stderr, nothing on stdout) for bad input.
#include <doctest/doctest.h>

#include <algorithm>
#include <regex>
#include <string>
#include <vector>

#include "support/test_util.h"

using namespace kvlm::test;

namespace {

std::string stories_kvlm() { return converted_model("stories-gguf", {data_path("stories260K/stories260K.gguf")}); }

CliResult run(const std::vector<std::string>& extra, const std::string& stdin_text = "") {
    std::vector<std::string> args = {"run", "-m", stories_kvlm()};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_kvlm(args, stdin_text);
}

void check_fails(const CliResult& r, const std::string& needle) {
    CHECK(r.exit_code != 0);
    CHECK(r.out.empty());
    CHECK_MESSAGE(r.err.find("error: ") != std::string::npos, r.err);
    CHECK_MESSAGE(r.err.find(needle) != std::string::npos, "stderr: " << r.err << "\nexpected: " << needle);
}

}  // namespace

TEST_CASE("run: -p \"\" starts from BOS and stdout carries only the text") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    std::string golden = read_file(data_path("stories260K/expected_t0_n200.txt"));
    CliResult r = run({"-p", "", "-n", "200", "--temp", "0", "--quiet"});
    REQUIRE(r.exit_code == 0);
    CHECK(r.out == golden);
    CHECK(r.err.empty());  // --quiet: nothing but errors
}

TEST_CASE("run: -n limits the tokens, -t does not change greedy output") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    CliResult ten = run({"-p", "", "-n", "10", "--temp", "0", "-q"});
    CliResult twenty = run({"-p", "", "-n", "20", "--temp", "0", "-q", "-t", "1"});
    REQUIRE(ten.exit_code == 0);
    REQUIRE(twenty.exit_code == 0);
    CHECK(ten.out.size() < twenty.out.size());
    CHECK(twenty.out.compare(0, ten.out.size(), ten.out) == 0);
    CHECK(twenty.out == run({"-p", "", "-n", "20", "--temp", "0", "-q", "-t", "2"}).out);
    CliResult zero = run({"-p", "Once", "-n", "0", "-q"});
    CHECK(zero.exit_code == 0);
    CHECK(zero.out.empty());
}

TEST_CASE("run: the prompt comes from stdin without -p, minus one trailing newline") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    CliResult piped = run({"-n", "30", "--temp", "0", "-q"}, "Once upon a time\n");
    CliResult flag = run({"-p", "Once upon a time", "-n", "30", "--temp", "0", "-q"});
    REQUIRE(piped.exit_code == 0);
    CHECK(!piped.out.empty());
    CHECK(piped.out == flag.out);
    CHECK(piped.out.rfind(", there was", 0) == 0);  // continues the prompt, prompt not echoed
}

TEST_CASE("run: sampling options - same seed same text, other seed other text") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    std::vector<std::string> sampling = {"-p", "Lily", "-n", "40", "--temp", "1.0", "--top-k", "40", "--top-p", "0.95",
                                         "--min-p", "0.05", "--repeat-penalty", "1.1", "-q"};
    auto with_seed = [&](const std::string& seed) {
        std::vector<std::string> args = sampling;
        args.insert(args.end(), {"--seed", seed});
        return run(args);
    };
    CliResult a = with_seed("42"), b = with_seed("42"), c = with_seed("43");
    REQUIRE(a.exit_code == 0);
    CHECK(a.out == b.out);
    CHECK(a.out != c.out);
    CliResult greedy = run({"-p", "Lily", "-n", "40", "--temp", "0", "-q"});
    // top-k 1 leaves only the argmax (without kvlm's default repeat penalty, which applies when sampling)
    CliResult top1 = run({"-p", "Lily", "-n", "40", "--temp", "1.5", "--top-k", "1", "--repeat-penalty", "1", "--seed",
                          "7", "-q"});
    CHECK(greedy.out == top1.out);
    CliResult top1_default_penalty = run({"-p", "Lily", "-n", "40", "--temp", "1.5", "--top-k", "1", "--seed", "7", "-q"});
    CHECK(top1_default_penalty.out ==
          run({"-p", "Lily", "-n", "40", "--temp", "0", "--repeat-penalty", "1.1", "-q"}).out);
    CliResult penalized = run({"-p", "Lily", "-n", "40", "--temp", "0", "--repeat-penalty", "1.5", "-q"});
    CHECK(penalized.exit_code == 0);
    CHECK(penalized.out != greedy.out);
}

TEST_CASE("run: each sampling value comes from its flag, else the model file's defaults, else kvlm's") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    std::string greedy_model = converted_model("stories-greedy-default", {data_path("stories260K/stories260K.gguf"),
                                                                          "--sampling", "temp=0,repeat-penalty=1.2"});
    CliResult info = run_kvlm({"inspect", greedy_model});
    CHECK_MESSAGE(contains(info.out, "sampling defaults: temp=0,repeat-penalty=1.2\n"), info.out);
    CHECK(contains(run_kvlm({"inspect", stories_kvlm()}).out, "sampling defaults: none (kvlm's apply)\n"));

    auto on = [](const std::string& model, std::vector<std::string> extra) {
        std::vector<std::string> args = {"run", "-m", model, "-p", "Lily", "-n", "40", "-v"};
        args.insert(args.end(), extra.begin(), extra.end());
        CliResult r = run_kvlm(args);
        CHECK_MESSAGE(r.exit_code == 0, r.err);
        return r;
    };
    // The model's greedy default: every seed gives the flags' equivalent.
    CliResult a = on(greedy_model, {"--seed", "1"}), b = on(greedy_model, {"--seed", "2"});
    CHECK(a.out == b.out);
    CHECK(a.out == on(stories_kvlm(), {"--temp", "0", "--repeat-penalty", "1.2"}).out);
    CHECK_MESSAGE(contains(a.err, "kvlm: sampling temp 0 (greedy), repeat-penalty 1.2, repeat-last-n 64 (from the "
                                  "model file: temp, repeat-penalty; kvlm's defaults: repeat-last-n), seed 1\n"),
                  a.err);
    // A flag overrides the model's value; the model's others stay.
    CliResult sampled = on(greedy_model, {"--temp", "1", "--seed", "3"});
    CHECK(sampled.out == on(stories_kvlm(), {"--temp", "1", "--repeat-penalty", "1.2", "--seed", "3"}).out);
    CHECK(sampled.out != a.out);
    CHECK_MESSAGE(contains(sampled.err, "(from flags: temp; the model file: repeat-penalty; kvlm's defaults: top-k, "
                                        "top-p, min-p, repeat-last-n)"),
                  sampled.err);
    // kvlm's defaults: temperature 0.8 with a mild repeat penalty; greedy without one.
    CliResult plain = on(stories_kvlm(), {"--seed", "3"});
    CHECK(plain.out == on(stories_kvlm(), {"--temp", "0.8", "--repeat-penalty", "1.1", "--seed", "3"}).out);
    CHECK(contains(plain.err, "sampling temp 0.8, top-k 40, top-p 0.95, min-p 0.05, repeat-penalty 1.1, repeat-last-n 64"));
    CHECK(contains(on(stories_kvlm(), {"--temp", "0"}).err, "sampling temp 0 (greedy), repeat-penalty 1 (off) (from "
                                                            "flags: temp; kvlm's defaults: repeat-penalty)"));
}

TEST_CASE("run: every CPU kernel path gives the same greedy text; KVLM_CPU_PATH picks one, the device line names it") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    const std::string q8 = converted_model("stories-q8_0", {data_path("stories260K/stories260K.gguf"), "--dtype", "q8_0"});
    for (const std::string& model : {stories_kvlm(), q8}) {
        CAPTURE(model);
        const std::vector<std::string> args = {"run", "-m", model, "-p", "Once upon a time", "-n", "40", "--temp", "0", "-v"};
        CliResult best = run_kvlm(args);
        REQUIRE(best.exit_code == 0);
        // -v also says where start-up went (issue 17's budget), the parts adding up to no more than the whole.
        std::smatch m;
        const std::regex load("kvlm: load ([0-9.]+) s: model file ([0-9.]+) s, tokenizer ([0-9.]+) s beside the "
                              "weights check ([0-9.]+) s, backend ([0-9.]+) s \\(KV pool [0-9.]+[KMG]?i?B\\)\n");
        REQUIRE_MESSAGE(std::regex_search(best.err, m, load), best.err);
        CHECK(std::stod(m[2]) + std::max(std::stod(m[3]), std::stod(m[4])) + std::stod(m[5]) <= std::stod(m[1]) + 0.002);
        for (const char* path : {"scalar", "avx2", "avx512"}) {
            CAPTURE(path);
            CliResult r = run_shell(std::string("KVLM_CPU_PATH=") + path + " " + kvlm_command(args));
            if (r.exit_code != 0) {  // a path this CPU lacks is refused by name, never run
                CHECK(r.err.find(std::string("KVLM_CPU_PATH=") + path + ": this CPU lacks the instructions") !=
                      std::string::npos);
                continue;
            }
            CHECK(r.out == best.out);
            CHECK(r.err.find(std::string("threads, ") + path) != std::string::npos);
        }
    }
    CliResult bogus = run_shell("KVLM_CPU_PATH=sse9 " + kvlm_command({"run", "-m", stories_kvlm(), "-p", "x", "-n", "1"}));
    check_fails(bogus, "KVLM_CPU_PATH=sse9: unknown path (expected scalar, avx2 or avx512)");
}

TEST_CASE("run: a prompt that starts with the BOS token's text gets no second BOS, and -v says so") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    CliResult plain = run({"-p", "Once upon a time", "-n", "20", "--temp", "0", "-v"});
    CliResult with_bos = run({"-p", "<s>Once upon a time", "-n", "20", "--temp", "0", "-v"});
    REQUIRE(plain.exit_code == 0);
    REQUIRE(with_bos.exit_code == 0);
    CHECK(with_bos.out == plain.out);
    CHECK(with_bos.err.find("the prompt starts with the BOS token <s>: no second one added") != std::string::npos);
    CHECK(plain.err.find("no second one added") == std::string::npos);
    // --no-special: "<s>" is plain text, after the one BOS kvlm adds.
    CliResult text = run({"-p", "<s>Once upon a time", "-n", "20", "--temp", "0", "-v", "--no-special"});
    REQUIRE(text.exit_code == 0);
    CHECK(text.err.find("no second one added") == std::string::npos);
}

TEST_CASE("run: --verbose reports stats on stderr only") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    CliResult quiet = run({"-p", "", "-n", "16", "--temp", "0", "-q"});
    CliResult verbose = run({"-p", "", "-n", "16", "--temp", "0", "--verbose"});
    REQUIRE(verbose.exit_code == 0);
    CHECK(verbose.out == quiet.out);
    for (const char* needle : {"device cpu", "prompt 1 tokens", "prefill", "decode", "KV blocks used", "logits hash",
                               "token probability: mean "})
        CHECK_MESSAGE(verbose.err.find(needle) != std::string::npos, verbose.err << " lacks " << needle);
}

TEST_CASE("run: generation stops at a full context and says so") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    CliResult r = run({"-p", "", "-n", "100", "--temp", "0", "-c", "32"});
    REQUIRE(r.exit_code == 0);
    CHECK(r.err.find("context full") != std::string::npos);
    CliResult small_pool = run({"-p", "", "-n", "100", "--temp", "0", "--kv-mem", "40KiB", "--block-size", "8"});
    REQUIRE(small_pool.exit_code == 0);
    CHECK_MESSAGE(small_pool.err.find("KV cache full") != std::string::npos, small_pool.err);
}

TEST_CASE("run: --kv-dtype f16/bf16 keeps the greedy text close to f32's; unknown types are refused") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    auto run = [](const std::string& kv_dtype) {
        return run_kvlm({"run", "-m", stories_kvlm(), "-p", "Once upon a time", "-n", "12", "--temp", "0", "-q", "--device",
                         "cpu", "--kv-dtype", kv_dtype});
    };
    CliResult f32 = run("f32");
    REQUIRE(f32.exit_code == 0);
    for (const char* type : {"f16", "bf16"}) {
        CAPTURE(type);
        CliResult r = run(type);
        REQUIRE_MESSAGE(r.exit_code == 0, r.err);
        // 12 tokens of stories260K have no near tie at 16-bit KV precision: the same text.
        CHECK(r.out == f32.out);
    }
    CliResult bad = run("q8");
    CHECK(bad.exit_code != 0);
    CHECK(bad.out.empty());
    CHECK(bad.err.find("--kv-dtype: 'q8' is not a KV-cache type (expected auto, f32, f16, bf16 or q8_0)") != std::string::npos);
    CliResult q4 = run("q4_0");  // a weight type, not a cache type
    CHECK(q4.exit_code != 0);
    CHECK(q4.err.find("--kv-dtype: 'q4_0' is not a KV-cache type") != std::string::npos);
    // stories260K's head_dim 8 holds no whole 32-element block.
    CliResult q8_0 = run("q8_0");
    CHECK(q8_0.exit_code != 0);
    CHECK(q8_0.out.empty());
    CHECK_MESSAGE(q8_0.err.find("--kv-dtype q8_0 needs head_dim a multiple of 32 (32-element blocks per head); this "
                                "model's head_dim is 8: use --kv-dtype f16") != std::string::npos,
                  q8_0.err);
}

TEST_CASE("run: --kv-mem N% sizes the pool from free memory, never below the context") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    auto run = [](const std::string& kv_mem) {
        return run_kvlm({"run", "-m", stories_kvlm(), "-p", "Once upon a time", "-n", "8", "--temp", "0", "-v", "-c",
                         "256", "--device", "cpu", "--kv-mem", kv_mem});
    };
    CliResult plain = run_kvlm({"run", "-m", stories_kvlm(), "-p", "Once upon a time", "-n", "8", "--temp", "0", "-q",
                                "--device", "cpu", "-c", "256"});
    REQUIRE(plain.exit_code == 0);
    CliResult r = run("0.5%");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(r.out == plain.out);
    std::smatch m;
    REQUIRE_MESSAGE(std::regex_search(r.err, m, std::regex(R"(KV pool: (\d+) blocks, (\d+) tokens, .* \(--kv-mem 0.5% of the free memory\))")),
                    r.err);
    // 0.5% of any machine that runs the tests is far more than 256 tokens of stories260K KV (2.5 KiB each).
    CHECK(std::stoll(m[2].str()) >= 256);
    CHECK(std::stoll(m[1].str()) * 16 == std::stoll(m[2].str()));
    for (const char* bad : {"0%", "101%", "x%", "%", "-5%"}) {
        CAPTURE(bad);
        CliResult e = run(bad);
        CHECK(e.exit_code != 0);
        CHECK(e.out.empty());
        CHECK(e.err.find("--kv-mem: '" + std::string(bad) + "' is not a percentage between 0 and 100") != std::string::npos);
    }
}

TEST_CASE("run: bad input is a clear error, never a truncation or a crash") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    std::string long_prompt;
    for (int i = 0; i < 200; i++) long_prompt += "Once upon a time ";
    check_fails(run({"-p", long_prompt, "-c", "64"}), "more than the context of 64 tokens");
    check_fails(run({"-p", "x", "-c", "100000"}), "exceeds the model's trained context");
    check_fails(run({"-p", "x", "--chat"}), "no chat template");
    check_fails(run({"-p", "x", "--system", "be brief"}), "--system needs --chat");
    check_fails(run({"-p", "x", "--device", "tpu"}), "unknown device 'tpu'");
    check_fails(run({"-p", "x", "--kv-mem", "lots"}), "--kv-mem");
    check_fails(run({"-p", "x", "--block-size", "0"}), "--block-size");
    check_fails(run({"-p", "x", "-n", "-5"}), "-n");
    check_fails(run_kvlm({"run", "-m", "/nonexistent/model.kvlm", "-p", "x"}), "/nonexistent/model.kvlm");
    CliResult missing_model = run_kvlm({"run", "-p", "x"});
    CHECK(missing_model.exit_code != 0);
    CHECK(missing_model.err.find("--model") != std::string::npos);
    CliResult bad_number = run({"-p", "x", "--temp", "hot"});
    CHECK(bad_number.exit_code != 0);
    CHECK(bad_number.out.empty());
}

TEST_CASE("run: on a terminal the answer's line ends before the notes on stderr, and at the end") {
    // `script` gives kvlm a terminal for stdout and stderr: the note of a run cut short came on the answer's
    // line ("...park. Onekvlm: stopped after 31 tokens").
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    auto on_terminal = [](const std::vector<std::string>& args) {
        return run_shell("script -q -c " + shell_quote(kvlm_command(args)) + " /dev/null");
    };
    CliResult cut = on_terminal({"run", "-m", stories_kvlm(), "-p", "Once", "-n", "600", "-c", "32", "--temp", "0"});
    REQUIRE_MESSAGE(cut.exit_code == 0, cut.out);
    CHECK_MESSAGE(contains(cut.out, "\r\nkvlm: stopped after 31 tokens: context full"), cut.out);
    CliResult plain = on_terminal({"run", "-m", stories_kvlm(), "-p", "Once", "-n", "5", "--temp", "0"});
    REQUIRE_MESSAGE(plain.exit_code == 0, plain.out);
    CHECK(plain.out.size() > 2);
    CHECK(plain.out.compare(plain.out.size() - 2, 2, "\r\n") == 0);
    // Not on a terminal: the text as the model wrote it, no newline added.
    CliResult piped = run({"-p", "Once", "-n", "5", "--temp", "0"});
    REQUIRE(piped.exit_code == 0);
    CHECK(piped.out.back() != '\n');
}
