// load_tokenizer_source (dispatch by path) and the helpers shared by the tokenizer importers.
#include "import/tokenizer/tokenizer_import.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "import/gguf.h"
#include "import/tokenizer/common.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace kvlm {

namespace tokenizer_import {

namespace fs = std::filesystem;

std::string read_text_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw_error("{}: cannot open file", path);
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) throw_error("{}: read error", path);
    return ss.str();
}

nlohmann::json parse_json_file(const std::string& path) {
    const std::string text = read_text_file(path);
    try {
        return nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        throw_error("{}: invalid JSON: {}", path, e.what());
    }
}

bool file_exists(const std::string& path) {
    std::error_code ec;
    return fs::is_regular_file(path, ec);
}

std::string sibling_path(const std::string& path, const std::string& name) {
    return (fs::path(path).parent_path() / name).string();
}

int32_t find_token(const TokenizerData& data, const std::string& piece) {
    auto it = std::find(data.tokens.begin(), data.tokens.end(), piece);
    return it == data.tokens.end() ? -1 : static_cast<int32_t>(it - data.tokens.begin());
}

std::string special_token_content(const nlohmann::json& value) {
    if (value.is_string()) return value.get<std::string>();
    if (value.is_object() && value.contains("content") && value["content"].is_string())
        return value["content"].get<std::string>();
    return "";
}

void set_token(TokenizerData& data, int64_t id, const std::string& piece, TokenType type, const std::string& source) {
    if (id < 0 || id > kMaxTokenId)
        throw_error("{}: token id {} for '{}' is out of range, expected 0..{}", source, id, piece, kMaxTokenId);
    while (static_cast<int32_t>(data.tokens.size()) <= id) {
        data.tokens.push_back(fmt::format("<unused_{}>", data.tokens.size()));
        data.token_types.push_back(static_cast<int32_t>(TokenType::unused));
        if (!data.scores.empty()) data.scores.push_back(0.0f);
    }
    data.tokens[id] = piece;
    data.token_types[id] = static_cast<int32_t>(type);
}

namespace {

void apply_config_json(TokenizerData& data, const nlohmann::json& config, const std::string& config_path) {
    if (!config.is_object()) throw_error("{}: expected a JSON object at the top level", config_path);
    if (config.contains("added_tokens_decoder")) {
        const auto& added = config["added_tokens_decoder"];
        if (!added.is_object()) throw_error("{}: added_tokens_decoder is not an object", config_path);
        for (const auto& [key, value] : added.items()) {
            // A whole decimal number: std::stoll alone would take "12abc" as 12.
            int64_t id = -1;
            size_t used = 0;
            try {
                id = std::stoll(key, &used);
            } catch (const std::exception&) {
                used = 0;
            }
            if (used == 0 || used != key.size() || !std::isdigit(static_cast<unsigned char>(key[0])))
                throw_error("{}: added_tokens_decoder key '{}' is not a token id", config_path, key);
            const std::string content = special_token_content(value);
            if (content.empty()) throw_error("{}: added token {} has no content", config_path, key);
            const bool special = value.is_object() && value.value("special", false);
            set_token(data, id, content, special ? TokenType::control : TokenType::user_defined, config_path);
        }
    }
    auto lookup = [&](const char* field, int32_t& id) {
        if (!config.contains(field)) return;
        const std::string content = special_token_content(config[field]);
        if (content.empty()) return;
        const int32_t found = find_token(data, content);
        if (found < 0) throw_error("{}: {} '{}' is not in the vocabulary", config_path, field, content);
        id = found;
    };
    lookup("bos_token", data.bos_id);
    lookup("eos_token", data.eos_id);
    lookup("unk_token", data.unk_id);
    lookup("pad_token", data.pad_id);
    if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean())
        data.add_bos = config["add_bos_token"].get<bool>();
}

}  // namespace

void apply_tokenizer_config(TokenizerData& data, const std::string& config_path) {
    with_json_errors(config_path, [&] { apply_config_json(data, parse_json_file(config_path), config_path); });
}

