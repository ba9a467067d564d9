// Tokenizers in Hugging Face formats: tokenizer.json (BPE model, byte-level or SentencePiece-style) and
// GPT-2 style vocab.json + merges.txt, each with the added tokens and settings of tokenizer_config.json.
#include <algorithm>
#include <unordered_map>

#include "import/tokenizer/common.h"
#include "import/tokenizer/tokenizer_import.h"
#include "util/error.h"
#include "util/json_text.h"

namespace kvlm {

namespace {

using nlohmann::json;
using namespace tokenizer_import;

// HF's original pre-tokenizer regexes (Split pre-tokenizers) of the models kvlm knows.
const char* const kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Flattens a pre-tokenizer / decoder / normalizer (possibly a Sequence) into its components.
void flatten(const json& node, std::vector<json>& out) {
    if (!node.is_object()) return;
    const std::string type = node.value("type", "");
    if (type == "Sequence") {
        for (const char* key : {"pretokenizers", "decoders", "normalizers"})
            if (node.contains(key) && node[key].is_array())
                for (const auto& child : node[key]) flatten(child, out);
        return;
    }
    out.push_back(node);
}

bool has_type(const std::vector<json>& nodes, const std::string& type) {
    return std::any_of(nodes.begin(), nodes.end(), [&](const json& n) { return n.value("type", "") == type; });
}

// Names the pre-tokenizer of a byte-level tokenizer.json from its pre_tokenizer section.
std::string infer_pre(const json& pre_tokenizer, const std::string& path) {
    std::vector<json> parts;
    flatten(pre_tokenizer, parts);
    bool digits = false, byte_level_regex = false;
    std::string split_regex;
    for (const json& p : parts) {
        const std::string type = p.value("type", "");
        if (type == "Digits" && p.value("individual_digits", false)) digits = true;
        if (type == "ByteLevel" && p.value("use_regex", true)) byte_level_regex = true;
        if (type == "Split" && p.contains("pattern") && p["pattern"].is_object() && p["pattern"].contains("Regex"))
            split_regex = p["pattern"]["Regex"].get<std::string>();
    }
    if (!split_regex.empty()) {
        if (split_regex == kLlama3Regex) return "llama3";
        if (split_regex == kQwen2Regex) return "qwen2";
        throw_error("{}: pre_tokenizer Split regex '{}' is not one kvlm knows (llama3, qwen2)", path, split_regex);
    }
    if (digits && byte_level_regex) return "smollm";
    if (byte_level_regex && parts.size() == 1) return "gpt2";
    throw_error("{}: pre_tokenizer {} is not one kvlm knows, expected ByteLevel (gpt2), Digits + ByteLevel (smollm) "
                "or a Split with the llama3/qwen2 regex",
                path, json_excerpt(pre_tokenizer));
}

std::string merge_string(const json& merge, size_t index, const std::string& path) {
    if (merge.is_string()) return merge.get<std::string>();
    if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string())
        return merge[0].get<std::string>() + " " + merge[1].get<std::string>();
    throw_error("{}: model.merges[{}] is {}, expected \"a b\" or [\"a\", \"b\"]", path, index, json_excerpt(merge));
}

// vocab: {"piece": id, ...} -> tokens (all normal).
void read_vocab(TokenizerData& data, const json& vocab, const std::string& path) {
    if (!vocab.is_object()) throw_error("{}: vocab is not an object of piece -> id", path);
    int64_t max_id = -1;
    for (const auto& [piece, id] : vocab.items()) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxTokenId)
            throw_error("{}: vocab entry '{}' has id {}, expected an integer 0..{}", path, piece, json_excerpt(id), kMaxTokenId);
        max_id = std::max(max_id, id.get<int64_t>());
    }
    data.tokens.assign(static_cast<size_t>(max_id + 1), "");
    data.token_types.assign(data.tokens.size(), static_cast<int32_t>(TokenType::unused));
    for (const auto& [piece, id] : vocab.items()) {
        data.tokens[id.get<size_t>()] = piece;
        data.token_types[id.get<size_t>()] = static_cast<int32_t>(TokenType::normal);
    }
    for (size_t id = 0; id < data.tokens.size(); ++id)
        if (data.token_types[id] == static_cast<int32_t>(TokenType::unused)) data.tokens[id] = fmt::format("<unused_{}>", id);
}

