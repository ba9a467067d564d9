// Hugging Face importer: config.json + safetensors (single or sharded) + tokenizer files -> ConvertSource.
// HF already stores q/k rows in rotate_half order, so tensors are only renamed and shape-checked.
#include <nlohmann/json.hpp>

#include <climits>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>

#include "import/convert.h"
#include "import/safetensors.h"
#include "import/tokenizer/tokenizer_import.h"
#include "util/error.h"
#include "util/json_text.h"

namespace kvlm {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

json read_json(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw_error("{}: cannot open", path);
    try {
        return json::parse(in);
    } catch (const json::exception& e) {
        throw_error("{}: not valid JSON: {}", path, e.what());
    }
}

// Typed config field lookups: missing/null -> fallback (or an error when required).
int64_t get_int(const json& j, const char* key, const std::string& path, bool required, int64_t fallback = 0) {
    if (!j.contains(key) || j[key].is_null()) {
        if (required) throw_error("{}: required field \"{}\" is missing", path, key);
        return fallback;
    }
    if (!j[key].is_number_integer())
        throw_error("{}: field \"{}\" = {} is not an integer", path, key, json_excerpt(j[key]));
    int64_t v = j[key].get<int64_t>();
    if (v < INT32_MIN || v > INT32_MAX) throw_error("{}: field \"{}\" = {} is out of range", path, key, v);
    return v;
}

bool get_bool(const json& j, const char* key, const std::string& path, bool fallback) {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_boolean())
        throw_error("{}: field \"{}\" = {} is not true or false", path, key, json_excerpt(j[key]));
    return j[key].get<bool>();
}

double get_number(const json& j, const char* key, const std::string& path, double fallback) {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_number()) throw_error("{}: field \"{}\" = {} is not a number", path, key, json_excerpt(j[key]));
    return j[key].get<double>();
}

// HF tensor name for a kvlm tensor name ("blk.3.attn_q.weight" -> "model.layers.3.self_attn.q_proj.weight").
std::string hf_name(const std::string& name) {
    if (name == "token_embd.weight") return "model.embed_tokens.weight";
    if (name == "output_norm.weight") return "model.norm.weight";
    if (name == "output.weight") return "lm_head.weight";
    static const std::pair<const char*, const char*> layer_map[] = {
        {"attn_norm.weight", "input_layernorm.weight"},  {"ffn_norm.weight", "post_attention_layernorm.weight"},
        {"attn_q.weight", "self_attn.q_proj.weight"},    {"attn_k.weight", "self_attn.k_proj.weight"},
        {"attn_v.weight", "self_attn.v_proj.weight"},    {"attn_output.weight", "self_attn.o_proj.weight"},
        {"attn_q.bias", "self_attn.q_proj.bias"},        {"attn_k.bias", "self_attn.k_proj.bias"},
        {"attn_v.bias", "self_attn.v_proj.bias"},        {"ffn_gate.weight", "mlp.gate_proj.weight"},
        {"ffn_up.weight", "mlp.up_proj.weight"},         {"ffn_down.weight", "mlp.down_proj.weight"},
    };
    // name = "blk.<n>.<suffix>"
    size_t dot = name.find('.', 4);
    KVLM_ASSERT(name.compare(0, 4, "blk.") == 0 && dot != std::string::npos, "unexpected tensor name");
    std::string layer = name.substr(4, dot - 4), suffix = name.substr(dot + 1);
    for (const auto& [kvlm_suffix, hf_suffix] : layer_map)
        if (suffix == kvlm_suffix) return "model.layers." + layer + "." + hf_suffix;
    KVLM_ASSERT(false, "unmapped tensor name");
    return "";
}

bool has_file(const std::string& dir, const char* name) { return fs::is_regular_file(fs::path(dir) / name); }

