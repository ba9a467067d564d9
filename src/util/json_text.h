// A JSON value quoted in an error message, bounded: scalars as written (cut to 80 characters), arrays and
// objects by their size only. nlohmann's dump() recurses, so dumping a value from a hostile file that nests
// arrays a million levels deep would overflow the stack.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace kvlm {

inline std::string json_excerpt(const nlohmann::json& value) {
    if (value.is_array()) return "an array of " + std::to_string(value.size()) + " elements";
    if (value.is_object()) return "an object of " + std::to_string(value.size()) + " keys";
    std::string text = value.dump();
    return text.size() > 80 ? text.substr(0, 77) + "..." : text;
}

}  // namespace kvlm
