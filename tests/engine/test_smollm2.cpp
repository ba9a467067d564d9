// Real-model tests: SmolLM2-135M-Instruct (Q4_1 GGUF fetched by `make models`) converted to .kvlm, against the
// independent float64 reference in tests/data/smollm2_reference.json (tools/reference/make_smollm2_reference.py).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compute/backend.h"
#include "format/model_file.h"
#include "kv/kv_pool.h"
#include "support/test_util.h"
#include "tokenizer/tokenizer.h"

using namespace kvlm;
using namespace kvlm::test;
using nlohmann::json;

namespace {

const char* kGguf = "models/cache/SmolLM2-135M-Instruct.Q4_1.gguf";

std::string reference_path() {
    return (std::filesystem::path(__FILE__).parent_path().parent_path() / "data" / "smollm2_reference.json").string();
}

const json& reference() {
    static const json j = json::parse(read_file(reference_path()));
    return j;
}

// "" when the GGUF is missing (have_data reports it: skip, or failure under KVLM_REQUIRE_TEST_DATA=1).
std::string smollm2_model(const char* dtype) {
    if (!have_data(kGguf)) return "";
    REQUIRE(std::filesystem::exists(reference_path()));
    return converted_model(std::string("smollm2-") + dtype, {kGguf, "--dtype", dtype});
}

struct Comparison {
    double max_abs = 0;  // max |kvlm - reference| over compared logits
    double max_rel = 0;  // max |kvlm - reference| / max(1, |reference|)
    int n_compared = 0;
    int n_flips = 0;     // steps where kvlm's argmax differs from the reference (allowed only at near ties)
    int n_bad = 0;       // logits outside the tolerance (the first 10 are reported)
};

// Feeds each case's prompt, then the reference's generated ids one at a time (teacher forcing, so every
// step stays comparable), comparing each step's logits at the stored ids and the argmax.
// Tolerance per logit: rel_tol * max(1, |reference|). An argmax flip is accepted only when the reference
// top1-top2 gap is below twice that tolerance and kvlm picked the reference's runner-up.
// max_steps limits the generated steps compared per prompt (to keep slower checks short).
Comparison compare_with_reference(const std::string& model_path, double rel_tol, size_t max_steps = SIZE_MAX,
                                  DType kv_dtype = DType::f32) {
    const json& ref = reference();
    auto model = ModelFile::open(model_path);
    const int32_t n_vocab = model->config().n_vocab;
    REQUIRE(n_vocab == 49152);
    const std::vector<int32_t> sample_ids = ref.at("sample_ids").get<std::vector<int32_t>>();

    int32_t max_tokens = 0;
    for (const json& c : ref.at("cases"))
        max_tokens = std::max<int32_t>(max_tokens, int32_t(c.at("prompt_ids").size() + c.at("generated_ids").size()));
    BackendOptions options;
    options.block_size = 16;
    options.kv_dtype = kv_dtype;
    options.n_kv_blocks = (max_tokens + options.block_size - 1) / options.block_size + 1;
    auto backend = make_cpu_backend(*model, options);

    Comparison result;
    auto compare = [&](double got, double want, const std::string& where) {
        double d = std::abs(got - want);
        result.max_abs = std::max(result.max_abs, d);
        result.max_rel = std::max(result.max_rel, d / std::max(1.0, std::abs(want)));
        result.n_compared++;
        if (d > rel_tol * std::max(1.0, std::abs(want)) && result.n_bad++ < 10)
            FAIL_CHECK(where << ": logit " << got << ", reference " << want << " (|diff| " << d << ")");
    };

    std::vector<float> logits(size_t(n_vocab), 0.0f);
    for (const json& c : ref.at("cases")) {
        const std::string prompt = c.at("prompt");
        const std::vector<int32_t> prompt_ids = c.at("prompt_ids").get<std::vector<int32_t>>();
        const std::vector<int32_t> generated = c.at("generated_ids").get<std::vector<int32_t>>();
        const json& steps = c.at("steps");
        REQUIRE(steps.size() == generated.size());
        CAPTURE(prompt);

        KvPool pool(options.n_kv_blocks, options.block_size);
        BlockTable table;
        reserve_tokens(pool, table, int32_t(prompt_ids.size()));
        backend->forward(prompt_ids.data(), int32_t(prompt_ids.size()), 0, table, logits.data());
        table.n_tokens = int32_t(prompt_ids.size());

        for (size_t i = 0; i < generated.size(); i++) {
            const json& step = steps[i];
            const std::string where = prompt + " step " + std::to_string(i);
            for (const json& pair : step.at("top")) compare(logits[pair[0].get<int32_t>()], pair[1].get<double>(),
                                                            where + " id " + std::to_string(pair[0].get<int32_t>()));
            if (i == 0) {
                const std::vector<double> sample = step.at("sample_logits").get<std::vector<double>>();
                REQUIRE(sample.size() == sample_ids.size());
                for (size_t k = 0; k < sample.size(); k++)
                    compare(logits[sample_ids[k]], sample[k], where + " sample id " + std::to_string(sample_ids[k]));
            }
            int32_t got = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
            if (got != generated[i]) {
                result.n_flips++;
                double gap = step.at("gap").get<double>();
                double top1 = step.at("top")[0][1].get<double>();
                int32_t runner_up = step.at("top")[1][0].get<int32_t>();
                MESSAGE(where << ": kvlm picks " << got << ", reference " << generated[i] << " (reference gap "
                              << gap << ")");
                CHECK(got == runner_up);
                CHECK(gap < 2 * rel_tol * std::max(1.0, std::abs(top1)));
            }
            if (i + 1 == generated.size() || i + 1 == max_steps) break;
            int32_t pos = table.n_tokens;
            reserve_tokens(pool, table, pos + 1);
            backend->forward(&generated[i], 1, pos, table, logits.data());
            table.n_tokens = pos + 1;
        }
        release_table(pool, table);
    }
    return result;
}

}  // namespace

