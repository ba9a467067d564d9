// The regex parser and byte automaton: the corpus of tests/data/constrained/regexes.json (each pattern's
// matches and non-matches were checked with Python's re.fullmatch), UTF-8 classes, anchors, and the errors
// and bounds that keep a hostile pattern from hanging or exhausting memory.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "constrain/byte_automaton.h"
#include "constrain/regex.h"
#include "support/test_util.h"
#include "util/error.h"

using namespace kvlm;
using namespace kvlm::test;

namespace {

bool full_match(ByteDfa& dfa, const std::string& text) {
    const int32_t end = dfa.walk(dfa.start(), text);
    return end != ByteDfa::kDead && dfa.accepting(end);
}

bool matches(const std::string& pattern, const std::string& text) {
    ByteDfa dfa(parse_regex(pattern), "test");
    return full_match(dfa, text);
}

std::string error_of(const std::string& pattern) {
    try {
        ByteDfa dfa(parse_regex(pattern, "--regex"), "--regex");
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("regex: the corpus's matches match and its non-matches do not, as with Python's re.fullmatch") {
    const auto corpus = nlohmann::json::parse(read_file("tests/data/constrained/regexes.json"));
    REQUIRE(corpus.size() >= 15);
    for (const auto& c : corpus) {
        const std::string pattern = c["regex"].get<std::string>();
        ByteDfa dfa(parse_regex(pattern), c["name"].get<std::string>());
        for (const auto& m : c["matches"]) CHECK_MESSAGE(full_match(dfa, m.get<std::string>()), pattern, " vs ", m);
        for (const auto& m : c["non_matches"])
            CHECK_MESSAGE(!full_match(dfa, m.get<std::string>()), pattern, " vs ", m);
    }
}

TEST_CASE("regex: operators, classes and UTF-8") {
    CHECK(matches("a(b|cd)*e", "abcdbe"));
    CHECK(!matches("a(b|cd)*e", "abce"));
    CHECK(matches("x{2,3}", "xxx"));
    CHECK(!matches("x{2,3}", "xxxx"));
    CHECK(matches("x{2,}", "xxxxxx"));
    CHECK(matches("a{3}", "aaa"));
    CHECK(matches("[^a-c]+", "xyz"));
    CHECK(!matches("[^a-c]+", "xbz"));
    CHECK(matches("\\d\\w\\s", "7_ "));
    CHECK(matches("[\\d.-]+", "1.5-2"));
    CHECK(matches("a{x", "a{x"));  // not a quantifier: literal, as in Python
    // {,m} is {0,m} and {,} is {0,}, as Python reads them ({,3} was taken as the text "{,3}").
    for (const char* text : {"", "1", "12", "123"}) CHECK(matches("[0-9]{,3}", text));
    CHECK(!matches("[0-9]{,3}", "1234"));
    CHECK(!matches("[0-9]{,3}", "1{,3}"));
    CHECK(matches("a{,}", "aaaa"));
    CHECK(matches("a{,}", ""));
    CHECK(!matches("a{,}", "a{,}"));
    // Multi-byte characters: classes of code points, compiled to UTF-8 byte sequences.
    CHECK(matches("[α-ω]+", "λόγος") == false);  // ό is outside α-ω
    CHECK(matches("[α-ω]+", "λογος"));
    CHECK(matches(".", "€"));
    CHECK(matches(".", "😀"));
    CHECK(!matches(".", "\n"));
    CHECK(matches("[^\"]{2}", "é😀"));
    CHECK(!matches("[^\"]{2}", "é"));
    CHECK(matches("\\u00e9", "é"));
    // Anchors at the ends are allowed and change nothing: every match is the whole text.
    CHECK(matches("^ab$", "ab"));
    CHECK(matches("a\\$", "a$"));
    // An empty alternative and an optional group.
    CHECK(matches("(a|)b", "b"));
    CHECK(matches("(?:ab)?c", "c"));
}

TEST_CASE("regex: what is not supported, or too large, is an error naming it") {
    CHECK(contains(error_of("(ab"), "unbalanced '('"));
    CHECK(contains(error_of("ab)"), "unbalanced ')'"));
    CHECK(contains(error_of("a*?"), "lazy"));
    CHECK(contains(error_of("(a)\\1"), "\\1 is not supported"));
    CHECK(contains(error_of("(?=a)b"), "only (?:...) groups"));
    CHECK(contains(error_of("a\\bc"), "word boundaries"));
    CHECK(contains(error_of("a^b"), "only at the ends"));
    CHECK(contains(error_of("*a"), "nothing to repeat"));
    CHECK(contains(error_of("a**"), "a quantifier after a quantifier"));
    CHECK(contains(error_of("[abc"), "unterminated"));
    CHECK(contains(error_of("[z-a]"), "below its start"));
    CHECK(contains(error_of("a{2000}"), "above 1000"));
    CHECK(contains(error_of("x{5,2}"), "m < n"));
    CHECK(contains(error_of("[^\\x00-\\u{10}]"), "hex"));
    // Nested counted repeats: a million copies of the inner automaton is refused, not built.
    CHECK(contains(error_of("((a{1000}){1000}){1000}"), "too large"));
    // Deep nesting is refused before the parser's recursion could exhaust the stack.
    CHECK(contains(error_of(std::string(5000, '(') + "a" + std::string(5000, ')')), "nest deeper"));
    CHECK(contains(error_of(std::string(20000, 'a')), "at most 16384"));
    // An empty class matches nothing.
    CHECK(contains(error_of("a[^\\s\\S]"), "no text matches"));
}

TEST_CASE("regex: a pattern whose automaton would grow without bound is cut off with an error, not memory") {
    // (a|b)*a(a|b){20}: the DFA remembers the last 21 letters, 2^21 states, more than kMaxDfaStates; walking
    // random text reaches new states until the bound stops it.
    ByteDfa dfa(parse_regex("(a|b)*a(a|b){20}"), "--regex");
    std::string text;
    std::mt19937 random(12345);
    for (int i = 0; i < 2'000'000; i++) text += random() & 1 ? 'a' : 'b';
    std::string error;
    try {
        dfa.walk(dfa.start(), text);
    } catch (const Error& e) {
        error = e.what();
    }
    CHECK(contains(error, "more than 250000 automaton states"));
}
