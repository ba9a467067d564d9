// Recursive-descent Jinja parser mirroring jinja2's grammar for the supported subset. Nesting depth and the
// height of expression trees are bounded so hostile input cannot overflow the stack (parsing, evaluating or
// destroying); every unsupported tag is reported with its line.
#include "chat/jinja/parser.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "util/error.h"

namespace kvlm::jinja {
namespace {

constexpr int max_nesting = 100;

class Parser {
public:
    explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

    NodeList parse_all() {
        std::string end;
        NodeList nodes = parse_body({}, &end);
        return nodes;
    }

private:
    const std::vector<Token>& t_;
    size_t p_ = 0;
    int depth_ = 0;

    struct DepthGuard {
        Parser& parser;
        explicit DepthGuard(Parser& p) : parser(p) {
            if (++parser.depth_ > max_nesting) template_error(p.cur().line, "template nested too deeply");
        }
        ~DepthGuard() { --parser.depth_; }
    };

    const Token& cur() const { return t_[p_]; }
    const Token& peek(size_t n = 1) const { return t_[std::min(p_ + n, t_.size() - 1)]; }
    void next() {
        if (p_ + 1 < t_.size()) ++p_;
    }
    bool is_op(const char* op) const { return cur().kind == TokenKind::op && cur().text == op; }
    bool is_name(const char* name) const { return cur().kind == TokenKind::name && cur().text == name; }
    bool skip_op(const char* op) {
        if (!is_op(op)) return false;
        next();
        return true;
    }
    bool skip_name(const char* name) {
        if (!is_name(name)) return false;
        next();
        return true;
    }

    static std::string describe(const Token& tok) {
        switch (tok.kind) {
            case TokenKind::eof: return "end of template";
            case TokenKind::text: return "text";
            case TokenKind::string: return "string literal";
            case TokenKind::block_end: return "'%}'";
            case TokenKind::var_end: return "'}}'";
            default: return "'" + tok.text + "'";
        }
    }
    [[noreturn]] void unexpected(const std::string& expected) const {
        template_error(cur().line, fmt::format("expected {}, found {}", expected, describe(cur())));
    }
    void expect_op(const char* op) {
        if (!skip_op(op)) unexpected(fmt::format("'{}'", op));
    }
    void expect_block_end() {
        if (cur().kind != TokenKind::block_end) unexpected("'%}'");
        next();
    }
    std::string expect_identifier() {
        if (cur().kind != TokenKind::name) unexpected("a name");
        std::string name = cur().text;
        next();
        return name;
    }

    // Parses statements until a block tag named in `end_tags`; leaves the position after that tag's name.
    NodeList parse_body(const std::vector<std::string>& end_tags, std::string* found) {
        DepthGuard guard(*this);
        NodeList nodes;
        while (true) {
            const Token& tok = cur();
            if (tok.kind == TokenKind::eof) {
                if (!end_tags.empty())
                    template_error(tok.line, fmt::format("unexpected end of template, expected '{{% {} %}}'",
                                                         end_tags.back()));
                return nodes;
            }
            if (tok.kind == TokenKind::text) {
                auto node = make_node(Node::Kind::text);
                node->text = tok.text;
                nodes.push_back(std::move(node));
                next();
            } else if (tok.kind == TokenKind::var_begin) {
                next();
                auto node = make_node(Node::Kind::output);
                node->expr = parse_expression();
                if (cur().kind != TokenKind::var_end) unexpected("'}}'");
                next();
                nodes.push_back(std::move(node));
            } else if (tok.kind == TokenKind::block_begin) {
                next();
                if (cur().kind != TokenKind::name) unexpected("a tag name");
                std::string tag = cur().text;
                for (const auto& end : end_tags)
                    if (tag == end) {
                        next();
                        *found = tag;
                        return nodes;
                    }
                nodes.push_back(parse_statement());
            } else {
                unexpected("text or a tag");
            }
        }
    }

