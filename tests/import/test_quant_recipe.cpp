// `kvlm convert --dtype q4_k_m` and the other k-quant mixes: the type llama-quantize gives each tensor
// (import/quant_recipe.cpp), its fallbacks where rows are not whole 256-element super-blocks, and a model
// that runs with perplexity close to its f32 original. Synthetic weights (random, seed 7) of a shape whose
// attn_v, ffn_down and tied embedding show every rule.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <map>
#include <string>

#include "support/test_util.h"

using namespace kvlm::test;

namespace {

// n_embd 256 (whole super-blocks), n_ff 640 (ffn_down's rows are not), 8 layers, 4 query heads per KV head.
const char* kConfig = R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 256, "intermediate_size": 640,
 "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 1, "vocab_size": 512,
 "max_position_embeddings": 256, "rope_theta": 10000.0, "rms_norm_eps": 1e-05, "tie_word_embeddings": true})";

std::map<std::string, std::string> tensor_types(const std::string& model) {
    CliResult r = run_kvlm({"inspect", "--json", model});
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    std::map<std::string, std::string> types;
    const nlohmann::json listing = nlohmann::json::parse(r.out);  // kept: the loop below refers into it
    for (const auto& t : listing.at("tensors"))
        types[t.at("name").get<std::string>()] = t.at("dtype").get<std::string>();
    return types;
}

std::string convert_synthetic(const TempDir& dir, const std::string& dtype) {
    const std::string out = dir.file(dtype + ".kvlm");
    CliResult r = run_kvlm({"convert", "-q", "--synthetic", dir.file("config.json"), "--tokenizer",
                            data_path("stories260K/tok512.bin"), "--seed", "7", "--dtype", dtype, "-o", out});
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    return out;
}

}  // namespace

TEST_CASE("quant recipes: each tensor gets llama-quantize's type, with its fallback for partial super-blocks") {
    if (!have_data(data_path("stories260K/tok512.bin"))) return;
    TempDir dir;
    write_file(dir.file("config.json"), kConfig);
    // use_more_bits over 8 layers: 0, 3, 6, 7 (the first and last eighth and every third between).
    const std::map<std::string, std::map<std::string, std::string>> want = {
        {"q4_k_m",
         {{"token_embd.weight", "q6_k"},  // tied: the output's type
          {"blk.0.attn_v.weight", "q6_k"}, {"blk.1.attn_v.weight", "q4_k"}, {"blk.3.attn_v.weight", "q6_k"},
          {"blk.7.attn_v.weight", "q6_k"}, {"blk.0.ffn_down.weight", "q8_0"}, {"blk.1.ffn_down.weight", "q5_0"},
          {"blk.2.attn_q.weight", "q4_k"}, {"blk.2.attn_output.weight", "q4_k"}, {"blk.2.ffn_up.weight", "q4_k"}}},
        {"q3_k_m",
         {{"blk.1.attn_v.weight", "q5_k"}, {"blk.2.attn_v.weight", "q4_k"}, {"blk.2.attn_output.weight", "q4_k"},
          {"blk.2.ffn_down.weight", "q5_0"}, {"blk.2.ffn_gate.weight", "q3_k"}}},
        {"q2_k",
         {{"blk.2.attn_v.weight", "q4_k"}, {"blk.2.attn_output.weight", "q3_k"}, {"blk.2.ffn_down.weight", "q4_0"},
          {"blk.2.attn_k.weight", "q2_k"}, {"token_embd.weight", "q6_k"}}},
        {"q6_k", {{"blk.2.attn_v.weight", "q6_k"}, {"blk.2.ffn_down.weight", "q8_0"}}},
        {"iq4_xs",
         {{"blk.2.attn_v.weight", "q5_k"}, {"blk.0.ffn_down.weight", "q5_1"}, {"blk.2.ffn_down.weight", "iq4_nl"},
          {"blk.2.attn_q.weight", "iq4_xs"}}},
        {"q5_0", {{"blk.2.attn_v.weight", "q5_0"}, {"blk.2.ffn_down.weight", "q5_0"}, {"token_embd.weight", "q5_0"}}},
    };
    for (const auto& mix : want) {  // no structured bindings: clang's C++17 refuses them in CAPTURE
        const std::string& dtype = mix.first;
        CAPTURE(dtype);
        const auto types = tensor_types(convert_synthetic(dir, dtype));
        for (const auto& tensor : mix.second) {
            const std::string& name = tensor.first;
            CAPTURE(name);
            CHECK(types.at(name) == tensor.second);
        }
        CHECK(types.at("output_norm.weight") == "f32");
    }
}

TEST_CASE("quant recipes: quantized models run, their perplexity near the f32 model's, in order of their bits") {
    const std::string text = data_path("stories260K/expected_t0_n200.txt");
    if (!have_data(data_path("stories260K/tok512.bin")) || !have_data(text)) return;
    TempDir dir;
    write_file(dir.file("config.json"), kConfig);
    auto ppl = [&](const std::string& model) {
        CliResult r = run_kvlm({"perplexity", "--json", "-q", "-m", model, "-f", text, "-c", "64", "--chunks", "2",
                                "--device", "cpu"});
        REQUIRE_MESSAGE(r.exit_code == 0, r.err);
        return nlohmann::json::parse(r.out).at("ppl").get<double>();
    };
    const double f32 = ppl(convert_synthetic(dir, "f32"));
    std::map<std::string, double> drift;
    for (const char* dtype : {"q2_k", "q3_k_m", "q4_k_m", "q5_k_m", "q6_k", "iq4_xs", "iq4_nl", "q5_1"}) {
        CAPTURE(dtype);
        drift[dtype] = std::fabs(ppl(convert_synthetic(dir, dtype)) / f32 - 1.0);
        CHECK(drift[dtype] < 0.05);
    }
    CHECK(drift["q6_k"] < drift["q4_k_m"]);
    CHECK(drift["q4_k_m"] < drift["q2_k"]);
}

TEST_CASE("quant recipes: an unknown --dtype lists the types and mixes") {
    if (!have_data(data_path("stories260K/tok512.bin"))) return;
    TempDir dir;
    write_file(dir.file("config.json"), kConfig);
    CliResult r = run_kvlm({"convert", "-q", "--synthetic", dir.file("config.json"), "--tokenizer",
                            data_path("stories260K/tok512.bin"), "--dtype", "q4_k_x", "-o", dir.file("x.kvlm")});
    CHECK(r.exit_code != 0);
    CHECK_MESSAGE(r.err.find("--dtype q4_k_x: unknown type") != std::string::npos, r.err);
    CHECK_MESSAGE(r.err.find("q4_k_m") != std::string::npos, r.err);
}
