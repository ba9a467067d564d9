// `kvlm inspect`: prints a .kvlm model's metadata, tensor table, fingerprint and KV-cache planning.
// Only the report goes to stdout (text or one JSON object); progress goes to stderr.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "compute/backend.h"
#include "format/model_file.h"
#include "util/byte_size.h"
#include "util/error.h"
#include "util/output.h"

namespace kvlm {

namespace {

std::string human_count(int64_t n) {
    if (n >= 1000000000) return fmt::format("{:.2f}B", n / 1e9);
    if (n >= 1000000) return fmt::format("{:.2f}M", n / 1e6);
    if (n >= 1000) return fmt::format("{:.1f}K", n / 1e3);
    return std::to_string(n);
}

// A token piece made printable: control bytes escaped, long pieces cut.
std::string printable(const std::string& s) {
    std::string out;
    for (unsigned char c : s) {
        if (c == '\n') out += "\\n";
        else if (c < 32 || c == 127) out += fmt::format("\\x{:02x}", c);
        else out += char(c);
    }
    return out.size() > 60 ? out.substr(0, 60) + "..." : out;
}

std::string token_label(const TokenizerData& t, int32_t id) {
    if (id < 0 || size_t(id) >= t.tokens.size()) return std::to_string(id);
    return fmt::format("{} '{}'", id, printable(t.tokens[size_t(id)]));
}

std::string first_line(const std::string& s) {
    size_t end = s.find('\n');
    return printable(end == std::string::npos ? s : s.substr(0, end));
}

struct KvPlan {
    DType dtype;
    uint64_t bytes_per_token;
};

std::vector<KvPlan> kv_plans(const ModelConfig& config) {
    std::vector<KvPlan> plans;
    for (DType d : {DType::f32, DType::f16, DType::bf16}) plans.push_back({d, kv_bytes_per_token(config, d)});
    return plans;
}

void print_text(const ModelFile& model, const std::vector<std::pair<std::string, uint64_t>>& budgets, bool verified) {
    const ModelMetadata& m = model.metadata();
    const ModelConfig& c = m.config;
    const TokenizerData& t = m.tokenizer;
    std::string out;
    auto line = [&out](const std::string& s) { out += s + "\n"; };

    line(fmt::format("model:        {}", model.path()));
    line(fmt::format("source:       {}", m.source.empty() ? "(unknown)" : m.source));
    line(fmt::format("file size:    {} bytes ({})", model.file_size(), byte_size_display(model.file_size(), 2)));
    line(fmt::format("fingerprint:  {}", model.fingerprint()));
    line("");
    line(fmt::format("architecture: {}", c.architecture));
    line(fmt::format("  n_vocab          {}", c.n_vocab));
    line(fmt::format("  n_embd           {}", c.n_embd));
    line(fmt::format("  n_layers         {}", c.n_layers));
    line(fmt::format("  n_heads          {}", c.n_heads));
    line(fmt::format("  n_kv_heads       {}{}", c.n_kv_heads,
                     c.n_kv_heads < c.n_heads ? fmt::format(" (GQA, {} query heads per KV head)", c.n_heads / c.n_kv_heads) : ""));
    line(fmt::format("  head_dim         {}", c.head_dim));
    line(fmt::format("  n_ff             {}", c.n_ff));
    line(fmt::format("  n_ctx            {}", c.n_ctx));
    line(fmt::format("  rope_theta       {}", c.rope_theta));
    if (c.rope_scaling.type == "none") {
        line("  rope_scaling     none");
    } else {
        line(fmt::format("  rope_scaling     {} (factor {}, low_freq_factor {}, high_freq_factor {}, "
                         "original_max_position {})", c.rope_scaling.type, c.rope_scaling.factor,
                         c.rope_scaling.low_freq_factor, c.rope_scaling.high_freq_factor,
                         c.rope_scaling.original_max_position));
    }
    line(fmt::format("  norm_eps         {}", c.norm_eps));
    line(fmt::format("  tied_embeddings  {}", c.tied_embeddings ? "yes" : "no"));
    line(fmt::format("  qkv_bias         {}", c.qkv_bias ? "yes" : "no"));
    int64_t n_params = 0;
    for (const TensorInfo& info : model.tensors()) n_params += element_count(info.shape);
    line(fmt::format("  parameters       {} ({})", n_params, human_count(n_params)));
    line("");
    line(fmt::format("tokenizer:    {} (pre-tokenizer {}), {} tokens, {} merges{}", t.type, t.pre, t.tokens.size(),
                     t.merges.size(),
                     t.merges.empty() ? "" : t.merge_ids.empty() ? " (resolved at every load)" : " (their ids stored)"));
    line(fmt::format("  bos {}, eos {}, unk {}, pad {}", token_label(t, t.bos_id), token_label(t, t.eos_id),
                     token_label(t, t.unk_id), token_label(t, t.pad_id)));
    std::string stops;
    for (int32_t id : t.stop_ids) stops += (stops.empty() ? "" : ", ") + token_label(t, id);
    line(fmt::format("  stop ids [{}]", stops));
    line(fmt::format("  add_bos {}, add_space_prefix {}", t.add_bos ? "yes" : "no", t.add_space_prefix ? "yes" : "no"));
    if (m.chat_template.empty()) line("chat template: none");
    else line(fmt::format("chat template: yes ({} bytes), first line: {}", m.chat_template.size(), first_line(m.chat_template)));
    line(fmt::format("sampling defaults: {}", m.sampling.empty() ? "none (kvlm's apply)" : m.sampling.to_string()));
    line("");

    size_t name_width = 4;
    size_t dtype_width = 5;  // "dtype"
    for (const TensorInfo& info : model.tensors()) {
        name_width = std::max(name_width, info.name.size());
        dtype_width = std::max(dtype_width, std::strlen(dtype_name(info.dtype)));
    }
    line(fmt::format("tensors: {} ({})", model.tensors().size(), tensor_type_counts(model.tensors())));
    line(fmt::format("  {:<{}}  {:<{}}  {:<14}  {:>14}", "name", name_width, "dtype", dtype_width, "shape", "bytes"));
    uint64_t total = 0;
    for (const TensorInfo& info : model.tensors()) {
        line(fmt::format("  {:<{}}  {:<{}}  {:<14}  {:>14}", info.name, name_width, dtype_name(info.dtype),
                         dtype_width, shape_string(info.shape), info.n_bytes));
        total += info.n_bytes;
    }
    line(fmt::format("  total tensor bytes: {} ({})", total, byte_size_display(total, 2)));
    line("");

    line(fmt::format("KV cache: {} layers x 2 (K, V) x {} KV heads x head_dim {} per token", c.n_layers, c.n_kv_heads,
                     c.head_dim));
    std::string header = fmt::format("  {:<8}  {:>12}  {:>22}", "kv dtype", "bytes/token", fmt::format("n_ctx {}", c.n_ctx));
    for (const auto& budget : budgets) header += fmt::format("  {:>16}", "tokens in " + budget.first);
    line(header);
    for (const KvPlan& plan : kv_plans(c)) {
        std::string row = fmt::format("  {:<8}  {:>12}  {:>22}", dtype_name(plan.dtype), plan.bytes_per_token,
                                      byte_size_display(plan.bytes_per_token * uint64_t(c.n_ctx), 2));
        for (const auto& budget : budgets) row += fmt::format("  {:>16}", budget.second / plan.bytes_per_token);
        line(row);
    }
    if (verified) line(fmt::format("\nverified {} tensors", model.tensors().size()));
    write_stdout(out);
}

void print_json(const ModelFile& model, const std::vector<std::pair<std::string, uint64_t>>& budgets, bool verify) {
    using nlohmann::json;
    const ModelMetadata& m = model.metadata();
    const ModelConfig& c = m.config;
    const TokenizerData& t = m.tokenizer;
    json j;
    j["path"] = model.path();
    j["source"] = m.source;
    j["file_size"] = model.file_size();
    j["fingerprint"] = model.fingerprint();
    j["config"] = {{"architecture", c.architecture}, {"n_vocab", c.n_vocab}, {"n_embd", c.n_embd},
                   {"n_layers", c.n_layers}, {"n_heads", c.n_heads}, {"n_kv_heads", c.n_kv_heads},
                   {"head_dim", c.head_dim}, {"n_ff", c.n_ff}, {"n_ctx", c.n_ctx}, {"rope_theta", c.rope_theta},
                   {"rope_scaling", {{"type", c.rope_scaling.type}, {"factor", c.rope_scaling.factor},
                                     {"low_freq_factor", c.rope_scaling.low_freq_factor},
                                     {"high_freq_factor", c.rope_scaling.high_freq_factor},
                                     {"original_max_position", c.rope_scaling.original_max_position}}},
                   {"norm_eps", c.norm_eps}, {"tied_embeddings", c.tied_embeddings}, {"qkv_bias", c.qkv_bias}};
    j["tokenizer"] = {{"type", t.type}, {"pre", t.pre}, {"n_vocab", t.tokens.size()}, {"n_merges", t.merges.size()},
                      {"merge_ids_stored", !t.merge_ids.empty()},
                      {"bos_id", t.bos_id}, {"eos_id", t.eos_id}, {"unk_id", t.unk_id}, {"pad_id", t.pad_id},
                      {"stop_ids", t.stop_ids}, {"add_bos", t.add_bos}, {"add_space_prefix", t.add_space_prefix}};
    j["chat_template"] = {{"present", !m.chat_template.empty()}, {"bytes", m.chat_template.size()},
                          {"first_line", first_line(m.chat_template)}};
    // Only the defaults the model file sets (run flags' names); {} when it sets none.
    json sampling = json::object();
    for_each_sampling_field([&](const char* name, auto member) {
        if (const auto& value = m.sampling.*member) sampling[name] = *value;
    });
    j["sampling_defaults"] = sampling;
    json tensors = json::array();
    int64_t n_params = 0;
    uint64_t total = 0;
    for (const TensorInfo& info : model.tensors()) {
        tensors.push_back({{"name", info.name}, {"dtype", dtype_name(info.dtype)}, {"shape", info.shape},
                           {"offset", info.offset}, {"bytes", info.n_bytes},
                           {"checksum", fmt::format("{:016x}", info.checksum)}});
        n_params += element_count(info.shape);
        total += info.n_bytes;
    }
    j["n_params"] = n_params;
    j["tensors"] = tensors;
    j["total_tensor_bytes"] = total;
    json kv = json::array();
    for (const KvPlan& plan : kv_plans(c)) {
        json fits = json::object();
        for (const auto& budget : budgets) fits[budget.first] = budget.second / plan.bytes_per_token;
        kv.push_back({{"dtype", dtype_name(plan.dtype)}, {"bytes_per_token", plan.bytes_per_token},
                      {"n_ctx_bytes", plan.bytes_per_token * uint64_t(c.n_ctx)}, {"tokens_in_budget", fits}});
    }
    j["kv_cache"] = kv;
    if (verify) j["verified_tensors"] = model.tensors().size();
    std::string text = j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
    write_stdout(text);
}

}  // namespace

int cmd_inspect(const InspectOptions& options) {
    std::vector<std::pair<std::string, uint64_t>> budgets;
    if (options.kv_mem.empty()) budgets = {{"1GiB", 1ull << 30}, {"8GiB", 8ull << 30}, {"80GiB", 80ull << 30}};
    else budgets = {{options.kv_mem, parse_byte_size(options.kv_mem, "--kv-mem")}};

    auto model = ModelFile::open(options.model_path);
    if (options.verify) {
        std::fprintf(stderr, "verifying %zu tensors (%s)...\n", model->tensors().size(),
                     byte_size_display(model->file_size(), 2).c_str());
        model->verify();  // throws naming the first corrupted tensor; nothing was printed on stdout yet
    }
    if (options.json) print_json(*model, budgets, options.verify);
    else print_text(*model, budgets, options.verify);
    return 0;
}

}  // namespace kvlm