    std::unique_ptr<Node> make_node(Node::Kind kind) {
        auto node = std::make_unique<Node>();
        node->kind = kind;
        node->line = cur().line;
        return node;
    }

    std::unique_ptr<Node> parse_statement() {
        std::string tag = cur().text;
        int line = cur().line;
        next();
        std::unique_ptr<Node> node;
        if (tag == "if") node = parse_if();
        else if (tag == "for") node = parse_for();
        else if (tag == "set") node = parse_set();
        else if (tag == "macro") node = parse_macro();
        else if (tag == "break" || tag == "continue") {
            node = make_node(tag == "break" ? Node::Kind::break_ : Node::Kind::continue_);
            expect_block_end();
        } else if (tag == "generation") {
            expect_block_end();
            node = make_node(Node::Kind::scope);
            std::string end;
            node->body = parse_body({"endgeneration"}, &end);
            expect_block_end();
        } else if (tag.rfind("end", 0) == 0 || tag == "elif" || tag == "else") {
            template_error(line, fmt::format("unexpected '{{% {} %}}' with no open block", tag));
        } else {
            template_error(line, fmt::format("unsupported tag '{}'", tag));
        }
        node->line = line;
        return node;
    }

    std::unique_ptr<Node> parse_if() {
        auto node = make_node(Node::Kind::if_);
        while (true) {
            ExprPtr cond = parse_expression();
            expect_block_end();
            std::string end;
            NodeList body = parse_body({"elif", "else", "endif"}, &end);
            node->branches.emplace_back(std::move(cond), std::move(body));
            if (end == "elif") continue;
            if (end == "else") {
                expect_block_end();
                node->else_body = parse_body({"endif"}, &end);
            }
            expect_block_end();
            return node;
        }
    }

    std::unique_ptr<Node> parse_for() {
        auto node = make_node(Node::Kind::for_);
        do {
            node->targets.push_back(expect_identifier());
        } while (skip_op(","));
        if (!skip_name("in")) unexpected("'in'");
        node->expr = parse_expression(false);
        if (skip_name("if")) node->filter = parse_expression(false);
        if (is_name("recursive")) template_error(cur().line, "unsupported: recursive for loops");
        expect_block_end();
        std::string end;
        node->body = parse_body({"else", "endfor"}, &end);
        if (end == "else") {
            expect_block_end();
            node->else_body = parse_body({"endfor"}, &end);
        }
        expect_block_end();
        return node;
    }

    std::unique_ptr<Node> parse_set() {
        auto node = make_node(Node::Kind::set);
        node->targets.push_back(expect_identifier());
        if (skip_op(".")) {
            node->attr = expect_identifier();
        } else {
            while (skip_op(",")) node->targets.push_back(expect_identifier());
        }
        if (cur().kind == TokenKind::block_end && node->attr.empty() && node->targets.size() == 1) {
            next();
            node->kind = Node::Kind::set_block;
            std::string end;
            node->body = parse_body({"endset"}, &end);
            expect_block_end();
            return node;
        }
        expect_op("=");
        node->expr = parse_expression();
        if (is_op(",")) {  // set a, b = x, y
            auto tuple = std::make_unique<Expr>();
            tuple->kind = Expr::Kind::list;
            tuple->line = node->expr->line;
            add_arg(*tuple, std::move(node->expr));
            while (skip_op(",")) add_arg(*tuple, parse_expression());
            node->expr = std::move(tuple);
        }
        expect_block_end();
        return node;
    }

    std::unique_ptr<Node> parse_macro() {
        auto node = make_node(Node::Kind::macro);
        node->text = expect_identifier();
        expect_op("(");
        while (!is_op(")")) {
            std::string param = expect_identifier();
            ExprPtr def;
            if (skip_op("=")) def = parse_expression();
            node->params.emplace_back(param, std::move(def));
            if (!skip_op(",")) break;
        }
        expect_op(")");
        expect_block_end();
        std::string end;
        node->body = parse_body({"endmacro"}, &end);
        expect_block_end();
        return node;
    }

