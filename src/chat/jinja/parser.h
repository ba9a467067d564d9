// Jinja parser: token stream -> statement tree, with jinja2's operator precedence (filters and `is`
// tests bind tighter than arithmetic, `not` looser than comparisons). Constructs outside the subset are errors.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja/lexer.h"
#include "chat/jinja/value.h"

namespace kvlm::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
    enum class Kind {
        literal,    // value
        name,       // name
        list,       // args (tuples are lists)
        dict,       // args: key0, value0, key1, value1, ...
        attr,       // args[0].name
        subscript,  // args[0][args[1]]
        slice,      // args[0][args[1]:args[2]:args[3]] (null parts omitted)
        call,       // args[0](args[1..], kwargs)
        filter,     // args[0] | name(args[1..], kwargs)
        test,       // args[0] is [not: negate] name(args[1..])
        unary,      // name in {"not", "-", "+"} applied to args[0]
        binary,     // args[0] name args[1], name in {+ - * / // % ** ~ and or}
        compare,    // args[0] ops[0] args[1] ops[1] args[2] ... (chained like Python)
        cond,       // args[1] if args[0] else args[2] (args[2] may be null)
    };
    Kind kind;
    int line = 0;
    int depth = 1;  // height of this tree (bounded by the parser)
    Value value;
    std::string name;
    bool negate = false;
    std::vector<ExprPtr> args;
    std::vector<std::pair<std::string, ExprPtr>> kwargs;
    std::vector<std::string> ops;
};

struct Node;
using NodeList = std::vector<std::unique_ptr<Node>>;

struct Node {
    enum class Kind {
        text,       // text
        output,     // {{ expr }}
        if_,        // branches: (condition, body)...; else_body
        for_,       // for targets in expr [if filter]: body; else_body (when no iterations)
        set,        // set targets = expr, or set targets[0].attr = expr (attr non-empty)
        set_block,  // set targets[0] %} body {% endset
        macro,      // macro name(params) body
        break_,
        continue_,
        scope,      // body rendered as is (HF's {% generation %})
    };
    Kind kind;
    int line = 0;
    std::string text;
    ExprPtr expr;
    ExprPtr filter;
    std::vector<std::string> targets;
    std::string attr;
    std::vector<std::pair<ExprPtr, NodeList>> branches;
    NodeList body;
    NodeList else_body;
    std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters and defaults (may be null)
};

// Parses a whole template. Throws kvlm::Error("chat template: ... at line L").
NodeList parse_template(const std::vector<Token>& tokens);

}  // namespace kvlm::jinja
