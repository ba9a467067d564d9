// Regex parser: recursive descent over the pattern's UTF-8, with a depth bound so that no pattern can
// exhaust the stack.
#include "constrain/regex.h"

#include <algorithm>

#include "util/error.h"

namespace kvlm {

CharSet normalized(CharSet ranges) {
    std::sort(ranges.begin(), ranges.end(), [](auto& a, auto& b) { return a.lo < b.lo; });
    CharSet out;
    auto add = [&](uint32_t lo, uint32_t hi) {
        if (lo > hi) return;
        if (!out.empty() && lo <= out.back().hi + 1) {
            out.back().hi = std::max(out.back().hi, hi);
        } else {
            out.push_back({lo, hi});
        }
    };
    for (const CodepointRange& r : ranges) {
        const uint32_t hi = std::min(r.hi, kMaxCodepoint);
        if (r.lo > hi) continue;
        // Surrogates are not characters: split a range around them.
        if (r.lo < 0xD800 && hi >= 0xD800) {
            add(r.lo, 0xD7FF);
            if (hi > 0xDFFF) add(0xE000, hi);
        } else if (r.lo >= 0xD800 && r.lo <= 0xDFFF) {
            if (hi > 0xDFFF) add(0xE000, hi);
        } else {
            add(r.lo, hi);
        }
    }
    return out;
}

CharSet complement(const CharSet& set) {
    CharSet out;
    uint32_t next = 0;
    for (const CodepointRange& r : set) {
        if (r.lo > next) out.push_back({next, r.lo - 1});
        next = r.hi + 1;
    }
    if (next <= kMaxCodepoint) out.push_back({next, kMaxCodepoint});
    return normalized(std::move(out));
}

CharSet intersection(const CharSet& a, const CharSet& b) {
    CharSet out;
    size_t i = 0, j = 0;
    while (i < a.size() && j < b.size()) {
        const uint32_t lo = std::max(a[i].lo, b[j].lo), hi = std::min(a[i].hi, b[j].hi);
        if (lo <= hi) out.push_back({lo, hi});
        (a[i].hi < b[j].hi) ? i++ : j++;
    }
    return out;
}

CharSet char_set(uint32_t lo, uint32_t hi) { return normalized({{lo, hi}}); }

RegexNode RegexNode::one_of(CharSet set) {
    RegexNode n;
    n.kind = Kind::chars;
    n.chars = std::move(set);
    return n;
}

RegexNode RegexNode::sequence(std::vector<RegexNode> parts) {
    if (parts.size() == 1) return std::move(parts[0]);
    RegexNode n;
    n.kind = parts.empty() ? Kind::empty : Kind::concat;
    n.children = std::move(parts);
    return n;
}

RegexNode RegexNode::either(std::vector<RegexNode> options) {
    if (options.size() == 1) return std::move(options[0]);
    KVLM_ASSERT(!options.empty(), "an alternation needs options");
    RegexNode n;
    n.kind = Kind::alternate;
    n.children = std::move(options);
    return n;
}

RegexNode RegexNode::repeated(RegexNode node, int32_t min, int32_t max) {
    RegexNode n;
    n.kind = Kind::repeat;
    n.min = min, n.max = max;
    n.children.push_back(std::move(node));
    return n;
}

RegexNode RegexNode::both(RegexNode a, RegexNode b) {
    RegexNode n;
    n.kind = Kind::intersect;
    n.children.push_back(std::move(a));
    n.children.push_back(std::move(b));
    return n;
}

namespace {

// Decodes one UTF-8 character at text[*pos]; false if the bytes there are not valid UTF-8.
bool next_codepoint(std::string_view text, size_t* pos, uint32_t* cp) {
    const auto* s = reinterpret_cast<const unsigned char*>(text.data());
    const size_t n = text.size(), i = *pos;
    const unsigned c = s[i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > n) return false;
    uint32_t v = len == 1 ? c : c & (0x7F >> len);
    for (int k = 1; k < len; k++) {
        if ((s[i + k] & 0xC0) != 0x80) return false;
        v = (v << 6) | (s[i + k] & 0x3F);
    }
    static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < kMin[len] || v > kMaxCodepoint || (v >= 0xD800 && v <= 0xDFFF)) return false;
    *pos = i + len;
    *cp = v;
    return true;
}

CharSet digits() { return char_set('0', '9'); }
CharSet word_chars() { return normalized({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}); }
CharSet space_chars() { return normalized({{'\t', '\r'}, {' ', ' '}}); }

class Parser {
public:
    Parser(std::string_view pattern, std::string_view what) : p_(pattern), what_(what) {}

    RegexNode parse() {
        if (p_.size() > kMaxRegexLength)
            fail(0, fmt::format("the pattern is {} bytes; at most {} are accepted", p_.size(), kMaxRegexLength));
        size_t end = p_.size();
        if (pos_ < end && p_[0] == '^') pos_ = 1;
        // A final unescaped '$' anchors the end, which every match does anyway.
        if (end > pos_ && p_[end - 1] == '$' && !escaped_at(end - 1)) end--;
        end_ = end;
        RegexNode node = alternation(0);
        if (pos_ < end_) fail(pos_, p_[pos_] == ')' ? "unbalanced ')'" : "unexpected character");
        return node;
    }

private:
    std::string_view p_, what_;
    size_t pos_ = 0, end_ = 0;
    static constexpr int kMaxDepth = 200;

