// Schema -> regex, keyword by keyword. Optional properties: the body of an object is an alternation over
// which property comes first (every one before it being optional), so commas are always right.
#include "constrain/json_schema.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "util/error.h"
#include "util/json_text.h"

namespace kvlm {

using Json = nlohmann::ordered_json;

namespace {

// Bounds: schemas that nest deeper, or $refs that expand deeper, are refused (recursive $defs included).
constexpr int32_t kMaxSchemaDepth = 32;
constexpr int32_t kMaxRefDepth = 16;
constexpr int32_t kMaxNumberDigits = 16;  // integer digits (and fraction digits) a number may have
// Regex nodes a schema may expand to, counted as they are made: a $ref is compiled anew wherever it is used, and
// an object's optional properties are copied once per member that may come first, so a 1 KB schema of nested
// $refs can ask for billions. About 100 bytes a node: the tree stays under ~30 MB, and a schema past it stops
// in well under a second, naming the place that pushed it over.
constexpr size_t kMaxSchemaNodes = 300'000;
constexpr size_t kMaxSchemaBytes = size_t(1) << 20;  // a --json-schema file

RegexNode lit(std::string_view text) { return RegexNode::literal(text); }
RegexNode re(std::string_view pattern) { return parse_regex(pattern, "kvlm's built-in pattern"); }

// Characters a JSON string holds without an escape.
CharSet plain_string_chars() { return complement(normalized({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}})); }

// One character of a JSON string: plain, or an escape (no \u escape of a surrogate: lengths count characters).
RegexNode string_char() {
    return RegexNode::either({RegexNode::one_of(plain_string_chars()),
                              re(R"(\\(["\\/bfnrt]|u([0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2})))")});
}

RegexNode quoted(RegexNode content) { return RegexNode::sequence({lit("\""), std::move(content), lit("\"")}); }

RegexNode any_string() { return quoted(RegexNode::repeated(string_char(), 0, -1)); }

RegexNode integer_regex() { return re("-?(0|[1-9][0-9]{0,15})"); }
RegexNode number_regex() { return re("-?(0|[1-9][0-9]{0,15})(\\.[0-9]{1,16})?([eE][+-]?[0-9]{1,3})?"); }

// "[" items "]" with n_min..n_max items (n_max < 0: unbounded).
RegexNode array_of(const RegexNode& item, int32_t n_min, int32_t n_max) {
    if (n_max == 0) return lit("[]");
    RegexNode rest =
        RegexNode::repeated(RegexNode::sequence({lit(", "), item}), std::max(n_min - 1, 0), n_max < 0 ? -1 : n_max - 1);
    RegexNode items = RegexNode::sequence({item, std::move(rest)});
    if (n_min == 0) items = RegexNode::optional(std::move(items));
    return RegexNode::sequence({lit("["), std::move(items), lit("]")});
}

RegexNode any_value(int32_t levels);

// "{" members "}" where every member is a string key and a value from `value`.
RegexNode map_of(const RegexNode& value) {
    RegexNode member = RegexNode::sequence({any_string(), lit(": "), value});
    RegexNode rest = RegexNode::repeated(RegexNode::sequence({lit(", "), member}), 0, -1);
    return RegexNode::sequence(
        {lit("{"), RegexNode::optional(RegexNode::sequence({member, std::move(rest)})), lit("}")});
}

RegexNode any_value(int32_t levels) {
    std::vector<RegexNode> options{any_string(), number_regex(), lit("true"), lit("false"), lit("null")};
    if (levels > 0) {
        RegexNode inner = any_value(levels - 1);
        options.push_back(map_of(inner));
        options.push_back(array_of(inner, 0, -1));
    }
    return RegexNode::either(std::move(options));
}

RegexNode format_regex(const std::string& format) {
    // Dates that exist in every year (no February 29th: a pattern cannot know leap years).
    static const char* kDate =
        "[0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|"
        "02-(0[1-9]|1[0-9]|2[0-8]))";
    static const char* kTime =
        "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
    if (format == "date") return re(kDate);
    if (format == "time") return re(kTime);
    if (format == "date-time") return re(std::string(kDate) + "T" + kTime);
    // Dot-separated atoms before the @ (no leading, trailing or doubled dot), host labels that neither start nor
    // end with '-', a letters-only top-level domain.
    if (format == "email")
        return re(
            "[a-zA-Z0-9_+-]{1,32}(\\.[a-zA-Z0-9_+-]{1,32}){0,2}@"
            "([a-zA-Z0-9]([a-zA-Z0-9-]{0,30}[a-zA-Z0-9])?\\.){1,3}[a-zA-Z]{2,12}");
    if (format == "uuid") return re("[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}");
    return RegexNode{};
}

void dump(const Json& v, std::string& out) {
    switch (v.type()) {
        case Json::value_t::object: {
            out += '{';
            bool first = true;
            for (auto it = v.begin(); it != v.end(); ++it) {
                if (!first) out += ", ";
                first = false;
                dump(Json(it.key()), out);
                out += ": ";
                dump(it.value(), out);
            }
            out += '}';
            break;
        }
        case Json::value_t::array: {
            out += '[';
            for (size_t i = 0; i < v.size(); i++) {
                if (i) out += ", ";
                dump(v[i], out);
            }
            out += ']';
            break;
        }
        case Json::value_t::string:
            // ensure_ascii off: UTF-8 stays as it is; dump() escapes quotes, backslashes and control characters.
            out += v.dump(-1, ' ', false, Json::error_handler_t::strict);
            break;
        default:
            out += v.dump();
    }
}

class SchemaCompiler {
public:
    SchemaCompiler(const Json& root, std::string_view what) : root_(root), what_(what) {}

