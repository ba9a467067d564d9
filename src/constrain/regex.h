// Regular expressions over Unicode text, parsed into a syntax tree that byte_automaton.h compiles: the
// subset docs/CONSTRAINED.md lists (no backreferences or lookaround: every pattern is a finite automaton).
// A pattern always matches the whole output; `^` and `$` are allowed only at its ends.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvlm {

// A set of Unicode scalar values as sorted, disjoint, non-adjacent ranges (surrogates never included).
struct CodepointRange {
    uint32_t lo = 0, hi = 0;  // inclusive
};
using CharSet = std::vector<CodepointRange>;

constexpr uint32_t kMaxCodepoint = 0x10FFFF;

CharSet normalized(CharSet ranges);  // sorted, merged, surrogates removed
CharSet complement(const CharSet& set);
CharSet intersection(const CharSet& a, const CharSet& b);
CharSet char_set(uint32_t lo, uint32_t hi);

struct RegexNode {
    enum class Kind { empty, chars, concat, alternate, repeat, intersect };
    Kind kind = Kind::empty;
    CharSet chars;                    // chars: one character from this set
    std::vector<RegexNode> children;  // concat / alternate; repeat: exactly one; intersect: two
    int32_t min = 0, max = -1;        // repeat: max < 0 = unbounded

    static RegexNode literal(std::string_view utf8);  // the exact text
    static RegexNode one_of(CharSet set);
    static RegexNode sequence(std::vector<RegexNode> parts);
    static RegexNode either(std::vector<RegexNode> options);
    static RegexNode repeated(RegexNode node, int32_t min, int32_t max);
    static RegexNode optional(RegexNode node) { return repeated(std::move(node), 0, 1); }
    // Text both match (a JSON Schema pattern with a maxLength); not in the regex syntax.
    static RegexNode both(RegexNode a, RegexNode b);
};

// The largest count in {n,m} (larger counts are refused: the automaton would be that many copies).
constexpr int32_t kMaxRegexRepeat = 1000;
constexpr size_t kMaxRegexLength = 16384;  // pattern bytes

// Parses `pattern`; throws Error naming the position and the problem ("--regex: unbalanced ')' at 7").
// `what` names the pattern's origin in messages ("--regex", "schema pattern at /properties/id").
RegexNode parse_regex(std::string_view pattern, std::string_view what = "regex");

// Nodes in the tree, `node` included (what building it cost: a compiler's budget counts them).
size_t regex_node_count(const RegexNode& node);

// Every character set in `node` intersected with `allowed` (a JSON string's pattern may not produce '"').
void restrict_chars(RegexNode& node, const CharSet& allowed);

}  // namespace kvlm
