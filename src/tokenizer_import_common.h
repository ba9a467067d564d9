// Helpers shared by the tokenizer importers (tokenizer_import_*.cpp): reading files, HF config JSON,
// and the finishing pass every importer runs. Internal to the importers.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer_data.h"

namespace kvlm::tokenizer_import {

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

// Places `piece` at `id` (growing the vocabulary with unused "<unused_N>" fillers) with type `type`.
void set_token(TokenizerData& data, int32_t id, const std::string& piece, TokenType type);

// Final pass: fills scores for "spm" if missing, adds well-known end-of-turn tokens (<|eot_id|>, <|im_end|>,
// <|end_of_text|>, ...) of control/user_defined type to stop_ids, removes duplicates, and checks the result
// with Tokenizer::validate (errors are prefixed with `source`).
void finish(TokenizerData& data, const std::string& source);

}  // namespace kvlm::tokenizer_import