    RegexNode compile(const Json& s, const std::string& at, int32_t depth) {
        if (depth > kMaxSchemaDepth) fail(at, fmt::format("the schema nests deeper than {} levels", kMaxSchemaDepth));
        if (s.is_boolean()) {
            if (!s.get<bool>()) fail(at, "the schema false allows no value");
            return counted(any_value(kAnyJsonDepth), at);
        }
        if (!s.is_object()) fail(at, fmt::format("a schema must be an object or a boolean, not {}", json_excerpt(s)));
        check_keywords(s, at);
        if (s.contains("$ref")) return ref(s, at, depth);
        for (const char* key : {"anyOf", "oneOf"}) {
            if (!s.contains(key)) continue;
            only_annotations_beside(s, key, at);
            const Json& branches = s[key];
            if (!branches.is_array() || branches.empty())
                fail(at, fmt::format("\"{}\" must be a non-empty array", key));
            std::vector<RegexNode> options;
            for (size_t i = 0; i < branches.size(); i++)
                options.push_back(compile(branches[i], fmt::format("{}/{}/{}", at, key, i), depth + 1));
            return RegexNode::either(std::move(options));
        }
        if (s.contains("const") || s.contains("enum")) return enumerated(s, at, depth);
        std::vector<std::string> types;
        if (s.contains("type")) {
            const Json& t = s["type"];
            if (t.is_string()) {
                types.push_back(t.get<std::string>());
            } else if (t.is_array() && !t.empty()) {
                for (const Json& e : t) {
                    if (!e.is_string()) fail(at, "\"type\" must be a string or an array of strings");
                    types.push_back(e.get<std::string>());
                }
            } else {
                fail(at, "\"type\" must be a string or a non-empty array of strings");
            }
        } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
            types.push_back("object");
        } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
            types.push_back("array");
        } else if (s.contains("pattern") || s.contains("format") || s.contains("minLength") ||
                   s.contains("maxLength")) {
            types.push_back("string");
        } else {
            return counted(any_value(kAnyJsonDepth), at);
        }
        std::vector<RegexNode> options;
        for (const std::string& type : types) options.push_back(of_type(s, type, at, depth));
        return RegexNode::either(std::move(options));
    }