bool is_set(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

// config.json keys that change the computation and that kvlm does not implement (docs/FORMAT.md): a config that
// sets one is refused naming it and its value, so a converted model never computes something else silently.
// Keys at their no-op value pass (sliding_window null or off, partial_rotary_factor 1, ...).
void refuse_unimplemented_keys(const json& j, const std::string& path, const std::string& arch) {
    auto refuse = [&](const char* key, const std::string& why) {
        const std::string value = j[key].dump();  // whole when short ({"quant_method": "gptq", "bits": 4})
        throw_error("{}: \"{}\" = {} is not supported: {}", path, key, value.size() <= 80 ? value : json_excerpt(j[key]),
                    why);
    };
    // Mistral v0.1 attends to its last 4,096 tokens only; Qwen2 declares a window it uses only with
    // use_sliding_window (then on the layers from max_window_layers on).
    if (arch != "qwen2" && is_set(j, "sliding_window"))
        refuse("sliding_window", "kvlm attends to the whole context, so the output would part from the model's "
                                 "past the window");
    if (get_bool(j, "use_sliding_window", path, false))
        refuse("use_sliding_window", "sliding-window attention (with max_window_layers) is not implemented");
    if (is_set(j, "layer_types")) {
        const json& types = j["layer_types"];
        if (!types.is_array()) refuse("layer_types", "expected an array of strings");
        for (const json& type : types)
            if (!type.is_string() || type.get<std::string>() != "full_attention")
                refuse("layer_types", "only full_attention layers are implemented");
    }
    if (is_set(j, "partial_rotary_factor") && get_number(j, "partial_rotary_factor", path, 1.0) != 1.0)
        refuse("partial_rotary_factor", "RoPE on part of each head is not implemented");
    if (is_set(j, "quantization_config"))
        refuse("quantization_config", "a quantized checkpoint (GPTQ, AWQ, bitsandbytes, ...) cannot be read; convert "
                                      "the f32/f16/bf16 weights and quantize with --dtype");
    if (j.contains("hidden_act") && (!j["hidden_act"].is_string() || j["hidden_act"] != "silu"))
        refuse("hidden_act", "only silu (SwiGLU) is implemented");
    for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"})
        if (is_set(j, key)) refuse(key, "logit soft-capping is not implemented");
    if (get_bool(j, "use_qk_norm", path, false)) refuse("use_qk_norm", "q/k normalization is not implemented");
    if (is_set(j, "no_rope_layers")) {
        const json& layers = j["no_rope_layers"];
        if (!layers.is_array()) refuse("no_rope_layers", "expected an array");
        for (const json& use_rope : layers)
            if (!use_rope.is_number_integer() || use_rope.get<int64_t>() != 1)
                refuse("no_rope_layers", "layers without RoPE are not implemented");
    }
    if (is_set(j, "query_pre_attn_scalar"))
        refuse("query_pre_attn_scalar", "an attention scale other than 1/sqrt(head_dim) is not implemented");
    for (const char* key : {"embedding_multiplier", "logits_scaling", "residual_multiplier", "attention_multiplier"})
        if (is_set(j, key) && get_number(j, key, path, 1.0) != 1.0) refuse(key, "Granite's scalings are not implemented");
    for (const char* key : {"num_local_experts", "num_experts"})
        if (is_set(j, key) && get_int(j, key, path, false, 0) > 1) refuse(key, "mixture-of-experts is not implemented");
}

// RoPE settings from transformers v5's "rope_parameters" ({"rope_type": "default", "rope_theta": 500000.0, ...})
// or from v4's "rope_theta" and "rope_scaling" beside it.
void read_rope(const json& j, const std::string& path, ModelConfig* c) {
    const bool v5 = is_set(j, "rope_parameters");
    if (v5 && (is_set(j, "rope_scaling") || is_set(j, "rope_theta")))
        throw_error("{}: both \"rope_parameters\" and \"rope_theta\"/\"rope_scaling\" are given: which one holds is "
                    "not clear",
                    path);
    // A reference, never a copy: a copy of a hostile config's deeply nested value recurses as deep as it is.
    static const json kNone;
    const json& rs = v5 ? j["rope_parameters"] : is_set(j, "rope_scaling") ? j["rope_scaling"] : kNone;
    if (v5 && !rs.is_object()) throw_error("{}: \"rope_parameters\" = {} is not an object", path, json_excerpt(rs));
    const char* where = v5 ? "rope_parameters" : "rope_scaling";
    if (v5) {
        if (!rs.contains("rope_theta") || !rs["rope_theta"].is_number())
            throw_error("{}: \"rope_parameters\" has no number \"rope_theta\" (its RoPE base)", path);
        c->rope_theta = float(rs["rope_theta"].get<double>());
    } else {
        c->rope_theta = float(get_number(j, "rope_theta", path, 10000.0));
    }
    if (rs.is_null()) return;
    std::string type;
    if (rs.is_object() && rs.contains("rope_type") && rs["rope_type"].is_string()) type = rs["rope_type"];
    else if (rs.is_object() && rs.contains("type") && rs["type"].is_string()) type = rs["type"];
    if (type == "llama3") {
        c->rope_scaling.type = "llama3";
        c->rope_scaling.factor = float(get_number(rs, "factor", path, 8.0));
        c->rope_scaling.low_freq_factor = float(get_number(rs, "low_freq_factor", path, 1.0));
        c->rope_scaling.high_freq_factor = float(get_number(rs, "high_freq_factor", path, 4.0));
        c->rope_scaling.original_max_position =
            int32_t(get_int(rs, "original_max_position_embeddings", path, false, 8192));
    } else if (type != "default") {
        throw_error("{}: {} {} is not supported (supported: none, default, llama3)", path, where,
                    type.empty() ? json_excerpt(rs) : "type '" + type + "'");
    }
    if (v5 && rs.contains("partial_rotary_factor") && get_number(rs, "partial_rotary_factor", path, 1.0) != 1.0)
        throw_error("{}: rope_parameters \"partial_rotary_factor\" = {} is not supported: RoPE on part of each head is "
                    "not implemented",
                    path, json_excerpt(rs["partial_rotary_factor"]));
}

}  // namespace

