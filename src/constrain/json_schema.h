// JSON Schema (the subset docs/CONSTRAINED.md lists) and plain JSON, as regexes over the output text. The
// text is JSON as Python's json.dumps writes it - ", " between items, ": " after a key, no other
// whitespace - with properties in the schema's order. An unsupported keyword is an error naming it.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "constrain/regex.h"

namespace kvlm {

// Levels of arrays and objects inside a value whose shape no schema fixes (--json, {"type": "object"}).
constexpr int32_t kAnyJsonDepth = 4;

// Any JSON value (an object when object_only), nested at most kAnyJsonDepth deep.
RegexNode any_json_regex(bool object_only);

// `schema` as a regex; throws Error naming `what`, the keyword and its place (a JSON pointer), e.g.
// "--json-schema at /properties/age: unsupported keyword \"minimum\" (kvlm supports ...)".
RegexNode json_schema_regex(const nlohmann::ordered_json& schema, std::string_view what);

// Parses --json-schema's argument: JSON text when it starts with '{' (after spaces), else the path of a file
// holding it. Throws Error naming the file or the JSON syntax error.
nlohmann::ordered_json read_json_schema(const std::string& text_or_path);

// `value` as json.dumps writes it (", " and ": ", non-ASCII kept as UTF-8).
std::string python_style_json(const nlohmann::ordered_json& value);

}  // namespace kvlm