bool is_byte_piece(const std::string& piece) {
    return piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 && piece[5] == '>';
}

// SentencePiece-style BPE (Llama 2 / Mistral tokenizer.json): the spm encoder needs scores; a merge's
// result scores above later merges, so -rank reproduces the merge order.
void make_spm_scores(TokenizerData& data) {
    data.scores.assign(data.tokens.size(), -1e9f);  // pieces no merge produces sort last
    std::unordered_map<std::string, int32_t> ids;
    for (size_t id = 0; id < data.tokens.size(); ++id) ids.emplace(data.tokens[id], static_cast<int32_t>(id));
    std::vector<bool> seen(data.tokens.size(), false);
    for (size_t rank = 0; rank < data.merges.size(); ++rank) {
        const std::string& m = data.merges[rank];
        const size_t space = m.find(' ');
        if (space == std::string::npos) continue;
        auto it = ids.find(m.substr(0, space) + m.substr(space + 1));
        if (it != ids.end() && !seen[it->second]) {
            data.scores[it->second] = -static_cast<float>(rank);
            seen[it->second] = true;
        }
    }
    for (size_t id = 0; id < data.tokens.size(); ++id)
        if (is_byte_piece(data.tokens[id]) && data.token_types[id] == static_cast<int32_t>(TokenType::normal))
            data.token_types[id] = static_cast<int32_t>(TokenType::byte);
    data.merges.clear();
}

TokenizerData read_hf_json(const json& root, const std::string& path, const std::string& config_path) {
    if (!root.is_object() || !root.contains("model") || !root["model"].is_object())
        throw_error("{}: expected a tokenizer.json object with a 'model' section", path);
    const json& model = root["model"];
    const std::string model_type = model.value("type", "BPE");
    if (model_type != "BPE")
        throw_error("{}: model.type is '{}', expected 'BPE' (WordPiece and Unigram are not supported)", path, model_type);
    if (!model.contains("vocab") || !model.contains("merges") || !model["merges"].is_array())
        throw_error("{}: model needs 'vocab' and a 'merges' array", path);

    TokenizerData data;
    read_vocab(data, model["vocab"], path);
    const json& merges = model["merges"];
    data.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) data.merges.push_back(merge_string(merges[i], i, path));

    std::vector<json> pre_parts, decoders, normalizers;
    flatten(root.value("pre_tokenizer", json()), pre_parts);
    flatten(root.value("decoder", json()), decoders);
    flatten(root.value("normalizer", json()), normalizers);
    const bool byte_level = has_type(pre_parts, "ByteLevel") || has_type(decoders, "ByteLevel");
    if (byte_level) {
        data.type = "bpe";
        data.pre = infer_pre(root.value("pre_tokenizer", json()), path);  // ByteLevel may be only in the decoder
    } else if (model.value("byte_fallback", false) || has_type(decoders, "ByteFallback") ||
               has_type(pre_parts, "Metaspace") || has_type(normalizers, "Prepend")) {
        data.type = "spm";
        data.add_space_prefix = has_type(normalizers, "Prepend");
        for (const json& p : pre_parts)
            if (p.value("type", "") == "Metaspace")
                data.add_space_prefix = p.value("add_prefix_space", false) || p.value("prepend_scheme", "") == "always" ||
                                        p.value("prepend_scheme", "") == "first";
        make_spm_scores(data);
    } else {
        throw_error("{}: cannot tell the tokenizer kind, expected a ByteLevel pre-tokenizer/decoder (byte-level BPE) "
                    "or byte_fallback / Metaspace (SentencePiece-style BPE)", path);
    }

    if (root.contains("added_tokens") && root["added_tokens"].is_array()) {
        for (const json& added : root["added_tokens"]) {
            if (!added.is_object() || !added.contains("id") || !added["id"].is_number_integer() ||
                !added.contains("content") || !added["content"].is_string())
                throw_error("{}: added_tokens entry {} needs an integer id and a string content", path, json_excerpt(added));
            set_token(data, added["id"].get<int64_t>(), added["content"].get<std::string>(),
                      added.value("special", false) ? TokenType::control : TokenType::user_defined, path);
        }
    }
    if (model.contains("unk_token") && model["unk_token"].is_string())
        data.unk_id = find_token(data, model["unk_token"].get<std::string>());
    // BOS added by a TemplateProcessing post-processor (Llama 3 / Llama 2 tokenizer.json).
    std::vector<json> post;
    flatten(root.value("post_processor", json()), post);
    for (const json& p : post) {
        if (p.value("type", "") != "TemplateProcessing" || !p.contains("single") || !p["single"].is_array()) continue;
        const json& first = p["single"].empty() ? json() : p["single"][0];
        if (first.is_object() && first.contains("SpecialToken")) {
            const int32_t id = find_token(data, first["SpecialToken"].value("id", ""));
            if (id >= 0) {
                data.bos_id = id;
                data.add_bos = true;
            }
        }
    }
    if (!config_path.empty()) apply_tokenizer_config(data, config_path);
    finish(data, path);
    return data;
}

}  // namespace