    // Keeps e.depth, the height of its tree, within max_nesting: operator, filter and attribute chains
    // build deep trees without deep parser recursion, and evaluating or destroying them recurses.
    void grow_depth(Expr& e, const Expr* child) {
        if (!child) return;
        e.depth = std::max(e.depth, child->depth + 1);
        if (e.depth > max_nesting) template_error(e.line, "expression nested too deeply");
    }
    void add_arg(Expr& e, ExprPtr arg) {
        grow_depth(e, arg.get());
        e.args.push_back(std::move(arg));
    }

    ExprPtr make_expr(Expr::Kind kind, int line) {
        auto e = std::make_unique<Expr>();
        e->kind = kind;
        e->line = line;
        return e;
    }
    ExprPtr make_binary(Expr::Kind kind, const std::string& op, ExprPtr left, ExprPtr right) {
        auto e = make_expr(kind, left->line);
        e->name = op;
        add_arg(*e, std::move(left));
        add_arg(*e, std::move(right));
        return e;
    }

    ExprPtr parse_expression(bool with_condexpr = true) {
        DepthGuard guard(*this);
        ExprPtr expr = parse_or();
        while (with_condexpr && is_name("if")) {
            next();
            auto cond = make_expr(Expr::Kind::cond, expr->line);
            add_arg(*cond, parse_or());
            add_arg(*cond, std::move(expr));
            add_arg(*cond, skip_name("else") ? parse_expression() : nullptr);
            expr = std::move(cond);
        }
        return expr;
    }

    ExprPtr parse_or() {
        ExprPtr left = parse_and();
        while (skip_name("or")) left = make_binary(Expr::Kind::binary, "or", std::move(left), parse_and());
        return left;
    }

    ExprPtr parse_and() {
        ExprPtr left = parse_not();
        while (skip_name("and")) left = make_binary(Expr::Kind::binary, "and", std::move(left), parse_not());
        return left;
    }

    ExprPtr parse_not() {
        if (is_name("not")) {
            DepthGuard guard(*this);
            auto e = make_expr(Expr::Kind::unary, cur().line);
            next();
            e->name = "not";
            add_arg(*e, parse_not());
            return e;
        }
        return parse_compare();
    }

    ExprPtr parse_compare() {
        ExprPtr first = parse_math1();
        ExprPtr cmp;
        while (true) {
            std::string op;
            const Token& tok = cur();
            if (tok.kind == TokenKind::op &&
                (tok.text == "==" || tok.text == "!=" || tok.text == "<" || tok.text == "<=" || tok.text == ">" ||
                 tok.text == ">=")) {
                op = tok.text;
                next();
            } else if (is_name("in")) {
                op = "in";
                next();
            } else if (is_name("not") && peek().kind == TokenKind::name && peek().text == "in") {
                op = "not in";
                next();
                next();
            } else {
                break;
            }
            if (!cmp) {
                cmp = make_expr(Expr::Kind::compare, first->line);
                add_arg(*cmp, std::move(first));
            }
            cmp->ops.push_back(op);
            add_arg(*cmp, parse_math1());
        }
        return cmp ? std::move(cmp) : std::move(first);
    }

    ExprPtr parse_math1() {
        ExprPtr left = parse_concat();
        while (is_op("+") || is_op("-")) {
            std::string op = cur().text;
            next();
            left = make_binary(Expr::Kind::binary, op, std::move(left), parse_concat());
        }
        return left;
    }

    ExprPtr parse_concat() {
        ExprPtr left = parse_math2();
        while (skip_op("~")) left = make_binary(Expr::Kind::binary, "~", std::move(left), parse_math2());
        return left;
    }

    ExprPtr parse_math2() {
        ExprPtr left = parse_pow();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            std::string op = cur().text;
            next();
            left = make_binary(Expr::Kind::binary, op, std::move(left), parse_pow());
        }
        return left;
    }

