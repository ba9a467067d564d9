// `kvlm bench`: the cost model behind GB/s and TFLOP/s (hand-computed on a small shape), and the CLI on
// stories260K: JSON and markdown carry every planned test with positive rates, the scenarios show the
// cache and the session doing less work than a recompute, and bad flags are refused.
#include <doctest/doctest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "generate/bench.h"
#include "support/test_util.h"

using namespace kvlm;
using namespace kvlm::test;

namespace {

std::string stories_kvlm() { return converted_model("stories-gguf", {data_path("stories260K/stories260K.gguf")}); }

ModelConfig small_config() {
    ModelConfig c;
    c.n_vocab = 100;
    c.n_embd = 8;
    c.n_layers = 2;
    c.n_heads = 2;
    c.n_kv_heads = 1;
    c.head_dim = 4;
    c.n_ff = 16;
    c.n_ctx = 64;
    return c;
}

}  // namespace

TEST_CASE("bench: prefill FLOPs count every matmul per token, the head once, and causal attention") {
    ModelConfig c = small_config();
    // Per layer: q 8x8, k 8x4, v 8x4, o 8x8, gate/up/down 3 x 8x16 = 64+32+32+64+384 = 576 weights.
    const double per_token = 2.0 * 576 * 2;
    const double head = 2.0 * 8 * 100;
    // 3 tokens at depth 0 attend to 1+2+3 = 6 positions; 4 FLOPs x q_width 8 x 2 layers each.
    CHECK(prefill_flops(c, 3, 0) == doctest::Approx(3 * per_token + head + 4.0 * 8 * 6 * 2));
    // At depth 10 each of the 3 tokens also attends to 10 cached positions.
    CHECK(prefill_flops(c, 3, 10) == doctest::Approx(3 * per_token + head + 4.0 * 8 * (6 + 30) * 2));
}

TEST_CASE("bench: decode bytes are the weights once plus the KV read and written") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    std::string model_path = stories_kvlm();
    auto model = ModelFile::open(model_path);
    const ModelConfig& c = model->config();
    double weights = 0;
    for (const TensorInfo& t : model->tensors()) weights += double(t.n_bytes);
    const double embd_row = double(model->find("token_embd.weight")->n_bytes) / c.n_vocab;
    const double expected_weights = c.tied_embeddings ? weights + embd_row
                                                      : weights - double(model->find("token_embd.weight")->n_bytes) + embd_row;
    const double kv_token = double(kv_bytes_per_token(c, DType::f32));
    CHECK(decode_step_bytes(*model, DType::f32, 1) == doctest::Approx(expected_weights + kv_token));
    CHECK(decode_step_bytes(*model, DType::f32, 100) - decode_step_bytes(*model, DType::f32, 1) ==
          doctest::Approx(99 * kv_token));
}

TEST_CASE("bench: summary mean and sample standard deviation") {
    Summary s = summarize({2, 4, 4, 4, 5, 5, 7, 9});
    CHECK(s.n == 8);
    CHECK(s.mean == doctest::Approx(5.0));
    CHECK(s.stddev == doctest::Approx(2.13809).epsilon(1e-4));
    CHECK(summarize({3}).stddev == 0);
}

TEST_CASE("bench: kvlm bench -o json reports every test and the cache scenarios on stories260K") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    std::string model = stories_kvlm();
    CliResult r = run_kvlm({"bench", "-m", model, "-p", "40,24", "-n", "8", "-d", "0,20", "-r", "2", "-o", "json",
                            "--device", "cpu"});
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    nlohmann::json j = nlohmann::json::parse(r.out);  // stdout is only the JSON
    std::vector<std::string> tests;
    for (const auto& row : j.at("results")) {
        tests.push_back(row.at("test"));
        CHECK(row.at("tokens_per_second").at("mean").get<double>() > 0);
        CHECK(row.at("tokens_per_second").at("n").get<int>() == 2);
        if (row.at("kind") == "decode") CHECK(row.at("gb_per_second").get<double>() > 0);
        if (row.at("kind") == "prefill") CHECK(row.at("tflops").get<double>() > 0);
    }
    CHECK(tests == std::vector<std::string>{"pp40", "pp24", "tg8", "pp40 @ d20", "pp24 @ d20", "tg8 @ d20"});
    CHECK(j.at("backend").get<std::string>().rfind("cpu", 0) == 0);
    CHECK(j.at("kv_dtype") == "f32");          // --kv-dtype auto on the CPU
    CHECK(j.at("n_threads").get<int>() >= 1);  // the threads used, not the flag's 0

    std::map<std::string, nlohmann::json> scenarios;
    for (const auto& s : j.at("scenarios")) scenarios[s.at("name")] = s;
    REQUIRE(scenarios.size() == 5);
    CHECK(scenarios.at("prefix cache miss").at("n_computed") == 40);
    CHECK(scenarios.at("prefix cache hit").at("n_computed").get<int>() < 40);
    CHECK(scenarios.at("session recompute").at("n_computed") == 40);
    CHECK(scenarios.at("session restore").at("n_computed").get<int>() <= 16);  // at most one block
    CHECK(scenarios.at("session restore").at("restore_gb_per_second").get<double>() > 0);
    CHECK(scenarios.at("session restore").at("note").get<std::string>().find(" GB/s") != std::string::npos);
    CHECK(scenarios.at("cold start").at("seconds").at("mean").get<double>() > 0);
}

TEST_CASE("bench: markdown table by default, scenarios optional") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    std::string model = stories_kvlm();
    CliResult r = run_kvlm({"bench", "-m", model, "-p", "16", "-n", "4", "-r", "1", "--no-scenarios", "--device", "cpu"});
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(r.out.find("| model | size | params | backend | test | t/s |") == 0);
    CHECK(r.out.find("| pp16 |") != std::string::npos);
    CHECK(r.out.find("| tg4 |") != std::string::npos);
    CHECK(r.out.find("scenario") == std::string::npos);
}

TEST_CASE("bench: bad plans are refused with the flag named") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    std::string model = stories_kvlm();
    struct Case {
        std::vector<std::string> args;
        std::string message;
    };
    std::vector<Case> cases = {
        {{"-o", "xml"}, "-o: 'xml' is not an output format"},
        {{"-r", "0"}, "-r: 0 repetitions"},
        {{"-d", "-1"}, "-d: -1 is not a valid token count"},
        {{"-p", "-5"}, "-p: -5 is not a valid token count"},
        {{"-p", "100000"}, "more than the model's"},
        {{"--device", "cuda"}, "cuda"},
    };
    for (const Case& c : cases) {
        std::vector<std::string> args = {"bench", "-m", model, "-p", "8", "-n", "2", "--no-scenarios"};
        args.insert(args.end(), c.args.begin(), c.args.end());
        if (c.args[0] != "-r") args.insert(args.end(), {"-r", "1"});
        CliResult r = run_kvlm(args);
        INFO(r.err);
        CHECK(r.exit_code != 0);
        CHECK(r.out.empty());
        CHECK(r.err.find(c.message) != std::string::npos);
    }
}
