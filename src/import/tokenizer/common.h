// Helpers shared by the tokenizer importers (tokenizer_import_*.cpp): reading files, HF config JSON,
// and the finishing pass every importer runs. Internal to the importers.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "format/tokenizer_data.h"
#include "util/error.h"

namespace kvlm::tokenizer_import {

// Largest token id an importer accepts: 4x the largest real vocabularies (Gemma's 262144). Fillers for the
// ids below an added token are created, so a hostile id of 2^31 must not mean 2^31 strings.
constexpr int64_t kMaxTokenId = (int64_t(1) << 20) - 1;

// Runs `read`, which walks the parsed JSON of `path`, turning nlohmann's exceptions (a field of the wrong
// type, e.g. a number where a string belongs) into an Error naming the file.
template <typename Read>
auto with_json_errors(const std::string& path, Read&& read) -> decltype(read()) {
    try {
        return read();
    } catch (const nlohmann::json::exception& e) {
        throw_error("{}: unexpected JSON structure: {}", path, e.what());
    }
}

std::string read_text_file(const std::string& path);  // throws Error naming the path
nlohmann::json parse_json_file(const std::string& path);  // throws Error naming the path and the parse error
bool file_exists(const std::string& path);
std::string sibling_path(const std::string& path, const std::string& name);  // same directory, other file

// Id of the token whose piece is `piece`, -1 if none.
int32_t find_token(const TokenizerData& data, const std::string& piece);
// HF special-token fields are a string or {"content": ...}; "" when null or absent.
std::string special_token_content(const nlohmann::json& value);

// Applies tokenizer_config.json: added_tokens_decoder (piece + control/user_defined at fixed ids, growing
// the vocabulary if needed), bos/eos/unk/pad tokens and add_bos_token.
void apply_tokenizer_config(TokenizerData& data, const std::string& config_path);

// Places `piece` at `id` (growing the vocabulary with unused "<unused_N>" fillers) with type `type`;
// throws for ids outside 0..kMaxTokenId, naming `source` (the file).
void set_token(TokenizerData& data, int64_t id, const std::string& piece, TokenType type, const std::string& source);

// Final pass: fills scores for "spm" if missing, adds well-known end-of-turn tokens (<|eot_id|>, <|im_end|>,
// <|end_of_text|>, ...) of control/user_defined type to stop_ids, removes duplicates, and checks the result
// with Tokenizer::validate (errors are prefixed with `source`).
void finish(TokenizerData& data, const std::string& source);

}  // namespace kvlm::tokenizer_import