TEST_CASE("smollm2: the reference data is self-consistent") {
    const json& ref = reference();
    REQUIRE(ref.at("cases").size() >= 3);
    for (const json& c : ref.at("cases")) {
        CHECK(c.at("steps").size() == c.at("generated_ids").size());
        CHECK(c.at("prompt_ids").size() > 20);
        for (size_t i = 0; i < c.at("steps").size(); i++)  // greedy: each generated id is its step's top-1
            CHECK(c.at("steps")[i].at("top")[0][0] == c.at("generated_ids")[i]);
    }
}

TEST_CASE("smollm2: kvlm's tokenizer encodes the rendered chat prompts exactly like HF tokenizers") {
    std::string path = smollm2_model("f32");
    if (path.empty()) return;
    auto model = ModelFile::open(path);
    Tokenizer tokenizer(model->metadata().tokenizer);
    for (const json& c : reference().at("cases")) {
        CAPTURE(c.at("prompt").get<std::string>());
        std::vector<int32_t> ids = tokenizer.encode(c.at("rendered").get<std::string>(), /*add_bos=*/false,
                                                    /*parse_special=*/true);
        CHECK(ids == c.at("prompt_ids").get<std::vector<int32_t>>());
        // <|im_end|> is a control token: decoding skips it, as HF's skip_special_tokens does.
        CHECK(tokenizer.decode(c.at("generated_ids").get<std::vector<int32_t>>()) == c.at("answer").get<std::string>());
        CHECK(tokenizer.is_end_of_generation(c.at("generated_ids").back().get<int32_t>()) ==
              c.at("stopped_at_im_end").get<bool>());
    }
}

// f32 weights are the dequantized Q4_1 values exactly, so only compute precision differs from the float64
// reference: NumPy's float32 path differs by at most 1e-5, kvlm's CPU backend measured 3.2e-5 (2.5e-5
// relative) over all 2050 stored logits. Tolerance 2e-4 * max(1, |logit|) leaves ~6x for other summation
// orders (threads, FMA); any real bug (RoPE pairing, GQA mapping, norm, tied head) moves logits by >0.1.
TEST_CASE("smollm2: f32 forward matches the float64 reference (greedy path and logits)") {
    std::string path = smollm2_model("f32");
    if (path.empty()) return;
    Comparison r = compare_with_reference(path, 2e-4);
    MESSAGE("smollm2 f32 vs float64 reference: " << r.n_compared << " logits, max |diff| " << r.max_abs
                                                 << ", max relative " << r.max_rel << ", greedy flips " << r.n_flips);
    CHECK(r.n_compared > 1000);
    CHECK(r.n_bad == 0);
    CHECK(r.n_flips == 0);  // no reference step is a near tie at this tolerance (min gap 0.05)
}