    [[noreturn]] void fail(size_t at, const std::string& why) const {
        throw_error("{}: {} at byte {} of \"{}\"", what_, why, at,
                    p_.size() > 200 ? std::string(p_.substr(0, 200)) + "..." : std::string(p_));
    }
    bool escaped_at(size_t i) const {  // p_[i] is preceded by an odd number of backslashes
        size_t n = 0;
        while (i > n && p_[i - 1 - n] == '\\') n++;
        return n % 2 == 1;
    }
    bool at_end() const { return pos_ >= end_; }

    RegexNode alternation(int depth) {
        if (depth > kMaxDepth) fail(pos_, fmt::format("groups nest deeper than {}", kMaxDepth));
        std::vector<RegexNode> options;
        options.push_back(concatenation(depth));
        while (!at_end() && p_[pos_] == '|') {
            pos_++;
            options.push_back(concatenation(depth));
        }
        return RegexNode::either(std::move(options));
    }

    RegexNode concatenation(int depth) {
        std::vector<RegexNode> parts;
        while (!at_end() && p_[pos_] != '|' && p_[pos_] != ')') parts.push_back(quantified(depth));
        return RegexNode::sequence(std::move(parts));
    }

    // A count in {n}, {n,}, {n,m}, {,m} or {,} (the last two from 0, as Python reads them); false (pos_ unchanged)
    // when the text there is not a quantifier (then '{' is literal).
    bool counted(int32_t* min, int32_t* max) {
        size_t i = pos_ + 1;
        auto number = [&](int32_t* out) {
            size_t start = i;
            int64_t v = 0;
            while (i < end_ && p_[i] >= '0' && p_[i] <= '9') {
                v = std::min<int64_t>(v * 10 + (p_[i] - '0'), int64_t(1) << 40);
                i++;
            }
            if (i == start) return false;
            if (v > kMaxRegexRepeat) fail(start, fmt::format("a repeat count above {}", kMaxRegexRepeat));
            *out = int32_t(v);
            return true;
        };
        if (i < end_ && p_[i] == ',') {  // {,m}, and {,} for {0,}, as Python reads them
            i++;
            *min = 0;
            if (!number(max)) *max = -1;
        } else {
            if (!number(min)) return false;
            *max = *min;
            if (i < end_ && p_[i] == ',') {
                i++;
                if (!number(max)) *max = -1;
            }
        }
        if (i >= end_ || p_[i] != '}') return false;
        if (*max >= 0 && *max < *min) fail(pos_, "a repeat {n,m} with m < n");
        pos_ = i + 1;
        return true;
    }

    RegexNode quantified(int depth) {
        const size_t atom_at = pos_;
        RegexNode node = atom(depth);
        bool repeated = false;
        while (!at_end()) {
            const char c = p_[pos_];
            int32_t min = 0, max = -1;
            if (c == '*') {
                pos_++;
            } else if (c == '+') {
                min = 1, pos_++;
            } else if (c == '?') {
                max = 1, pos_++;
            } else if (c == '{' && counted(&min, &max)) {
            } else {
                break;
            }
            if (!at_end() && (p_[pos_] == '?' || p_[pos_] == '+'))
                fail(pos_, "lazy and possessive quantifiers are not supported (every match is the whole output)");
            if (node.kind == RegexNode::Kind::empty) fail(atom_at, "a quantifier with nothing to repeat");
            if (repeated) fail(atom_at, "a quantifier after a quantifier (use a group: (a*)*)");
            repeated = true;
            node = RegexNode::repeated(std::move(node), min, max);
        }
        return node;
    }

    RegexNode atom(int depth) {
        const size_t at = pos_;
        const char c = p_[pos_];
        if (c == '(') {
            pos_++;
            if (pos_ + 1 < end_ && p_[pos_] == '?') {
                if (p_[pos_ + 1] != ':')
                    fail(at, "only (?:...) groups are supported (no lookaround, named groups or flags)");
                pos_ += 2;
            }
            RegexNode inner = alternation(depth + 1);
            if (at_end() || p_[pos_] != ')') fail(at, "unbalanced '('");
            pos_++;
            return inner;
        }
        if (c == '[') return RegexNode::one_of(char_class());
        if (c == '.') {
            pos_++;
            return RegexNode::one_of(complement(char_set('\n', '\n')));
        }
        if (c == '*' || c == '+' || c == '?') fail(at, "a quantifier with nothing to repeat");
        if (c == '^' || c == '$') fail(at, "'^' and '$' are allowed only at the ends of the pattern");
        if (c == '\\') {
            CharSet set;
            escape(&set, /*in_class=*/false);
            return RegexNode::one_of(std::move(set));
        }
        uint32_t cp = 0;
        if (!next_codepoint(p_, &pos_, &cp)) fail(at, "invalid UTF-8");
        return RegexNode::one_of(char_set(cp, cp));
    }

