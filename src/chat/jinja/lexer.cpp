// Jinja lexer. Text between tags is emitted with jinja2's whitespace control already applied, so the
// parser never sees strip markers; tag end delimiters only count outside brackets, as in jinja2.
#include "chat/jinja/lexer.h"

#include <algorithm>
#include <cstring>

#include "util/error.h"

namespace kvlm::jinja {

void template_error(int line, const std::string& message) {
    throw_error("chat template: {} at line {}", message, line);
}

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += char(cp);
    } else if (cp < 0x800) {
        out += char(0xc0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out += char(0xe0 | (cp >> 12));
        out += char(0x80 | ((cp >> 6) & 0x3f));
        out += char(0x80 | (cp & 0x3f));
    } else {
        out += char(0xf0 | (cp >> 18));
        out += char(0x80 | ((cp >> 12) & 0x3f));
        out += char(0x80 | ((cp >> 6) & 0x3f));
        out += char(0x80 | (cp & 0x3f));
    }
}

int hex_value(char c) {
    if (is_digit(c)) return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// Decodes Python unicode-escape sequences as jinja2 does for string literals.
std::string unescape(const std::string& body, int line) {
    std::string out;
    for (size_t k = 0; k < body.size(); ++k) {
        char c = body[k];
        if (c != '\\' || k + 1 >= body.size()) {
            out += c;
            continue;
        }
        char e = body[++k];
        switch (e) {
            case 'n': out += '\n'; break;
            case 't': out += '\t'; break;
            case 'r': out += '\r'; break;
            case '\\': out += '\\'; break;
            case '\'': out += '\''; break;
            case '"': out += '"'; break;
            case 'a': out += '\a'; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'v': out += '\v'; break;
            case '\n': break;  // line continuation
            case 'x':
            case 'u':
            case 'U': {
                size_t n_digits = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
                uint32_t cp = 0;
                for (size_t d = 0; d < n_digits; ++d) {
                    int h = k + 1 + d < body.size() ? hex_value(body[k + 1 + d]) : -1;
                    if (h < 0) template_error(line, "truncated \\" + std::string(1, e) + " escape in string literal");
                    cp = cp * 16 + uint32_t(h);
                }
                if (cp > 0x10ffff) template_error(line, "invalid \\U escape in string literal");
                append_utf8(out, cp);
                k += n_digits;
                break;
            }
            default:
                if (e >= '0' && e <= '7') {  // octal, up to 3 digits
                    uint32_t cp = uint32_t(e - '0');
                    for (int d = 0; d < 2 && k + 1 < body.size() && body[k + 1] >= '0' && body[k + 1] <= '7'; ++d)
                        cp = cp * 8 + uint32_t(body[++k] - '0');
                    append_utf8(out, cp);
                } else {
                    out += '\\';  // unknown escapes stay as written
                    out += e;
                }
        }
    }
    return out;
}

class Lexer {
public:
    explicit Lexer(std::string source) : src_(std::move(source)) {
        for (size_t k = 0; k < src_.size(); ++k)
            if (src_[k] == '\n') newlines_.push_back(k);
    }

    std::vector<Token> run() {
        size_t pos = 0;
        while (pos < src_.size()) {
            size_t tag = find_tag(pos);
            std::string text = src_.substr(pos, tag - pos);
            if (tag == src_.size()) {
                emit(TokenKind::text, text, pos);
                break;
            }
            char kind = src_[tag + 1];
            char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
            if (sign == '-') {
                size_t end = text.size();
                while (end > 0 && is_space(text[end - 1])) --end;
                text.resize(end);
            } else if (sign != '+' && kind != '{') {
                // lstrip_blocks: drop spaces/tabs between the line start and a block or comment tag.
                size_t l = text.rfind('\n');
                size_t lpos = l == std::string::npos ? 0 : l + 1;
                bool line_start = lpos > 0 || pos == 0 || src_[pos - 1] == '\n';
                if (line_start && text.find_first_not_of(" \t", lpos) == std::string::npos) text.resize(lpos);
            }
            emit(TokenKind::text, text, pos);
            size_t p = tag + 2 + (sign == '-' || sign == '+' ? 1 : 0);
            pos = kind == '#' ? skip_comment(tag, p) : lex_tag(kind, tag, p);
        }
        tokens_.push_back({TokenKind::eof, "", line_at(src_.size())});
        return std::move(tokens_);
    }

private:
    std::string src_;
    std::vector<size_t> newlines_;
    std::vector<Token> tokens_;

    int line_at(size_t pos) const {
        return int(std::lower_bound(newlines_.begin(), newlines_.end(), pos) - newlines_.begin()) + 1;
    }

    void emit(TokenKind kind, std::string text, size_t pos) {
        if (kind == TokenKind::text && text.empty()) return;
        tokens_.push_back({kind, std::move(text), line_at(pos)});
    }

    size_t find_tag(size_t pos) const {
        for (size_t k = pos; k + 1 < src_.size(); ++k)
            if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) return k;
        return src_.size();
    }

    // Position after the end of a tag: `strip` drops all following whitespace, `trim` one newline.
    size_t after_end(size_t end, bool strip, bool trim) const {
        if (strip)
            while (end < src_.size() && is_space(src_[end])) ++end;
        else if (trim && end < src_.size() && src_[end] == '\n')
            ++end;
        return end;
    }

    size_t skip_comment(size_t tag, size_t p) {
        size_t end = src_.find("#}", p);
        if (end == std::string::npos) template_error(line_at(tag), "unterminated comment '{#'");
        bool strip = end > p && src_[end - 1] == '-';
        bool keep = end > p && src_[end - 1] == '+';
        return after_end(end + 2, strip, !keep);
    }

    size_t lex_tag(char kind, size_t tag, size_t p) {
        emit(kind == '{' ? TokenKind::var_begin : TokenKind::block_begin, kind == '{' ? "{{" : "{%", tag);
        const char* close = kind == '{' ? "}}" : "%}";
        std::vector<char> brackets;
        while (true) {
            while (p < src_.size() && is_space(src_[p])) ++p;
            if (p >= src_.size())
                template_error(line_at(tag), fmt::format("unterminated '{{{}' (missing '{}')", kind, close));
            if (brackets.empty()) {
                bool minus = src_.compare(p, 3, std::string("-") + close) == 0;
                bool plus = kind == '%' && src_.compare(p, 3, std::string("+") + close) == 0;
                if (minus || plus || src_.compare(p, 2, close) == 0) {
                    emit(kind == '{' ? TokenKind::var_end : TokenKind::block_end, close, p);
                    size_t end = p + (minus || plus ? 3 : 2);
                    return after_end(end, minus, kind == '%' && !plus);
                }
            }
            p = lex_token(p, brackets);
        }
    }

    size_t lex_token(size_t p, std::vector<char>& brackets) {
        char c = src_[p];
        if (is_name_start(c)) {
            size_t e = p;
            while (e < src_.size() && is_name_char(src_[e])) ++e;
            emit(TokenKind::name, src_.substr(p, e - p), p);
            return e;
        }
        if (is_digit(c)) return lex_number(p);
        if (c == '\'' || c == '"') {
            size_t e = p + 1;
            while (e < src_.size() && src_[e] != c) e += src_[e] == '\\' ? 2 : 1;
            if (e >= src_.size()) template_error(line_at(p), "unterminated string literal");
            emit(TokenKind::string, unescape(src_.substr(p + 1, e - p - 1), line_at(p)), p);
            return e + 1;
        }
        static const char* two_char_ops[] = {"//", "**", "==", "!=", "<=", ">="};
        for (const char* op : two_char_ops)
            if (src_.compare(p, 2, op) == 0) {
                emit(TokenKind::op, op, p);
                return p + 2;
            }
        if (std::strchr("+-*/%~<>=.,:|()[]{}", c) == nullptr || c == '\0')
            template_error(line_at(p), fmt::format("unexpected character '{}' in expression", c));
        if (c == '(' || c == '[' || c == '{') brackets.push_back(c);
        if (c == ')' || c == ']' || c == '}') {
            char open = c == ')' ? '(' : (c == ']' ? '[' : '{');
            if (brackets.empty() || brackets.back() != open)
                template_error(line_at(p), fmt::format("unexpected '{}'", c));
            brackets.pop_back();
        }
        emit(TokenKind::op, std::string(1, c), p);
        return p + 1;
    }

    size_t lex_number(size_t p) {
        auto digits = [&](size_t e) {
            while (e < src_.size() && (is_digit(src_[e]) || (src_[e] == '_' && e + 1 < src_.size() && is_digit(src_[e + 1]))))
                ++e;
            return e;
        };
        size_t e = digits(p);
        bool is_float = false;
        bool after_dot = !tokens_.empty() && tokens_.back().kind == TokenKind::op && tokens_.back().text == ".";
        if (!after_dot && e + 1 < src_.size() && src_[e] == '.' && is_digit(src_[e + 1])) {
            e = digits(e + 1);
            is_float = true;
        }
        if (!after_dot && e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
            size_t x = e + 1;
            if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
            if (x < src_.size() && is_digit(src_[x])) {
                e = digits(x);
                is_float = true;
            }
        }
        std::string text = src_.substr(p, e - p);
        text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
        emit(is_float ? TokenKind::floating : TokenKind::integer, text, p);
        return e;
    }
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) {
    std::string src;
    src.reserve(source.size());
    for (size_t k = 0; k < source.size(); ++k) {  // jinja2 normalizes \r\n and \r to \n
        if (source[k] == '\r') {
            src += '\n';
            if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
        } else {
            src += source[k];
        }
    }
    if (!src.empty() && src.back() == '\n') src.pop_back();  // keep_trailing_newline=False
    return Lexer(std::move(src)).run();
}

}  // namespace kvlm::jinja