    ExprPtr parse_pow() {
        ExprPtr left = parse_unary();
        while (skip_op("**")) left = make_binary(Expr::Kind::binary, "**", std::move(left), parse_unary());
        return left;
    }

    ExprPtr parse_unary(bool with_filter = true) {
        DepthGuard guard(*this);
        ExprPtr node;
        if (is_op("-") || is_op("+")) {
            node = make_expr(Expr::Kind::unary, cur().line);
            node->name = cur().text;
            next();
            add_arg(*node, parse_unary(false));
        } else {
            node = parse_postfix(parse_primary());
        }
        return with_filter ? parse_filter_expr(std::move(node)) : std::move(node);
    }

    ExprPtr parse_primary() {
        const Token& tok = cur();
        int line = tok.line;
        auto literal = [&](Value v) {
            auto e = make_expr(Expr::Kind::literal, line);
            e->value = std::move(v);
            next();
            return e;
        };
        switch (tok.kind) {
            case TokenKind::name: {
                const std::string& n = tok.text;
                if (n == "true" || n == "True") return literal(Value::boolean(true));
                if (n == "false" || n == "False") return literal(Value::boolean(false));
                if (n == "none" || n == "None") return literal(Value::none());
                auto e = make_expr(Expr::Kind::name, line);
                e->name = n;
                next();
                return e;
            }
            case TokenKind::string: {
                std::string s;
                while (cur().kind == TokenKind::string) {  // adjacent literals concatenate
                    s += cur().text;
                    next();
                }
                auto e = make_expr(Expr::Kind::literal, line);
                e->value = Value::string(std::move(s));
                return e;
            }
            case TokenKind::integer: {
                errno = 0;
                long long v = std::strtoll(tok.text.c_str(), nullptr, 10);
                if (errno == ERANGE) template_error(line, "integer literal out of range");
                return literal(Value::integer(v));
            }
            case TokenKind::floating: return literal(Value::floating(std::strtod(tok.text.c_str(), nullptr)));
            case TokenKind::op:
                if (tok.text == "(") return parse_paren();
                if (tok.text == "[") return parse_list();
                if (tok.text == "{") return parse_dict();
                break;
            default: break;
        }
        unexpected("an expression");
    }

    ExprPtr parse_paren() {
        int line = cur().line;
        next();
        if (skip_op(")")) return make_expr(Expr::Kind::list, line);  // empty tuple
        ExprPtr expr = parse_expression();
        if (is_op(",")) {
            auto tuple = make_expr(Expr::Kind::list, line);
            add_arg(*tuple, std::move(expr));
            while (skip_op(",") && !is_op(")")) add_arg(*tuple, parse_expression());
            expr = std::move(tuple);
        }
        expect_op(")");
        return expr;
    }

    ExprPtr parse_list() {
        auto list = make_expr(Expr::Kind::list, cur().line);
        next();
        while (!is_op("]")) {
            add_arg(*list, parse_expression());
            if (!skip_op(",")) break;
        }
        expect_op("]");
        return list;
    }

    ExprPtr parse_dict() {
        auto dict = make_expr(Expr::Kind::dict, cur().line);
        next();
        while (!is_op("}")) {
            add_arg(*dict, parse_expression());
            expect_op(":");
            add_arg(*dict, parse_expression());
            if (!skip_op(",")) break;
        }
        expect_op("}");
        return dict;
    }