private:
    const Json& root_;
    std::string_view what_;
    int32_t ref_depth_ = 0;
    size_t n_nodes_ = 0;  // regex nodes made so far (kMaxSchemaNodes)

    // Counts n more regex nodes made at `at`; past the budget, fails there before they are made.
    void charge(size_t n, const std::string& at) {
        n_nodes_ += n;
        if (n_nodes_ > kMaxSchemaNodes)
            fail(at, fmt::format("the schema expands to more than {} regex nodes here (every \"$ref\" is copied where "
                                 "it is used, an object's optional properties once per property that may come first, "
                                 "every enum value spelled out): nest fewer references, mark properties required "
                                 "or list fewer values",
                                 kMaxSchemaNodes));
    }
    RegexNode counted(RegexNode node, const std::string& at) {
        charge(regex_node_count(node), at);
        return node;
    }

    // "const" and "enum": the listed values' text, of which only what every other keyword beside them allows
    // (an output that is one of the values but fails its "type", "maxLength" or "properties" would fail the schema).
    RegexNode enumerated(const Json& s, const std::string& at, int32_t depth) {
        std::vector<RegexNode> allowed;
        if (s.contains("const")) allowed.push_back(lit(python_style_json(s["const"])));
        if (s.contains("enum")) {
            const Json& values = s["enum"];
            if (!values.is_array() || values.empty()) fail(at, "\"enum\" must be a non-empty array");
            std::vector<RegexNode> options;
            for (const Json& v : values) options.push_back(lit(python_style_json(v)));
            allowed.push_back(RegexNode::either(std::move(options)));
        }
        for (const RegexNode& values : allowed) charge(regex_node_count(values), at);
        Json rest = s;
        rest.erase("const");
        rest.erase("enum");
        for (auto it = rest.begin(); it != rest.end(); ++it) {
            if (!is_annotation(it.key()) && it.key() != "$defs" && it.key() != "definitions") {
                allowed.push_back(compile(rest, at, depth));
                break;
            }
        }
        RegexNode node = std::move(allowed[0]);
        for (size_t i = 1; i < allowed.size(); i++) node = RegexNode::both(std::move(node), std::move(allowed[i]));
        return node;
    }

    static std::string where(const std::string& at) { return at.empty() ? "the top level" : at; }
    [[noreturn]] void fail(const std::string& at, const std::string& why) const {
        throw_error("{} at {}: {}", what_, where(at), why);
    }

    void check_keywords(const Json& s, const std::string& at) const {
        static const std::set<std::string> kSupported = {"type",      "properties", "required", "additionalProperties",
                                                         "enum",      "const",      "items",    "minItems",
                                                         "maxItems",  "anyOf",      "oneOf",    "minLength",
                                                         "maxLength", "pattern",    "format",   "$ref",
                                                         "$defs",     "definitions"};
        for (auto it = s.begin(); it != s.end(); ++it)
            if (!kSupported.count(it.key()) && !is_annotation(it.key()))
                fail(at, fmt::format("unsupported keyword \"{}\" (kvlm supports type, properties, required, "
                                     "additionalProperties, enum, const, items, minItems, maxItems, anyOf, oneOf, "
                                     "minLength, maxLength, pattern, format, $ref and $defs; docs/CONSTRAINED.md)",
                                     it.key()));
    }

    static bool is_annotation(const std::string& key) {
        static const std::set<std::string> kAnnotations = {"title",    "description", "$schema", "$id",
                                                           "$comment", "examples",    "default", "deprecated",
                                                           "readOnly", "writeOnly"};
        return kAnnotations.count(key) > 0;
    }

    void only_annotations_beside(const Json& s, const char* key, const std::string& at) const {
        for (auto it = s.begin(); it != s.end(); ++it) {
            const std::string& k = it.key();
            if (k != key && k != "$defs" && k != "definitions" && k != "title" && k != "description" &&
                k != "$schema" && k != "$id" && k != "$comment" && k != "examples" && k != "default")
                fail(at, fmt::format("\"{}\" beside \"{}\" is not supported (move it into each branch)", k, key));
        }
    }

    RegexNode ref(const Json& s, const std::string& at, int32_t depth) {
        only_annotations_beside(s, "$ref", at);
        const Json& r = s["$ref"];
        if (!r.is_string()) fail(at, "\"$ref\" must be a string");
        const std::string target = r.get<std::string>();
        std::string name, folder;
        for (const char* prefix : {"#/$defs/", "#/definitions/"})
            if (target.rfind(prefix, 0) == 0)
                folder = std::string(prefix).substr(2, std::string(prefix).size() - 3),
                name = target.substr(std::string(prefix).size());
        if (name.empty() || name.find('/') != std::string::npos || name.find('~') != std::string::npos)
            fail(at,
                 fmt::format("\"$ref\": \"{}\" is not supported (only \"#/$defs/NAME\" in the same schema)", target));
        if (!root_.is_object() || !root_.contains(folder) || !root_[folder].is_object() ||
            !root_[folder].contains(name))
            fail(at, fmt::format("\"$ref\": \"{}\" names no definition", target));
        if (++ref_depth_ > kMaxRefDepth)
            fail(at, fmt::format("\"$ref\" expands deeper than {} levels (a recursive definition?)", kMaxRefDepth));
        RegexNode node = compile(root_[folder][name], target.substr(1), depth + 1);
        ref_depth_--;
        return node;
    }

    int32_t count(const Json& s, const char* key, int32_t fallback, const std::string& at) const {
        if (!s.contains(key)) return fallback;
        const Json& v = s[key];
        if (!v.is_number_integer() || v.get<int64_t>() < 0)
            fail(at, fmt::format("\"{}\" must be a non-negative integer", key));
        if (v.get<int64_t>() > kMaxRegexRepeat)
            fail(at, fmt::format("\"{}\" above {} is not supported", key, kMaxRegexRepeat));
        return int32_t(v.get<int64_t>());
    }

    RegexNode of_type(const Json& s, const std::string& type, const std::string& at, int32_t depth) {
        if (type == "null") return counted(lit("null"), at);
        if (type == "boolean") return counted(RegexNode::either({lit("true"), lit("false")}), at);
        if (type == "integer") return counted(integer_regex(), at);
        if (type == "number") return counted(number_regex(), at);
        if (type == "string") return counted(string_of(s, at), at);
        if (type == "array") {
            const int32_t n_min = count(s, "minItems", 0, at), n_max = count(s, "maxItems", -1, at);
            if (n_max >= 0 && n_max < n_min) fail(at, "\"maxItems\" is below \"minItems\"");
            if (s.contains("items") && s["items"].is_array())
                fail(at, "\"items\" as an array (tuples) is not supported: give one schema for every item");
            RegexNode item = s.contains("items") ? compile(s["items"], at + "/items", depth + 1)
                                                 : counted(any_value(kAnyJsonDepth - 1), at);
            charge(regex_node_count(item), at);  // array_of copies it once more
            return array_of(item, n_min, n_max);
        }
        if (type == "object") return object_of(s, at, depth);
        fail(at, fmt::format("unknown type \"{}\"", type));
    }

    RegexNode string_of(const Json& s, const std::string& at) {
        const int32_t n_min = count(s, "minLength", 0, at), n_max = count(s, "maxLength", -1, at);
        if (n_max >= 0 && n_max < n_min) fail(at, "\"maxLength\" is below \"minLength\"");
        const bool has_length = s.contains("minLength") || s.contains("maxLength");
        // The content's parts, each a regex over the characters between the quotes; all must match.
        std::vector<RegexNode> parts;
        if (s.contains("format")) {
            if (!s["format"].is_string()) fail(at, "\"format\" must be a string");
            const std::string format = s["format"].get<std::string>();
            RegexNode node = format_regex(format);
            if (node.kind == RegexNode::Kind::empty)
                fail(at,
                     fmt::format("format \"{}\" is not supported (date, time, date-time, email, uuid are)", format));
            parts.push_back(std::move(node));
        }
        if (s.contains("pattern")) {
            if (!s["pattern"].is_string()) fail(at, "\"pattern\" must be a string");
            // The pattern must match the whole string (a JSON Schema pattern may match anywhere in it, so this
            // is a subset), and may produce only characters a JSON string holds unescaped.
            RegexNode node =
                parse_regex(s["pattern"].get<std::string>(), fmt::format("{}: pattern at {}", what_, where(at)));
            restrict_chars(node, plain_string_chars());
            parts.push_back(std::move(node));
        }
        if (parts.empty()) return quoted(RegexNode::repeated(string_char(), n_min, n_max));
        // With a format or pattern, a length counts unescaped characters (all a pattern can write).
        if (has_length) parts.push_back(RegexNode::repeated(RegexNode::one_of(plain_string_chars()), n_min, n_max));
        RegexNode content = std::move(parts[0]);
        for (size_t i = 1; i < parts.size(); i++) content = RegexNode::both(std::move(content), std::move(parts[i]));
        return quoted(std::move(content));
    }

    RegexNode object_of(const Json& s, const std::string& at, int32_t depth) {
        struct Member {
            RegexNode node;  // "key": value
            bool required = false;
        };
        std::vector<Member> members;
        std::set<std::string> required;
        if (s.contains("required")) {
            const Json& r = s["required"];
            if (!r.is_array()) fail(at, "\"required\" must be an array of strings");
            for (const Json& name : r) {
                if (!name.is_string()) fail(at, "\"required\" must be an array of strings");
                required.insert(name.get<std::string>());
            }
        }
        const Json* properties = nullptr;
        if (s.contains("properties")) {
            properties = &s["properties"];
            if (!properties->is_object()) fail(at, "\"properties\" must be an object");
        }
        for (const std::string& name : required)
            if (!properties || !properties->contains(name))
                fail(at, fmt::format("\"required\" names \"{}\", which \"properties\" does not define", name));
        const Json additional = s.contains("additionalProperties") ? s["additionalProperties"] : Json(true);
        if (!additional.is_boolean() && !additional.is_object())
            fail(at, "\"additionalProperties\" must be a boolean or a schema");
        if (!properties || properties->empty()) {
            if (additional.is_boolean() && !additional.get<bool>()) return lit("{}");
            RegexNode value = additional.is_object() ? compile(additional, at + "/additionalProperties", depth + 1)
                                                     : counted(any_value(kAnyJsonDepth - 1), at);
            charge(regex_node_count(value) + 8, at);  // map_of copies it once more
            return map_of(value);
        }
        // With properties, only they are written (extra ones would be valid unless additionalProperties is false,
        // but nothing asks for them).
        for (auto it = properties->begin(); it != properties->end(); ++it) {
            const std::string where = at + "/properties/" + it.key();
            members.push_back({RegexNode::sequence({lit(python_style_json(Json(it.key()))), lit(": "),
                                                    compile(it.value(), where, depth + 1)}),
                               required.count(it.key()) > 0});
        }
        // Every body copies the members from its first one on: charged before they are made.
        std::vector<size_t> sizes;
        for (const Member& m : members) sizes.push_back(regex_node_count(m.node) + 2);
        size_t n_copied = 0;
        for (size_t first = 0; first < members.size(); first++) {
            for (size_t j = first; j < members.size(); j++) n_copied += sizes[j];
            if (members[first].required) break;
        }
        charge(n_copied, at);
        std::vector<RegexNode> bodies;
        for (size_t first = 0; first < members.size(); first++) {
            std::vector<RegexNode> parts{members[first].node};
            for (size_t j = first + 1; j < members.size(); j++) {
                RegexNode next = RegexNode::sequence({lit(", "), members[j].node});
                parts.push_back(members[j].required ? std::move(next) : RegexNode::optional(std::move(next)));
            }
            bodies.push_back(RegexNode::sequence(std::move(parts)));
            if (members[first].required) break;  // a later first member would leave this one out
        }
        RegexNode body = RegexNode::either(std::move(bodies));
        const bool all_optional =
            std::none_of(members.begin(), members.end(), [](const Member& m) { return m.required; });
        if (all_optional) body = RegexNode::optional(std::move(body));
        return RegexNode::sequence({lit("{"), std::move(body), lit("}")});
    }
};

}  // namespace