TokenizerData tokenizer_from_hf_json(const std::string& path, const std::string& config_path) {
    return with_json_errors(path, [&] { return read_hf_json(parse_json_file(path), path, config_path); });
}

TokenizerData tokenizer_from_vocab_merges(const std::string& vocab_json, const std::string& merges_txt) {
    TokenizerData data;
    data.type = "bpe";
    with_json_errors(vocab_json, [&] { read_vocab(data, parse_json_file(vocab_json), vocab_json); });
    const size_t n_regular = data.tokens.size();

    const std::string text = read_text_file(merges_txt);
    size_t line_no = 0;
    for (size_t pos = 0; pos < text.size();) {
        size_t end = text.find('\n', pos);
        if (end == std::string::npos) end = text.size();
        std::string line = text.substr(pos, end - pos);
        pos = end + 1;
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
        const size_t space = line.find(' ');
        if (space == std::string::npos || space == 0 || space + 1 == line.size() || line.find(' ', space + 1) != std::string::npos)
            throw_error("{}:{}: merge line is '{}', expected two pieces separated by one space", merges_txt, line_no, line);
        data.merges.push_back(line);
    }

    const std::string added_path = sibling_path(vocab_json, "added_tokens.json");
    if (file_exists(added_path)) {
        const json added = parse_json_file(added_path);
        if (!added.is_object()) throw_error("{}: expected an object of token -> id", added_path);
        for (const auto& [content, id] : added.items()) {
            if (!id.is_number_integer()) throw_error("{}: id of '{}' is {}, expected an integer", added_path, content, json_excerpt(id));
            set_token(data, id.get<int64_t>(), content, TokenType::control, added_path);
        }
    }
    // Qwen2's vocabulary is GPT-2 style on disk but pre-tokenizes like Llama 3 with single digits.
    bool qwen = n_regular == 151643;
    const std::string model_config = sibling_path(vocab_json, "config.json");
    if (file_exists(model_config)) {
        const json config = parse_json_file(model_config);
        if (config.is_object() && config.contains("model_type") && config["model_type"].is_string() &&
            config["model_type"].get<std::string>().rfind("qwen", 0) == 0)
            qwen = true;
    }
    data.pre = qwen ? "qwen2" : "gpt2";
    data.eos_id = find_token(data, "<|endoftext|>");
    const std::string config = sibling_path(vocab_json, "tokenizer_config.json");
    if (file_exists(config)) apply_tokenizer_config(data, config);
    finish(data, vocab_json);
    return data;
}

}  // namespace kvlm
