// Config keys and tensors that change the computation are implemented or refused by name, never skipped: HF
// config.json variants of stories260K's (and its checkpoint with one tensor more), and GGUFs that
// bench/export_gguf.py writes with one key or tensor more. Each refusal names the key (and its value) or the
// tensor; transformers v5's rope_parameters are read, not left at the default base.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "format/model_file.h"
#include "import/convert.h"
#include "support/test_util.h"
#include "util/error.h"

using namespace kvlm;
using namespace kvlm::test;
using Json = nlohmann::ordered_json;

namespace {

std::string stories(const std::string& name) { return data_path("stories260K/" + name); }

// Converts `source`; returns "" or the error's message.
std::string convert_error(const TempDir& dir, const std::string& source, const std::string& tokenizer = "") {
    ConvertOptions o;
    o.source = source;
    o.tokenizer = tokenizer;
    o.output = dir.file("out.kvlm");
    o.quiet = true;
    std::filesystem::remove(o.output);
    try {
        convert_model(o, false);
    } catch (const Error& e) {
        CHECK(!std::filesystem::exists(o.output));
        return e.what();
    }
    return "";
}

// A safetensors file with one more f32 tensor of n zeros at the end of its data.
std::string with_tensor(const std::string& safetensors, const std::string& name, int64_t n) {
    uint64_t header_size = 0;
    std::memcpy(&header_size, safetensors.data(), 8);
    Json header = Json::parse(safetensors.substr(8, header_size));
    const uint64_t data_size = safetensors.size() - 8 - header_size;
    header[name] = {{"dtype", "F32"}, {"shape", {n}}, {"data_offsets", {data_size, data_size + uint64_t(n) * 4}}};
    const std::string text = header.dump();
    const uint64_t size = text.size();
    std::string out(reinterpret_cast<const char*>(&size), 8);
    return out + text + safetensors.substr(8 + header_size) + std::string(size_t(n) * 4, '\0');
}

}  // namespace