std::string python_style_json(const Json& value) {
    std::string out;
    dump(value, out);
    return out;
}

RegexNode any_json_regex(bool object_only) {
    if (object_only) return map_of(any_value(kAnyJsonDepth - 1));
    return any_value(kAnyJsonDepth);
}

RegexNode json_schema_regex(const Json& schema, std::string_view what) {
    try {
        return SchemaCompiler(schema, what).compile(schema, "", 0);
    } catch (const Json::exception& e) {  // a value of an unexpected kind reached a conversion
        throw_error("{}: {}", what, e.what());
    }
}

Json read_json_schema(const std::string& text_or_path) {
    const size_t first = text_or_path.find_first_not_of(" \t\r\n");
    std::string text, source = "--json-schema";
    if (first != std::string::npos && (text_or_path[first] == '{' || text_or_path[first] == '[')) {
        text = text_or_path;
    } else {
        std::ifstream in(text_or_path, std::ios::binary);
        if (!in)
            throw_error("--json-schema {}: cannot open it ({}); give a file or the schema's JSON text", text_or_path,
                        os_error_text(errno));
        // A schema is text a person or a program wrote: past kMaxSchemaBytes it is no schema (--json-schema
        // /dev/zero read until memory ran out).
        text.resize(kMaxSchemaBytes + 1);
        in.read(text.data(), std::streamsize(text.size()));
        if (in.bad()) throw_error("--json-schema {}: read failed", text_or_path);
        text.resize(size_t(in.gcount()));
        if (text.size() > kMaxSchemaBytes)
            throw_error("--json-schema {}: the file is larger than {} MiB, which no schema kvlm compiles is",
                        text_or_path, kMaxSchemaBytes >> 20);
        source = "--json-schema " + text_or_path;
    }
    try {
        // Deep nesting is refused later by the compiler; nlohmann's parser itself recurses per level, so bound
        // the text's nesting before parsing.
        int depth = 0, max_depth = 0;
        bool in_string = false;
        for (size_t i = 0; i < text.size(); i++) {
            const char c = text[i];
            if (in_string) {
                if (c == '\\')
                    i++;
                else if (c == '"')
                    in_string = false;
            } else if (c == '"') {
                in_string = true;
            } else if (c == '{' || c == '[') {
                max_depth = std::max(max_depth, ++depth);
            } else if (c == '}' || c == ']') {
                depth--;
            }
        }
        if (max_depth > 4 * kMaxSchemaDepth)
            throw_error("{}: the schema nests {} levels deep (at most {} are accepted)", source, max_depth,
                        4 * kMaxSchemaDepth);
        return Json::parse(text);
    } catch (const Json::exception& e) {  // parse_error, and out_of_range for a number too large for a double
        throw_error("{}: not valid JSON ({})", source, e.what());
    }
}

}  // namespace kvlm
