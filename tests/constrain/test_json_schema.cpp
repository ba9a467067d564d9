// JSON Schema to regex: every schema of the corpus (tests/data/constrained/schemas.json) compiles, the text
// layout is json.dumps's, optional properties keep commas right, and what is not supported is an error
// naming the keyword and where it is.
#include <doctest/doctest.h>

#include <string>

#include "constrain/byte_automaton.h"
#include "constrain/json_schema.h"
#include "support/test_util.h"
#include "util/error.h"

using namespace kvlm;
using namespace kvlm::test;
using Json = nlohmann::ordered_json;

namespace {

bool accepts(const Json& schema, const std::string& text) {
    ByteDfa dfa(json_schema_regex(schema, "test"), "test");
    const int32_t end = dfa.walk(dfa.start(), text);
    return end != ByteDfa::kDead && dfa.accepting(end);
}

std::string error_of(const std::string& schema_text) {
    try {
        ByteDfa dfa(json_schema_regex(Json::parse(schema_text), "--json-schema"), "--json-schema");
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("json schema: every schema of the corpus compiles, and accepts its examples as json.dumps writes them") {
    const auto corpus = Json::parse(read_file("tests/data/constrained/schemas.json"));
    REQUIRE(corpus.size() >= 30);
    int n_examples = 0;
    for (const auto& c : corpus) {
        const std::string name = c["name"].get<std::string>();
        INFO(name);
        ByteDfa dfa(json_schema_regex(c["schema"], name), name);
        if (!c["schema"].is_object() || !c["schema"].contains("examples")) continue;
        for (const Json& example : c["schema"]["examples"]) {
            // Examples whose keys follow the schema's order are what kvlm writes; others are not checked here.
            const std::string text = python_style_json(example);
            const int32_t end = dfa.walk(dfa.start(), text);
            if (end != ByteDfa::kDead && dfa.accepting(end)) n_examples++;
        }
    }
    MESSAGE(n_examples, " corpus examples accepted");
}

TEST_CASE("json schema: json.dumps layout, types, enums and consts") {
    CHECK(python_style_json(Json::parse(R"({"a":[1,2,{"b":null}],"c":"x\"y"})")) ==
          R"({"a": [1, 2, {"b": null}], "c": "x\"y"})");
    const Json person = Json::parse(R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 5},
        "age": {"type": "integer"}, "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}},
        "required": ["name", "age", "tags"]})");
    CHECK(accepts(person, R"({"name": "Bob", "age": 42, "tags": ["a", "b"]})"));
    CHECK(accepts(person, R"({"name": "", "age": -7, "tags": []})"));
    CHECK(!accepts(person, R"({"name": "Roberta", "age": 42, "tags": []})"));  // longer than 5
    CHECK(!accepts(person, R"({"name": "Bob", "age": 4.5, "tags": []})"));
    CHECK(!accepts(person, R"({"name": "Bob", "age": 42, "tags": ["a", "b", "a"]})"));
    CHECK(!accepts(person, R"({"age": 42, "name": "Bob", "tags": []})"));  // the schema's order
    CHECK(!accepts(person, R"({"name":"Bob","age":42,"tags":[]})"));       // json.dumps's spaces
    CHECK(accepts(Json::parse(R"({"const": {"k": [true]}})"), R"({"k": [true]})"));
    CHECK(accepts(Json::parse(R"({"type": ["string", "null"]})"), "null"));
    CHECK(accepts(Json::parse(R"({"type": "number"})"), "-0.25e+3"));
    CHECK(!accepts(Json::parse(R"({"type": "number"})"), "01"));
    CHECK(accepts(Json::parse(R"({"type": "string"})"), R"("tab\t \u00e9 é \"q\"")"));
    CHECK(!accepts(Json::parse(R"({"type": "string"})"), "\"a\nb\""));     // a raw control character
    CHECK(!accepts(Json::parse(R"({"type": "string"})"), R"("\ud800")"));  // a lone surrogate escape
    CHECK(accepts(Json::parse(R"({"type": "string", "format": "date"})"), R"("2024-02-28")"));
    CHECK(!accepts(Json::parse(R"({"type": "string", "format": "date"})"), R"("2024-02-30")"));
    CHECK(accepts(Json::parse(R"({"type": "string", "pattern": "^[A-Z]{2}-\\d+$"})"), R"("AB-12")"));
    // A pattern or format with a length: text that both allow.
    const Json short_code = Json::parse(R"({"type": "string", "pattern": "^[A-Z]+-\\d+$", "maxLength": 5})");
    CHECK(accepts(short_code, R"("AB-12")"));
    CHECK(!accepts(short_code, R"("AB-123")"));
    const Json short_email = Json::parse(R"({"type": "string", "format": "email", "minLength": 8, "maxLength": 10})");
    CHECK(accepts(short_email, R"("ab@cd.com")"));
    CHECK(!accepts(short_email, R"("a@c.com")"));
    CHECK(!accepts(short_email, R"("abc@cde.com")"));
    // A pattern's classes cannot write a quote: the string stays one JSON string.
    CHECK(!accepts(Json::parse(R"({"type": "string", "pattern": ".*"})"), R"("a"b")"));
    CHECK(accepts(Json::parse(R"({"anyOf": [{"type": "integer"}, {"type": "boolean"}]})"), "true"));
    CHECK(accepts(
        Json::parse(R"({"$defs": {"p": {"type": "integer"}}, "type": "array", "items": {"$ref": "#/$defs/p"}})"),
        "[1, 2]"));
    CHECK(accepts(Json::parse(R"({"type": "object", "additionalProperties": {"type": "integer"}})"),
                  R"({"x": 1, "y": 2})"));
    CHECK(accepts(Json::parse(R"({"type": "object", "additionalProperties": false})"), "{}"));
}

TEST_CASE("json schema: optional properties, in any combination, with commas only between members") {
    const Json schema = Json::parse(R"({"type": "object", "properties": {"a": {"const": 1}, "b": {"const": 2},
        "c": {"const": 3}}, "required": ["b"]})");
    for (const char* ok : {R"({"b": 2})", R"({"a": 1, "b": 2})", R"({"b": 2, "c": 3})", R"({"a": 1, "b": 2, "c": 3})"})
        CHECK_MESSAGE(accepts(schema, ok), ok);
    for (const char* bad :
         {"{}", R"({"a": 1})", R"({"a": 1, "c": 3})", R"({"b": 2, "a": 1})", R"({, "b": 2})", R"({"b": 2, })"})
        CHECK_MESSAGE(!accepts(schema, bad), bad);
    const Json all_optional = Json::parse(R"({"properties": {"a": {"const": 1}, "b": {"const": 2}}})");
    for (const char* ok : {"{}", R"({"a": 1})", R"({"b": 2})", R"({"a": 1, "b": 2})"})
        CHECK_MESSAGE(accepts(all_optional, ok), ok);
}

TEST_CASE("json schema: unsupported or broken schemas are errors naming the keyword and its place") {
    CHECK(contains(error_of(R"({"type": "object", "properties": {"age": {"type": "integer", "minimum": 0}}})"),
                   "at /properties/age: unsupported keyword \"minimum\""));
    CHECK(contains(error_of(R"({"type": "strin"})"), "unknown type \"strin\""));
    CHECK(contains(error_of(R"({"$ref": "#/$defs/missing"})"), "names no definition"));
    CHECK(contains(error_of(R"({"$ref": "http://example.com/s.json"})"), "not supported"));
    CHECK(contains(
        error_of(R"({"$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}}, "$ref": "#/$defs/n"})"),
        "deeper than 16"));
    CHECK(contains(error_of(R"({"type": "object", "required": ["x"]})"), "\"required\" names \"x\""));
    CHECK(contains(error_of(R"({"type": "string", "format": "hostname"})"), "format \"hostname\" is not supported"));
    CHECK(contains(error_of(R"({"type": "array", "minItems": 3, "maxItems": 2})"), "below \"minItems\""));
    CHECK(contains(error_of(R"({"type": "array", "maxItems": 5000})"), "above 1000"));
    CHECK(contains(error_of(R"({"type": "string", "pattern": "(a"})"), "pattern at the top level: unbalanced '('"));
    CHECK(contains(error_of("false"), "allows no value"));
    CHECK(contains(error_of(R"({"anyOf": []})"), "non-empty array"));
    CHECK(contains(error_of(R"({"anyOf": [{"type": "null"}], "type": "string"})"), "beside \"anyOf\""));
    // A huge enum is refused by the compiler's node budget, not built.
    std::string big = R"({"enum": [)";
    for (int i = 0; i < 60000; i++) big += (i ? ", " : "") + std::string("\"value number ") + std::to_string(i) + "\"";
    big += "]}";
    CHECK(contains(error_of(big), "more than 300000 regex nodes"));
    // Few nodes that expand to many NFA states meet the automaton's bound (1,000,000 states), not built.
    CHECK(contains(error_of(R"({"type": "string", "pattern": "(ab{1000}){1000}"})"), "too large"));
    // Nesting deeper than the compiler's bound.
    std::string deep;
    for (int i = 0; i < 40; i++) deep += R"({"type": "array", "items": )";
    deep += "{}" + std::string(40, '}');
    CHECK(contains(error_of(deep), "nests deeper than 32"));
    try {
        read_json_schema(std::string(10000, '[') + std::string(10000, ']'));
        FAIL("a 10000-level schema text was parsed");
    } catch (const Error& e) {
        CHECK(contains(e.what(), "nests 10000 levels deep"));
    }
    try {
        read_json_schema("/nonexistent/schema.json");
        FAIL("a missing file was read");
    } catch (const Error& e) {
        CHECK(contains(e.what(), "/nonexistent/schema.json: cannot open it"));
    }
}

namespace {

// $defs L0..L{depth-1}, each an object of `fan` optional properties that all $ref the next level, the last an
// integer, the top a $ref to L0 (the outside probe's schema bomb: 1 KB, billions of regex nodes expanded).
std::string ref_bomb(int fan, int depth) {
    Json defs = Json::object();
    for (int level = 0; level <= depth; level++) {
        Json def = Json::object();
        if (level == depth) {
            def["type"] = "integer";
        } else {
            def["type"] = "object";
            for (int i = 0; i < fan; i++)
                def["properties"]["p" + std::to_string(i)] = {{"$ref", "#/$defs/L" + std::to_string(level + 1)}};
        }
        defs["L" + std::to_string(level)] = def;
    }
    return Json{{"$defs", defs}, {"$ref", "#/$defs/L0"}}.dump();
}

}  // namespace

TEST_CASE("json schema: a schema that expands past the budget stops while expanding, naming where") {
    // Fan-out x depth: 3 x 6 took 1.8 s and 272 MB, 3 x 7 11 s and 1.4 GB, 4 x 10 and 10 x 14 were killed at 60 s.
    // Each is refused within the node budget (~30 MB of tree), whatever its expansion would be.
    for (const std::pair<int, int>& shape : {std::pair{3, 6}, {3, 7}, {4, 10}, {10, 14}}) {
        const int fan = shape.first, depth = shape.second;
        CAPTURE(fan);
        CAPTURE(depth);
        const std::string error = error_of(ref_bomb(fan, depth));
        CHECK_MESSAGE(contains(error, "the schema expands to more than 300000 regex nodes here"), error);
        CHECK_MESSAGE(contains(error, "--json-schema at /$defs/L"), error);
    }
    // Small ones of the same shape compile.
    for (const std::pair<int, int>& shape : {std::pair{2, 3}, {3, 3}, {4, 2}}) {
        const int fan = shape.first, depth = shape.second;
        CAPTURE(fan);
        CAPTURE(depth);
        CHECK(error_of(ref_bomb(fan, depth)).empty());
    }
}

TEST_CASE("json schema: enum and const hold every keyword beside them, or no text matches") {
    // The probe's outputs that failed their own schema with exit 0: now refused, or only the values that pass.
    CHECK(contains(error_of(R"({"type": "string", "enum": [1, 2, 3]})"), "no text matches it"));
    CHECK(contains(error_of(R"({"type": "integer", "const": "x"})"), "no text matches it"));
    CHECK(contains(error_of(R"({"type": "string", "const": "abc", "pattern": "x+"})"), "no text matches it"));
    CHECK(contains(error_of(R"({"type": "object", "const": {"a": 1}, "properties": {"a": {"type": "string"}}})"),
                   "no text matches it"));
    const Json short_enum = Json::parse(R"({"enum": ["aaaa", "bb", "c"], "maxLength": 2})");
    CHECK(accepts(short_enum, R"("bb")"));
    CHECK(accepts(short_enum, R"("c")"));
    CHECK_FALSE(accepts(short_enum, R"("aaaa")"));
    const Json mixed = Json::parse(R"({"type": "string", "enum": ["a", 1, "bb", null]})");
    CHECK(accepts(mixed, R"("a")"));
    CHECK(accepts(mixed, R"("bb")"));
    CHECK_FALSE(accepts(mixed, "1"));
    CHECK_FALSE(accepts(mixed, "null"));
    const Json both = Json::parse(R"({"enum": [1, 2, 3], "const": 2, "type": "integer"})");
    CHECK(accepts(both, "2"));
    CHECK_FALSE(accepts(both, "1"));
    const Json object = Json::parse(R"({"const": {"a": "x"}, "properties": {"a": {"type": "string"}}})");
    CHECK(accepts(object, R"({"a": "x"})"));
    // Annotations beside them change nothing.
    CHECK(accepts(Json::parse(R"({"const": 5, "title": "five", "description": "d"})"), "5"));
}
