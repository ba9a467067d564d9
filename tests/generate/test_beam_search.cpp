// Beam search (generate/beam_search.h) against tests/data/beam_reference.json: the same searches run by
// tools/reference/make_beam_reference.py - an independent float64 NumPy forward with a port of Hugging Face
// transformers 4.46.3's beam search (num_beams, length_penalty, early_stopping=False) - must pick the same
// tokens with the same score. Plus the KV accounting: beams share the prompt's blocks, and the pool holds
// nothing of a search once it returns.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "generate/beam_search.h"
#include "generate/generate.h"
#include "support/test_util.h"

using namespace kvlm;
using namespace kvlm::test;

namespace {

nlohmann::json reference() {
    const auto path = std::filesystem::path(__FILE__).parent_path().parent_path() / "data" / "beam_reference.json";
    std::ifstream in(path);
    REQUIRE_MESSAGE(in.good(), path.string());
    return nlohmann::json::parse(in);
}

void check_cases(const std::string& model_path, const nlohmann::json& cases) {
    EngineOptions options = quiet_cpu_engine();
    options.n_ctx = 256;
    options.n_spare_blocks = 7 * (256 / 16 + 1);  // up to 8 beams of up to the whole context
    Engine engine(model_path, options);
    for (const auto& c : cases) {
        const std::vector<int32_t> prompt = c["prompt_ids"].get<std::vector<int32_t>>();
        BeamOptions beam;
        beam.n_beams = c["n_beams"].get<int32_t>();
        beam.length_penalty = c["length_penalty"].get<float>();
        beam.n_predict = c["max_new_tokens"].get<int32_t>();
        CAPTURE(beam.n_beams);
        CAPTURE(beam.length_penalty);
        Sequence seq;
        Prefill p = prefill(engine, seq, prompt);
        BeamResult r = beam_search(engine, seq, p.logits, beam);
        CHECK(r.tokens == c["tokens"].get<std::vector<int32_t>>());
        const double want = c["score"].get<double>();
        CHECK(std::abs(r.score - want) <= 1e-4 * std::max(1.0, std::abs(want)));
        CHECK(r.stop_reason == (c["ended"].get<bool>() ? StopReason::end_of_generation : StopReason::token_limit));
        engine.prefix_cache().evict_unreferenced();
        CHECK(engine.pool().n_used() == 0);  // the prompt's and every beam's blocks released
    }
}

}  // namespace

TEST_CASE("beam search: stories260K picks Hugging Face's hypotheses (float64 reference), every length penalty") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    check_cases(converted_model("stories-gguf", {data_path("stories260K/stories260K.gguf")}),
                reference()["models"]["stories260K"]["cases"]);
}

TEST_CASE("smollm2: beam search ends hypotheses at <|im_end|> as Hugging Face does (float64 reference)") {
    const char* model = "models/cache/smollm2-135m-instruct.kvlm";
    if (!have_data(model)) return;
    const nlohmann::json ref = reference();
    REQUIRE(ref["models"].contains("smollm2"));
    check_cases(model, ref["models"]["smollm2"]["cases"]);
}

TEST_CASE("beam search: beams share the prompt's blocks; --beams from the CLI, and what it refuses") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    const std::string model = converted_model("stories-gguf", {data_path("stories260K/stories260K.gguf")});
    // A 60-token prompt (3 full blocks of 16) and 4 beams: the full prompt blocks are held once.
    Engine engine(model, quiet_cpu_engine());
    std::vector<int32_t> prompt = {1};
    for (int i = 0; prompt.size() < 60; i++) prompt.push_back(int32_t(3 + (i * 29) % 500));
    Sequence seq;
    Prefill p = prefill(engine, seq, prompt);
    BeamOptions beam;
    beam.n_beams = 4;
    beam.n_predict = 20;
    BeamResult r = beam_search(engine, seq, p.logits, beam);
    CHECK(r.tokens.size() == 20);
    CHECK(r.independent_blocks == 4 * 5);  // 80 tokens: 5 blocks per separate cache
    CHECK_MESSAGE(r.peak_blocks <= 3 + 4 * 2, r.peak_blocks);  // shared prompt + each beam's own last blocks

    CliResult cli = run_kvlm({"run", "-m", model, "-p", "Once upon a time", "-n", "30", "--beams", "3", "-v"});
    REQUIRE_MESSAGE(cli.exit_code == 0, cli.err);
    CHECK(!cli.out.empty());
    CHECK_MESSAGE(contains(cli.err, "beam search: 3 beams"), cli.err);
    CHECK(run_kvlm({"run", "-m", model, "-p", "Once upon a time", "-n", "30", "--beams", "3", "--temp", "0"}).out ==
          cli.out);
    CliResult sampled = run_kvlm({"run", "-m", model, "-p", "x", "-n", "5", "--beams", "2", "--top-k", "5"});
    CHECK(sampled.exit_code != 0);
    CHECK_MESSAGE(contains(sampled.err, "--beams is deterministic"), sampled.err);
    CliResult samples = run_kvlm({"run", "-m", model, "-p", "x", "-n", "5", "--beams", "2", "--samples", "2"});
    CHECK(samples.exit_code != 0);
    CHECK_MESSAGE(contains(samples.err, "--beams cannot be combined with --samples"), samples.err);
    CliResult unbounded = run_kvlm({"run", "-m", model, "-p", "x", "--beams", "2"});
    CHECK(unbounded.exit_code != 0);
    CHECK_MESSAGE(contains(unbounded.err, "--beams needs -n"), unbounded.err);
    CliResult penalty = run_kvlm({"run", "-m", model, "-p", "x", "--length-penalty", "2"});
    CHECK(penalty.exit_code != 0);
    CHECK_MESSAGE(contains(penalty.err, "--length-penalty is only used with --beams"), penalty.err);
}