    ExprPtr parse_postfix(ExprPtr node) {
        while (true) {
            int line = cur().line;
            if (skip_op(".")) {
                if (cur().kind == TokenKind::integer) {  // foo.0 is foo[0]
                    auto index = make_expr(Expr::Kind::literal, line);
                    index->value = Value::integer(std::strtoll(cur().text.c_str(), nullptr, 10));
                    next();
                    auto e = make_expr(Expr::Kind::subscript, line);
                    add_arg(*e, std::move(node));
                    add_arg(*e, std::move(index));
                    node = std::move(e);
                } else {
                    auto e = make_expr(Expr::Kind::attr, line);
                    e->name = expect_identifier();
                    add_arg(*e, std::move(node));
                    node = std::move(e);
                }
            } else if (is_op("[")) {
                node = parse_subscript(std::move(node));
            } else if (is_op("(")) {
                node = parse_call(std::move(node));
            } else {
                return node;
            }
        }
    }

    ExprPtr parse_subscript(ExprPtr node) {
        int line = cur().line;
        next();
        ExprPtr parts[3];
        int n_colons = 0;
        while (true) {
            if (is_op(":") && n_colons < 2) {
                next();
                ++n_colons;
            } else if (is_op("]")) {
                break;
            } else if (!parts[n_colons]) {
                parts[n_colons] = parse_expression();
            } else {
                unexpected("']'");
            }
        }
        expect_op("]");
        if (n_colons == 0 && !parts[0]) template_error(line, "empty subscript");
        auto e = make_expr(n_colons ? Expr::Kind::slice : Expr::Kind::subscript, line);
        add_arg(*e, std::move(node));
        for (int k = 0; k < (n_colons ? 3 : 1); ++k) add_arg(*e, std::move(parts[k]));
        return e;
    }

    // Parses "(args, kw=value)" into e->args (after any already present) and e->kwargs.
    void parse_call_args(Expr& e) {
        expect_op("(");
        while (!is_op(")")) {
            if (is_op("*") || is_op("**")) template_error(cur().line, "unsupported: *args / **kwargs in calls");
            if (cur().kind == TokenKind::name && peek().kind == TokenKind::op && peek().text == "=") {
                std::string key = cur().text;
                next();
                next();
                ExprPtr value = parse_expression();
                grow_depth(e, value.get());
                e.kwargs.emplace_back(key, std::move(value));
            } else {
                if (!e.kwargs.empty()) template_error(cur().line, "positional argument after keyword argument");
                add_arg(e, parse_expression());
            }
            if (!skip_op(",")) break;
        }
        expect_op(")");
    }

    ExprPtr parse_call(ExprPtr node) {
        auto e = make_expr(Expr::Kind::call, cur().line);
        add_arg(*e, std::move(node));
        parse_call_args(*e);
        return e;
    }

    std::string dotted_name() {
        std::string name = expect_identifier();
        while (is_op(".") && peek().kind == TokenKind::name) {
            next();
            name += "." + expect_identifier();
        }
        return name;
    }

    ExprPtr parse_filter_expr(ExprPtr node) {
        while (true) {
            int line = cur().line;
            if (skip_op("|")) {
                auto e = make_expr(Expr::Kind::filter, line);
                e->name = dotted_name();
                add_arg(*e, std::move(node));
                if (is_op("(")) parse_call_args(*e);
                node = std::move(e);
            } else if (skip_name("is")) {
                auto e = make_expr(Expr::Kind::test, line);
                e->negate = skip_name("not");
                e->name = dotted_name();
                add_arg(*e, std::move(node));
                const Token& tok = cur();
                if (is_op("(")) {
                    parse_call_args(*e);
                } else if ((tok.kind == TokenKind::name || tok.kind == TokenKind::string ||
                            tok.kind == TokenKind::integer || tok.kind == TokenKind::floating || is_op("[") ||
                            is_op("{")) &&
                           !is_name("else") && !is_name("or") && !is_name("and")) {
                    add_arg(*e, parse_postfix(parse_primary()));  // `x is divisibleby 3`
                }
                node = std::move(e);
            } else if (is_op("(")) {
                node = parse_call(std::move(node));
            } else {
                return node;
            }
        }
    }
};

}  // namespace

NodeList parse_template(const std::vector<Token>& tokens) { return Parser(tokens).parse_all(); }

}  // namespace kvlm::jinja