ModelConfig hf_config_from_json(const std::string& path) {
    json j = read_json(path);
    if (!j.is_object()) throw_error("{}: expected a JSON object", path);
    std::string arch;
    if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
        j["architectures"][0].is_string())
        arch = j["architectures"][0].get<std::string>();
    else if (j.contains("model_type") && j["model_type"].is_string())
        arch = j["model_type"].get<std::string>();
    ModelConfig c;
    if (arch == "LlamaForCausalLM" || arch == "MistralForCausalLM" || arch == "llama" || arch == "mistral") {
        c.architecture = "llama";
        if (get_bool(j, "attention_bias", path, false))
            throw_error("{}: attention_bias = true is not supported (only Qwen2's q/k/v biases are)", path);
    } else if (arch == "Qwen2ForCausalLM" || arch == "qwen2") {
        c.architecture = "qwen2";
        c.qkv_bias = true;
    } else {
        throw_error("{}: architecture {} is not supported; supported: LlamaForCausalLM, Qwen2ForCausalLM "
                    "(and MistralForCausalLM)",
                    path, arch.empty() ? std::string("(none given)") : arch);
    }
    if (get_bool(j, "mlp_bias", path, false)) throw_error("{}: mlp_bias = true is not supported", path);
    refuse_unimplemented_keys(j, path, c.architecture);

    c.n_embd = int32_t(get_int(j, "hidden_size", path, true));
    c.n_ff = int32_t(get_int(j, "intermediate_size", path, true));
    c.n_layers = int32_t(get_int(j, "num_hidden_layers", path, true));
    c.n_heads = int32_t(get_int(j, "num_attention_heads", path, true));
    c.n_kv_heads = int32_t(get_int(j, "num_key_value_heads", path, false, c.n_heads));
    c.n_vocab = int32_t(get_int(j, "vocab_size", path, true));
    if (c.n_heads <= 0) throw_error("{}: num_attention_heads = {} must be positive", path, c.n_heads);
    c.head_dim = int32_t(get_int(j, "head_dim", path, false, c.n_embd / c.n_heads));
    c.n_ctx = int32_t(get_int(j, "max_position_embeddings", path, false, 2048));
    read_rope(j, path, &c);
    c.norm_eps = float(get_number(j, "rms_norm_eps", path, 1e-6));
    c.tied_embeddings = get_bool(j, "tie_word_embeddings", path, false);  // transformers default for Llama and Qwen2

    c.validate(path);
    return c;
}

