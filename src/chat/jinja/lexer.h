// Jinja lexer: splits template source into text and tag tokens, applying jinja2's whitespace rules
// as Hugging Face configures them (trim_blocks, lstrip_blocks, {%- -%} stripping, trailing newline dropped).
#pragma once
#include <string>
#include <vector>

namespace kvlm::jinja {

enum class TokenKind {
    text,         // literal output, whitespace control already applied
    var_begin,    // {{
    var_end,      // }}
    block_begin,  // {%
    block_end,    // %}
    name,         // identifier or keyword
    string,       // string literal, escapes already decoded
    integer,
    floating,
    op,           // operator or punctuation: + - * / // % ** ~ == != < <= > >= = . , : | ( ) [ ] { }
    eof,
};

struct Token {
    TokenKind kind;
    std::string text;
    int line;
};

// Throws kvlm::Error("chat template: MESSAGE at line LINE"); shared by lexer, parser and evaluator.
[[noreturn]] void template_error(int line, const std::string& message);

// Throws kvlm::Error("chat template: ... at line L") on unterminated tags, strings or comments and on
// characters outside the expression syntax.
std::vector<Token> tokenize(const std::string& source);

}  // namespace kvlm::jinja