void finish(TokenizerData& data, const std::string& source) {
    if (data.token_types.empty()) data.token_types.assign(data.tokens.size(), static_cast<int32_t>(TokenType::normal));
    if (data.type == "spm" && data.scores.empty()) data.scores.assign(data.tokens.size(), 0.0f);
    // End-of-turn markers of chat models, by name (llama.cpp does the same).
    static const char* const end_names[] = {"<|eot_id|>", "<|im_end|>",      "<|end|>",         "<|endoftext|>",
                                            "<|eom_id|>", "<|end_of_text|>", "<end_of_turn>",   "<|EOT|>",
                                            "<EOT>"};
    for (const char* name : end_names) {
        const int32_t id = find_token(data, name);
        if (id < 0) continue;
        const auto type = static_cast<TokenType>(data.token_types[id]);
        if (type == TokenType::control || type == TokenType::user_defined) data.stop_ids.push_back(id);
    }
    std::vector<int32_t> unique;
    for (int32_t id : data.stop_ids)
        if (id != data.eos_id && std::find(unique.begin(), unique.end(), id) == unique.end()) unique.push_back(id);
    data.stop_ids = unique;
    if (data.add_bos && data.bos_id < 0) data.add_bos = false;  // nothing to add
    try {
        Tokenizer::validate(data);
    } catch (const Error& e) {
        throw_error("{}: {}", source, e.what());
    }
}

}  // namespace tokenizer_import

namespace {

bool starts_with_bytes(const std::string& path, const std::string& magic) {
    std::ifstream in(path, std::ios::binary);
    std::string head(magic.size(), '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    return in && head == magic;
}

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// tiktoken files are text lines "base64 rank"; SentencePiece models are binary protobuf.
bool looks_like_tiktoken(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::string line;
    if (!std::getline(in, line)) return false;
    const size_t space = line.find(' ');
    if (space == std::string::npos || space == 0) return false;
    for (size_t i = 0; i < line.size(); ++i) {
        const char c = line[i];
        if (i == space || c == '\r') continue;
        const bool ok = i < space ? (std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '/' || c == '=')
                                  : std::isdigit(static_cast<unsigned char>(c));
        if (!ok) return false;
    }
    return true;
}

}  // namespace

TokenizerData load_tokenizer_source(const std::string& path, int32_t n_vocab_hint) {
    using namespace tokenizer_import;
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
        const auto in_dir = [&](const char* name) { return (fs::path(path) / name).string(); };
        const std::string config = file_exists(in_dir("tokenizer_config.json")) ? in_dir("tokenizer_config.json") : "";
        // A SentencePiece model is read exactly (scores included), so it is preferred over the tokenizer.json
        // that HF derives from it; added tokens and bos/eos settings still come from tokenizer_config.json.
        const std::string model = in_dir("tokenizer.model");
        if (file_exists(model) && !looks_like_tiktoken(model)) {
            TokenizerData data = tokenizer_from_sentencepiece(model);
            if (!config.empty()) {
                apply_tokenizer_config(data, config);
                finish(data, config);
            }
            return data;
        }
        if (file_exists(in_dir("tokenizer.json"))) return tokenizer_from_hf_json(in_dir("tokenizer.json"), config);
        if (file_exists(in_dir("vocab.json")) && file_exists(in_dir("merges.txt")))
            return tokenizer_from_vocab_merges(in_dir("vocab.json"), in_dir("merges.txt"));
        if (file_exists(model)) return load_tokenizer_source(model);
        if (file_exists(in_dir("tokenizer.bin"))) return tokenizer_from_llama2c(in_dir("tokenizer.bin"), n_vocab_hint);
        throw_error("{}: no tokenizer found, expected tokenizer.json, vocab.json + merges.txt, tokenizer.model or "
                    "tokenizer.bin in this directory", path);
    }
    if (!file_exists(path)) throw_error("{}: no such tokenizer file", path);
    if (ends_with(path, ".json")) {
        const std::string config = sibling_path(path, "tokenizer_config.json");
        return tokenizer_from_hf_json(path, file_exists(config) ? config : "");
    }
    if (starts_with_bytes(path, "GGUF")) {
        auto gguf = GgufFile::open(path);
        return tokenizer_from_gguf(*gguf);
    }
    if (ends_with(path, ".model")) {
        if (looks_like_tiktoken(path)) {
            const std::string config = sibling_path(path, "tokenizer_config.json");
            return tokenizer_from_tiktoken(path, file_exists(config) ? config : "");
        }
        return tokenizer_from_sentencepiece(path);
    }
    if (ends_with(path, ".bin")) return tokenizer_from_llama2c(path, n_vocab_hint);
    throw_error("{}: unknown tokenizer format, expected a directory, tokenizer.json, tokenizer.model, a llama2.c "
                "tokenizer .bin or a .gguf", path);
}

}  // namespace kvlm