std::string hf_chat_template(const std::string& dir) {
    fs::path jinja = fs::path(dir) / "chat_template.jinja";
    if (fs::is_regular_file(jinja)) {
        std::ifstream in(jinja, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(in), {});
    }
    fs::path config = fs::path(dir) / "tokenizer_config.json";
    if (!fs::is_regular_file(config)) return "";
    json j = read_json(config.string());
    if (!j.is_object() || !j.contains("chat_template")) return "";
    const json& t = j["chat_template"];
    if (t.is_string()) return t.get<std::string>();
    if (t.is_array()) {  // [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
        for (const json& e : t)
            if (e.is_object() && e.contains("name") && e["name"] == "default" && e.contains("template") &&
                e["template"].is_string())
                return e["template"].get<std::string>();
    }
    return "";
}

void add_generation_config_stops(const std::string& dir, TokenizerData* tokenizer) {
    fs::path path = fs::path(dir) / "generation_config.json";
    if (!fs::is_regular_file(path)) return;
    json j = read_json(path.string());
    if (!j.is_object() || !j.contains("eos_token_id")) return;
    std::vector<int64_t> ids;
    const json& e = j["eos_token_id"];
    if (e.is_number_integer()) ids.push_back(e.get<int64_t>());
    else if (e.is_array())
        for (const json& x : e)
            if (x.is_number_integer()) ids.push_back(x.get<int64_t>());
    for (int64_t id : ids) {
        if (id < 0 || id >= int64_t(tokenizer->tokens.size()))
            throw_error("{}: eos_token_id {} is outside the vocabulary (0..{})", path.string(), id,
                        tokenizer->tokens.size());
        if (tokenizer->eos_id < 0) tokenizer->eos_id = int32_t(id);
        if (id == tokenizer->eos_id) continue;
        bool seen = false;
        for (int32_t s : tokenizer->stop_ids) seen |= s == id;
        if (!seen) tokenizer->stop_ids.push_back(int32_t(id));
    }
}

SamplingSettings hf_sampling_defaults(const std::string& dir) {
    fs::path path = fs::path(dir) / "generation_config.json";
    SamplingSettings s;
    if (!fs::is_regular_file(path)) return s;
    json j = read_json(path.string());
    if (!j.is_object()) return s;
    auto number = [&](const char* key) -> std::optional<float> {
        if (!j.contains(key) || j[key].is_null()) return std::nullopt;
        if (!j[key].is_number()) throw_error("{}: \"{}\" is not a number", path.string(), key);
        return j[key].get<float>();
    };
    s.temperature = number("temperature");
    if (auto k = number("top_k")) s.top_k = int32_t(*k);
    s.top_p = number("top_p");
    s.min_p = number("min_p");
    s.repeat_penalty = number("repetition_penalty");
    if (j.contains("do_sample") && j["do_sample"].is_boolean() && !j["do_sample"].get<bool>()) s.temperature = 0.0f;
    check_sampling_settings(s, path.string());
    return s;
}