TEST_CASE("config keys: HF config.json keys kvlm does not implement are refused naming key and value") {
    if (!have_data(stories("hf/model.safetensors"))) return;
    TempDir dir;
    const Json config = Json::parse(read_file(stories("hf/config.json")));
    const std::string weights = read_file(stories("hf/model.safetensors")), tok = stories("tok512.bin");
    int n = 0;
    // The directory of `cfg` (and `st`), converted: "" or the error.
    auto convert_with = [&](const Json& cfg, const std::string& st = "") {
        const std::string d = dir.file("hf" + std::to_string(n++));
        std::filesystem::create_directories(d);
        write_file(d + "/config.json", cfg.dump(2));
        write_file(d + "/model.safetensors", st.empty() ? weights : st);
        return convert_error(dir, d, tok);
    };
    auto with = [&](std::initializer_list<std::pair<const char*, Json>> changes) {
        Json cfg = config;
        for (const auto& [key, value] : changes) cfg[key] = value;
        return cfg;
    };
    REQUIRE(convert_with(config).empty());

    struct Refused {
        Json cfg;
        std::vector<std::string> needles;
    };
    const std::vector<Refused> refused = {
        {with({{"architectures", {"MistralForCausalLM"}}, {"sliding_window", 4096}}),
         {"\"sliding_window\" = 4096 is not supported", "whole context"}},
        {with({{"use_sliding_window", true}, {"max_window_layers", 2}}), {"\"use_sliding_window\" = true"}},
        {with({{"layer_types", {"full_attention", "sliding_attention", "full_attention", "full_attention",
                                "full_attention"}}}),
         {"\"layer_types\" = ", "only full_attention"}},
        {with({{"partial_rotary_factor", 0.5}}), {"\"partial_rotary_factor\" = 0.5"}},
        {with({{"quantization_config", {{"quant_method", "gptq"}, {"bits", 4}}}}),
         {"\"quantization_config\" = ", "gptq", "quantized checkpoint"}},
        {with({{"hidden_act", {"silu"}}}), {"\"hidden_act\" = [\"silu\"]", "only silu"}},
        {with({{"hidden_act", "gelu"}}), {"\"hidden_act\" = \"gelu\""}},
        {with({{"attn_logit_softcapping", 50.0}}), {"\"attn_logit_softcapping\" = 50"}},
        {with({{"final_logit_softcapping", 30.0}}), {"\"final_logit_softcapping\" = 30"}},
        {with({{"use_qk_norm", true}}), {"\"use_qk_norm\" = true"}},
        {with({{"no_rope_layers", {1, 1, 0, 1, 1}}}), {"\"no_rope_layers\" = "}},
        {with({{"query_pre_attn_scalar", 256}}), {"\"query_pre_attn_scalar\" = 256"}},
        {with({{"num_local_experts", 8}}), {"\"num_local_experts\" = 8", "mixture-of-experts"}},
        {with({{"tie_word_embeddings", false}}), {"\"tie_word_embeddings\" = false", "no lm_head.weight"}},
        // transformers v5: RoPE settings in rope_parameters, whose base must be given there.
        {[&] {
             Json cfg = with({{"rope_parameters", {{"rope_type", "default"}}}});
             cfg.erase("rope_theta");
             cfg.erase("rope_scaling");
             return cfg;
         }(),
         {"\"rope_parameters\" has no number \"rope_theta\""}},
        {[&] {
             Json cfg = with({{"rope_parameters", {{"rope_type", "yarn"}, {"rope_theta", 1e6}, {"factor", 4.0}}}});
             cfg.erase("rope_theta");
             cfg.erase("rope_scaling");
             return cfg;
         }(),
         {"rope_parameters type 'yarn' is not supported"}},
        {with({{"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1e6}}}}),
         {"both \"rope_parameters\" and \"rope_theta\"/\"rope_scaling\""}},
    };
    for (const Refused& r : refused) {
        CAPTURE(r.cfg.dump());
        const std::string error = convert_with(r.cfg);
        REQUIRE_MESSAGE(!error.empty(), "converted");
        CHECK_MESSAGE(contains(error, "config.json"), error);
        for (const std::string& needle : r.needles) CHECK_MESSAGE(contains(error, needle), error);
    }

    // At their no-op values the same keys pass.
    for (const Json& cfg : {with({{"sliding_window", nullptr}}), with({{"use_sliding_window", false}}),
                            with({{"partial_rotary_factor", 1.0}}), with({{"layer_types", Json::array()}}),
                            with({{"attn_logit_softcapping", nullptr}})}) {
        CAPTURE(cfg.dump());
        CHECK(convert_with(cfg).empty());
    }

    // rope_parameters are read: the base, and the llama3 form.
    Json v5 = with({{"rope_parameters",
                     {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                      {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 128}}}});
    v5.erase("rope_theta");
    v5.erase("rope_scaling");
    REQUIRE(convert_with(v5).empty());
    const ModelConfig c = ModelFile::open(dir.file("out.kvlm"))->config();
    CHECK(c.rope_theta == 500000.0f);
    CHECK(c.rope_scaling.type == "llama3");
    CHECK(c.rope_scaling.factor == 8.0f);
    CHECK(c.rope_scaling.original_max_position == 128);

    // Every tensor of the checkpoint is used: an extra one is refused by name; a saved RoPE buffer is not one.
    std::string error = convert_with(config, with_tensor(weights, "model.layers.0.self_attn.q_norm.weight", 8));
    CHECK_MESSAGE(contains(error, "tensor 'model.layers.0.self_attn.q_norm.weight' is not used by kvlm's llama"),
                  error);
    error = convert_with(config, with_tensor(weights, "model.layers.2.self_attn.o_proj.bias", 64));
    CHECK_MESSAGE(contains(error, "tensor 'model.layers.2.self_attn.o_proj.bias' is not used"), error);
    CHECK(convert_with(config, with_tensor(weights, "model.layers.0.self_attn.rotary_emb.inv_freq", 4)).empty());
}

TEST_CASE("config keys: GGUF keys and tensors kvlm does not implement are refused by name") {
    if (!have_data(stories("stories260K.gguf"))) return;
    TempDir dir;
    const std::string model = converted_model("stories-gguf", {stories("stories260K.gguf")});
    int n = 0;
    // bench/export_gguf.py's GGUF of stories260K with `extra` flags, converted: "" or the error.
    auto convert_with = [&](const std::vector<std::string>& extra) {
        const std::string gguf = dir.file("g" + std::to_string(n++) + ".gguf");
        std::string command = "python3 bench/export_gguf.py " + shell_quote(model) + " " + shell_quote(gguf);
        for (const std::string& e : extra) command += " " + shell_quote(e);
        CliResult r = run_shell(command);
        REQUIRE_MESSAGE(r.exit_code == 0, r.err);
        return convert_error(dir, gguf);
    };
    REQUIRE(convert_with({}).empty());
    struct Refused {
        std::vector<std::string> extra;
        std::string needle;
    };
    const Refused refused[] = {
        {{"--set", "llama.rope.scaling.factor=f32:4"}, "llama.rope.scaling.factor = 4 is not supported: linear RoPE"},
        {{"--set", "llama.rope.scale_linear=f32:2"}, "llama.rope.scale_linear = 2 is not supported"},
        {{"--set", "llama.expert_count=u32:8"}, "llama.expert_count = 8 is not supported: mixture-of-experts"},
        {{"--set", "llama.attention.clamp_kqv=f32:8"}, "metadata key llama.attention.clamp_kqv is not supported"},
        {{"--set", "llama.logit_scale=f32:0.5"}, "metadata key llama.logit_scale is not supported"},
        {{"--add-tensor", "blk.0.attn_q.bias:64"}, "tensor blk.0.attn_q.bias is not used by kvlm's llama"},
        {{"--add-tensor", "blk.3.attn_output.bias:64"}, "tensor blk.3.attn_output.bias is not used"},
        {{"--add-tensor", "blk.0.attn_q_norm.weight:8"}, "tensor blk.0.attn_q_norm.weight is not used"},
        {{"--add-tensor", "blk.1.attn_k_norm.weight:8"}, "tensor blk.1.attn_k_norm.weight is not used"},
    };
    for (const Refused& r : refused) {
        CAPTURE(r.extra[1]);
        const std::string error = convert_with(r.extra);
        CHECK_MESSAGE(contains(error, r.needle), error);
    }
    // A factor of 1 scales nothing.
    CHECK(convert_with({"--set", "llama.rope.scaling.factor=f32:1"}).empty());
}