    // After a backslash at pos_: the set it stands for. Returns true for a class escape (\d ...), false for a
    // single character (then set holds just that character).
    bool escape(CharSet* set, bool in_class) {
        const size_t at = pos_;
        pos_++;
        if (pos_ >= end_) fail(at, "a trailing backslash");
        const char c = p_[pos_++];
        auto hex = [&](int n) {
            uint32_t v = 0;
            for (int k = 0; k < n; k++, pos_++) {
                if (pos_ >= end_) fail(at, "a short hex escape");
                const char h = p_[pos_];
                const int d = h >= '0' && h <= '9'   ? h - '0'
                              : h >= 'a' && h <= 'f' ? h - 'a' + 10
                              : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                                     : -1;
                if (d < 0) fail(at, "a bad hex escape");
                v = v * 16 + uint32_t(d);
            }
            if ((v >= 0xD800 && v <= 0xDFFF)) fail(at, "a surrogate code point");
            return v;
        };
        uint32_t cp = 0;
        switch (c) {
            case 'd':
                *set = digits();
                return true;
            case 'D':
                *set = complement(digits());
                return true;
            case 'w':
                *set = word_chars();
                return true;
            case 'W':
                *set = complement(word_chars());
                return true;
            case 's':
                *set = space_chars();
                return true;
            case 'S':
                *set = complement(space_chars());
                return true;
            case 't':
                cp = '\t';
                break;
            case 'n':
                cp = '\n';
                break;
            case 'r':
                cp = '\r';
                break;
            case 'f':
                cp = '\f';
                break;
            case 'v':
                cp = '\v';
                break;
            case 'x':
                cp = hex(2);
                break;
            case 'u':
                cp = hex(4);
                break;
            default:
                if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
                    fail(at,
                         fmt::format("the escape \\{} is not supported{}", c,
                                     c == 'b' && !in_class ? " (no word boundaries: the whole output matches)" : ""));
                if (static_cast<unsigned char>(c) >= 0x80) fail(at, "a backslash before a non-ASCII character");
                cp = uint32_t(static_cast<unsigned char>(c));
        }
        *set = char_set(cp, cp);
        return false;
    }

    CharSet char_class() {
        const size_t at = pos_;
        pos_++;  // '['
        bool negate = false;
        if (pos_ < end_ && p_[pos_] == '^') negate = true, pos_++;
        CharSet set;
        bool first = true;
        // One class member that can be a range end: a character, or an escape that stands for one.
        auto member = [&](uint32_t* cp, CharSet* klass) {
            const size_t m = pos_;
            if (p_[pos_] == '\\') {
                CharSet s;
                if (escape(&s, true)) {
                    *klass = std::move(s);
                    return false;
                }
                *cp = s[0].lo;
                return true;
            }
            if (p_[pos_] == '[' && pos_ + 1 < end_ && p_[pos_ + 1] == ':')
                fail(m, "POSIX classes like [:alpha:] are not supported");
            if (!next_codepoint(p_, &pos_, cp)) fail(m, "invalid UTF-8");
            return true;
        };
        while (true) {
            if (pos_ >= end_) fail(at, "an unterminated '['");
            if (p_[pos_] == ']' && !first) break;
            first = false;
            uint32_t lo = 0;
            CharSet klass;
            if (!member(&lo, &klass)) {
                set.insert(set.end(), klass.begin(), klass.end());
                continue;
            }
            if (pos_ + 1 < end_ && p_[pos_] == '-' && p_[pos_ + 1] != ']') {
                const size_t dash = pos_;
                pos_++;
                uint32_t hi = 0;
                if (!member(&hi, &klass)) fail(dash, "a range that ends in a class escape");
                if (hi < lo) fail(dash, "a range whose end is below its start");
                set.push_back({lo, hi});
            } else {
                set.push_back({lo, lo});
            }
        }
        pos_++;  // ']'
        set = normalized(std::move(set));
        return negate ? complement(set) : set;
    }
};

}  // namespace

RegexNode RegexNode::literal(std::string_view utf8) {
    std::vector<RegexNode> parts;
    size_t pos = 0;
    while (pos < utf8.size()) {
        uint32_t cp = 0;
        if (!next_codepoint(utf8, &pos, &cp)) throw_error("literal text is not valid UTF-8");
        parts.push_back(one_of(char_set(cp, cp)));
    }
    return sequence(std::move(parts));
}

RegexNode parse_regex(std::string_view pattern, std::string_view what) { return Parser(pattern, what).parse(); }

size_t regex_node_count(const RegexNode& node) {
    size_t n = 1;
    for (const RegexNode& child : node.children) n += regex_node_count(child);
    return n;
}

void restrict_chars(RegexNode& node, const CharSet& allowed) {
    if (node.kind == RegexNode::Kind::chars) node.chars = intersection(node.chars, allowed);
    for (RegexNode& child : node.children) restrict_chars(child, allowed);
}

}  // namespace kvlm