// The default conversion of a quantized GGUF is f16: rounding the weights alone moves logits by at most
// 0.0175 (0.013 relative) in the float64 reference, and kvlm measured the same (0.0175, 0.0133 relative);
// tolerance 0.05 relative. The first 16 steps per prompt keep it short.
TEST_CASE("smollm2: the default f16 conversion stays close to the reference") {
    std::string path = smollm2_model("f16");
    if (path.empty()) return;
    Comparison r = compare_with_reference(path, 0.05, 16);
    MESSAGE("smollm2 f16 vs float64 reference: " << r.n_compared << " logits, max |diff| " << r.max_abs
                                                 << ", max relative " << r.max_rel << ", greedy flips " << r.n_flips);
    CHECK(r.n_compared > 500);
    CHECK(r.n_bad == 0);
}

// A q8_0 KV cache (issue 17) on the f32 weights. 8 bits per element cost more than 16 at single logits: on a
// 2-core AMD EPYC VM the largest relative difference was 0.0039 with f16 KV, 0.039 with bf16 KV and 0.48 with
// q8_0 KV (two greedy flips, both at reference gaps under 0.09), while perplexity moves by under 0.1% (the
// perplexity CLI tests hold it to 0.5%). The tolerance here catches a cache read wrongly (logits off by units).
TEST_CASE("smollm2: a q8_0 KV cache stays near the reference") {
    std::string path = smollm2_model("f32");
    if (path.empty()) return;
    Comparison r = compare_with_reference(path, 0.6, 16, DType::q8_0);
    MESSAGE("smollm2 f32 weights, q8_0 KV vs float64 reference: " << r.n_compared << " logits, max |diff| " << r.max_abs
                                                                 << ", max relative " << r.max_rel << ", greedy flips "
                                                                 << r.n_flips);
    CHECK(r.n_compared > 500);
    CHECK(r.n_bad == 0);
}

// Through the CLI: chat template rendering, prompt tokenization, prefill, greedy decode, stop at <|im_end|>
// and streaming detokenization all together. Only prompts whose greedy path has no near tie.
TEST_CASE("smollm2: kvlm run --chat prints the reference answers") {
    std::string path = smollm2_model("f32");
    if (path.empty()) return;
    const json& ref = reference();
    for (const json& c : ref.at("cases")) {
        if (!c.at("near_tie_steps").empty()) continue;
        const std::string prompt = c.at("prompt");
        CAPTURE(prompt);
        CliResult r = run_kvlm({"run", "-m", path, "--chat", "-p", prompt, "-n", std::to_string(ref.at("n_new").get<int>()),
                                "--temp", "0", "--quiet"});
        CHECK_MESSAGE(r.exit_code == 0, r.err);
        CHECK(r.out == c.at("answer").get<std::string>());
    }
}

// The sampling defaults tools/fetch_models.sh stores in the model `make models` writes (its SAMPLING= line).
std::string fetch_models_sampling() {
    std::string script = read_file((std::filesystem::path(__FILE__).parent_path().parent_path().parent_path() /
                                    "tools" / "fetch_models.sh").string());
    size_t at = script.find("\nSAMPLING=\"");
    REQUIRE(at != std::string::npos);
    at += 11;
    return script.substr(at, script.find('"', at) - at);
}

// The README's first command on the model `make models` writes, with ten seeds: its defaults must answer
// sensibly whatever the seed (issue 15: at temperature 0.8 six of eight seeds answered in broken French).
TEST_CASE("smollm2: the README's first command answers sensibly with every seed") {
    if (!have_data(kGguf)) return;
    const std::string sampling = fetch_models_sampling();
    CHECK(sampling == "temp=0,repeat-penalty=1.1");
    std::string path = converted_model("smollm2-make-models", {kGguf, "--sampling", sampling});
    for (int seed = 1; seed <= 10; seed++) {
        CAPTURE(seed);
        CliResult r = run_kvlm({"run", "-m", path, "--chat", "-p", "What is the capital of France?", "--seed",
                                std::to_string(seed), "-n", "64"});
        CHECK_MESSAGE(r.exit_code == 0, r.err);
        CHECK(r.out == "The capital of France is Paris.");
    }
    // The flags still override the model's defaults: sampled answers differ between seeds.
    std::vector<std::string> sampled;
    for (int seed = 1; seed <= 4; seed++)
        sampled.push_back(run_kvlm({"run", "-m", path, "--chat", "-p", "What is the capital of France?", "--temp",
                                    "0.8", "--seed", std::to_string(seed), "-n", "24", "-q"})
                              .out);
    std::sort(sampled.begin(), sampled.end());
    CHECK(std::unique(sampled.begin(), sampled.end()) - sampled.begin() > 1);
}