ConvertSource open_hf_source(const std::string& dir, const std::string& tokenizer_path) {
    std::string config_path = (fs::path(dir) / "config.json").string();
    if (!fs::is_regular_file(config_path))
        throw_error("{}: no config.json (expected a Hugging Face model directory with config.json and "
                    "model.safetensors)",
                    dir);
    ConvertSource src;
    src.kind = "hf";
    ModelConfig& c = src.metadata.config;
    c = hf_config_from_json(config_path);
    auto weights = std::shared_ptr<SafetensorsModel>(SafetensorsModel::open_dir(dir));
    if (!weights->find("lm_head.weight")) {
        // lm_head missing: tied, unless config.json says otherwise (then the head's weights are missing).
        json config = read_json(config_path);
        if (config.contains("tie_word_embeddings") && config["tie_word_embeddings"] == false)
            throw_error("{}: \"tie_word_embeddings\" = false, but the checkpoint has no lm_head.weight (the output "
                        "head's weights are missing)",
                        config_path);
        c.tied_embeddings = true;
    }
    const SafetensorsTensor& embd = weights->require_supported("model.embed_tokens.weight");
    src.default_dtype = embd.dtype;

    // Resolve and shape-check every tensor up front so a bad checkpoint fails before writing anything.
    src.tensors = expected_tensors(c, src.default_dtype);
    std::vector<const SafetensorsTensor*> parts;
    for (const TensorInfo& t : src.tensors) {
        const SafetensorsTensor& st = weights->require_supported(hf_name(t.name));
        if (st.shape != t.shape)
            throw_error("{}: tensor '{}' has shape {}, expected {} from config.json", st.path, st.name,
                        shape_string(st.shape), shape_string(t.shape));
        parts.push_back(&st);
    }
    // Every tensor of the checkpoint is used: one kvlm does not read (q_norm, k_norm, an output bias, ...) would
    // change the computation. Only rotary_emb.inv_freq (older checkpoints' saved RoPE buffer, which kvlm computes
    // from rope_theta) may be left.
    std::set<std::string> used;
    for (const TensorInfo& t : src.tensors) used.insert(hf_name(t.name));
    if (c.tied_embeddings) used.insert("lm_head.weight");  // a tied checkpoint may store the head's copy
    const std::string kRopeBuffer = "rotary_emb.inv_freq";
    for (const std::string& name : weights->names()) {
        if (used.count(name) || (name.size() >= kRopeBuffer.size() &&
                                 name.compare(name.size() - kRopeBuffer.size(), kRopeBuffer.size(), kRopeBuffer) == 0))
            continue;
        throw_error("{}: tensor '{}' is not used by kvlm's {} (its computation would be left out); kvlm does not "
                    "implement it",
                    dir, name, c.architecture);
    }
    src.read_rows = [weights, parts, tensors = src.tensors](size_t i, int64_t row, int64_t n_rows, float* out) {
        int64_t row_len = tensor_row_len(tensors[i]);
        safetensors_read_f32(*parts[i], row * row_len, n_rows * row_len, out);
    };

    // Tokenizer: --tokenizer, else the directory's own files.
    TokenizerData& tok = src.metadata.tokenizer;
    if (!tokenizer_path.empty()) {
        tok = load_tokenizer_source(tokenizer_path, c.n_vocab);
    } else if (has_file(dir, "tokenizer.json")) {
        std::string cfg = has_file(dir, "tokenizer_config.json") ? (fs::path(dir) / "tokenizer_config.json").string()
                                                                 : std::string();
        tok = tokenizer_from_hf_json((fs::path(dir) / "tokenizer.json").string(), cfg);
    } else if ((has_file(dir, "vocab.json") && has_file(dir, "merges.txt")) || has_file(dir, "tokenizer.model")) {
        tok = load_tokenizer_source(dir, c.n_vocab);
    } else {
        throw_error("{}: no tokenizer.json, vocab.json + merges.txt or tokenizer.model; pass --tokenizer PATH "
                    "(a tokenizer file or directory, a llama2.c tokenizer.bin, or a .gguf)",
                    dir);
    }
    add_generation_config_stops(dir, &tok);
    src.metadata.sampling = hf_sampling_defaults(dir);
    src.metadata.chat_template = hf_chat_template(dir);
    if (src.metadata.chat_template.empty() && !tokenizer_path.empty() && fs::is_directory(tokenizer_path))
        src.metadata.chat_template = hf_chat_template(tokenizer_path);
    src.metadata.source = "Hugging Face directory " + dir;
    return src;
}

}  // namespace kvlm
