// Jinja evaluator. Scopes form a stack (root = globals); lookups walk it top-down and `set` writes the top
// frame. Every statement and expression costs a step and values charge their bytes to a WorkMeter, so
// runaway templates stop with an error.
#include "chat/jinja/eval.h"

#include <fmt/format.h>

#include <cmath>
#include <unordered_set>

#include "chat/jinja/builtins.h"

namespace kvlm::jinja {
namespace {

enum class Flow { normal, break_, continue_ };

[[noreturn]] void undefined_error(const Value& v) {
    fail(fmt::format("'{}' is undefined", v.s.empty() ? "value" : v.s));
}

// Applies a __builtin_*_overflow operation, failing on overflow (Python ints do not wrap).
template <typename Op>
int64_t checked(Op op, int64_t x, int64_t y) {
    int64_t r = 0;
    if (op(x, y, &r)) fail("integer overflow");
    return r;
}
bool add_overflow(int64_t x, int64_t y, int64_t* r) { return __builtin_add_overflow(x, y, r); }
bool sub_overflow(int64_t x, int64_t y, int64_t* r) { return __builtin_sub_overflow(x, y, r); }
bool mul_overflow(int64_t x, int64_t y, int64_t* r) { return __builtin_mul_overflow(x, y, r); }

bool is_int_like(const Value& v) { return v.kind == Value::Kind::integer || v.kind == Value::Kind::boolean; }
int64_t int_of(const Value& v) { return v.kind == Value::Kind::boolean ? v.b : v.i; }

Value repeat(const Value& seq, int64_t n) {
    n = std::max<int64_t>(n, 0);
    size_t unit = seq.is_string() ? seq.s.size() : seq.list->size();
    if (unit == 0 || n == 0) return seq.is_string() ? Value::string("") : Value::make_list({});
    if (uint64_t(n) > (uint64_t(1) << 26) / unit) fail("repetition result too large");
    uint64_t unit_bytes = seq.is_string() ? seq.s.size() : 0;
    if (seq.is_list())
        for (const Value& item : *seq.list) unit_bytes += sizeof(Value) + item.s.size();
    charge_work(uint64_t(n) * std::min<uint64_t>(unit_bytes, uint64_t(1) << 36));  // n <= 2^26: no overflow
    if (seq.is_string()) {  // by doubling: 'x' * 10**7 takes 24 appends, not 10**7
        const size_t total = unit * size_t(n);
        std::string out = seq.s;
        out.reserve(total);
        while (out.size() * 2 <= total) out.append(out.data(), out.size());
        out.append(out.data(), total - out.size());
        return Value::string(std::move(out));
    }
    ValueList out;
    out.reserve(unit * size_t(n));
    for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
    return Value::make_list(std::move(out));
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
    if (a.is_undefined()) undefined_error(a);
    if (b.is_undefined()) undefined_error(b);
    auto unsupported = [&]() -> Value {
        fail(fmt::format("unsupported operand types for {}: {} and {}", op, type_name(a), type_name(b)));
    };
    if (a.is_number() && b.is_number()) {
        bool ints = is_int_like(a) && is_int_like(b);
        int64_t x = ints ? int_of(a) : 0, y = ints ? int_of(b) : 0;
        double fx = as_double(a), fy = as_double(b);
        if (op == "+") return ints ? Value::integer(checked(add_overflow, x, y)) : Value::floating(fx + fy);
        if (op == "-") return ints ? Value::integer(checked(sub_overflow, x, y)) : Value::floating(fx - fy);
        if (op == "*") return ints ? Value::integer(checked(mul_overflow, x, y)) : Value::floating(fx * fy);
        if (op == "/") {
            if (fy == 0) fail("division by zero");
            return Value::floating(fx / fy);
        }
        if (op == "//" || op == "%") {
            if (fy == 0) fail("integer division or modulo by zero");
            if (ints) {
                if (x == INT64_MIN && y == -1) fail("integer overflow");
                int64_t q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) {
                    --q;
                    m += y;
                }
                return Value::integer(op == "//" ? q : m);
            }
            double m = std::fmod(fx, fy);
            if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
            return Value::floating(op == "//" ? std::floor(fx / fy) : m);
        }
        if (op == "**") {
            if (ints && y >= 0) {
                int64_t result = 1;
                for (int64_t k = 0; k < y; ++k) {
                    result = checked(mul_overflow, result, x);
                    if (result == 0 || result == 1) break;
                }
                return Value::integer(result);
            }
            return Value::floating(std::pow(fx, fy));
        }
        return unsupported();
    }
    if (op == "+" && a.is_string() && b.is_string()) {
        charge_work(a.s.size() + b.s.size());
        return Value::string(a.s + b.s);
    }
    if (op == "+" && a.is_list() && b.is_list()) {
        ValueList out = *a.list;
        out.insert(out.end(), b.list->begin(), b.list->end());
        return Value::make_list(std::move(out));
    }
    if (op == "*" && (a.is_string() || a.is_list()) && is_int_like(b)) return repeat(a, int_of(b));
    if (op == "*" && (b.is_string() || b.is_list()) && is_int_like(a)) return repeat(b, int_of(a));
    return unsupported();
}

bool contains(const Value& container, const Value& item) {
    if (container.is_string()) {
        if (!item.is_string()) fail("'in <string>' requires a string as left operand, found " + type_name(item));
        return find_text(container.s, item.s) != std::string::npos;
    }
    if (container.is_dict() || container.kind == Value::Kind::ns)
        return item.is_string() && container.dict->find(item.s) != nullptr;
    ValueList storage;
    for (const Value& v : items_of(container, storage))
        if (equals(v, item)) return true;
    return false;
}

class Evaluator {
public:
    Evaluator(ValueDict globals, const RenderLimits& limits) : limits_(limits), meter_(limits.max_work) {
        scopes_.push_back(std::make_shared<ValueDict>(std::move(globals)));
    }
    // Empties every namespace assigned to: that breaks reference cycles (a namespace holding itself) and,
    // since they were kept alive until now, no chain of them was destroyed recursively during the render.
    ~Evaluator() {
        for (const auto& ns : assigned_namespaces_) ns->items.clear();
    }

    std::string run(const NodeList& nodes) {
        try {
            exec(nodes);
        } catch (const EvalError& e) {
            template_error(line_, e.what());
        }
        return std::move(out_);
    }

private:
    RenderLimits limits_;
    WorkMeter meter_;  // installed for this thread while the evaluator exists
    std::vector<std::shared_ptr<ValueDict>> scopes_;
    std::vector<std::shared_ptr<ValueDict>> assigned_namespaces_;  // each once, see ~Evaluator
    std::unordered_set<const ValueDict*> assigned_seen_;
    std::string out_;
    int line_ = 1;
    int depth_ = 0;    // macro calls
    int nesting_ = 0;  // exec(Node) + eval(Expr) frames
    int64_t steps_ = 0;

    struct NestingGuard {
        Evaluator& evaluator;
        explicit NestingGuard(Evaluator& e) : evaluator(e) {
            if (++evaluator.nesting_ > evaluator.limits_.max_nesting) {
                --evaluator.nesting_;
                fail(fmt::format("template nested more than {} levels deep while rendering", e.limits_.max_nesting));
            }
        }
        ~NestingGuard() { --evaluator.nesting_; }
    };

    void step(int line) {
        line_ = line;
        if (++steps_ > limits_.max_steps) fail("template exceeded the step limit (runaway loop?)");
    }

    void emit(const std::string& text) {
        if (out_.size() + text.size() > limits_.max_output)
            fail(fmt::format("rendered output exceeds {} bytes", limits_.max_output));
        out_ += text;
    }

    Value lookup(const std::string& name) const {
        for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
            if (const Value* v = (*it)->find(name)) return *v;
        return Value::undefined(name);
    }

    void assign(const std::vector<std::string>& targets, const Value& value, ValueDict& frame) {
        if (targets.size() == 1) {
            frame.set(targets[0], value);
            return;
        }
        ValueList items = iterate(value);
        if (items.size() != targets.size())
            fail(fmt::format("cannot unpack {} values into {} names", items.size(), targets.size()));
        for (size_t k = 0; k < targets.size(); ++k) frame.set(targets[k], items[k]);
    }

    Flow exec(const NodeList& nodes) {
        for (const auto& node : nodes) {
            Flow flow = exec(*node);
            if (flow != Flow::normal) return flow;
        }
        return Flow::normal;
    }

    Flow exec(const Node& node) {
        step(node.line);
        NestingGuard guard(*this);
        switch (node.kind) {
            case Node::Kind::text: emit(node.text); return Flow::normal;
            case Node::Kind::output: emit(to_str(eval(*node.expr))); return Flow::normal;
            case Node::Kind::if_:
                for (const auto& [cond, body] : node.branches)
                    if (truthy(eval(*cond))) return exec(body);
                return exec(node.else_body);
            case Node::Kind::for_: return exec_for(node);
            case Node::Kind::set: {
                Value value = eval(*node.expr);
                line_ = node.line;
                if (node.attr.empty()) {
                    assign(node.targets, value, *scopes_.back());
                } else {
                    Value target = lookup(node.targets[0]);
                    if (target.kind != Value::Kind::ns)
                        fail(fmt::format("cannot assign attribute '{}' on '{}' ({}): only namespace() objects allow it",
                                         node.attr, node.targets[0], type_name(target)));
                    if (value.depth + 1 > kMaxValueDepth)
                        fail(fmt::format("value nested more than {} levels deep", kMaxValueDepth));
                    if (assigned_seen_.insert(target.dict.get()).second) assigned_namespaces_.push_back(target.dict);
                    target.dict->set(node.attr, value);
                }
                return Flow::normal;
            }
            case Node::Kind::set_block: scopes_.back()->set(node.targets[0], Value::string(capture(node.body))); return Flow::normal;
            case Node::Kind::macro: scopes_.back()->set(node.text, make_macro(node)); return Flow::normal;
            case Node::Kind::break_: return Flow::break_;
            case Node::Kind::continue_: return Flow::continue_;
            case Node::Kind::scope: return exec(node.body);
        }
        return Flow::normal;
    }

    std::string capture(const NodeList& body) {
        std::string saved = std::move(out_);
        out_.clear();
        exec(body);
        std::string text = std::move(out_);
        out_ = std::move(saved);
        return text;
    }

    Flow exec_for(const Node& node) {
        Value seq = eval(*node.expr);
        ValueList storage;
        const ValueList& all = items_of(seq, storage);
        if (!node.filter) return exec_loop(node, all);
        ValueList kept;
        for (const Value& item : all) {
            scopes_.push_back(std::make_shared<ValueDict>());
            assign(node.targets, item, *scopes_.back());
            bool keep = truthy(eval(*node.filter));
            scopes_.pop_back();
            if (keep) kept.push_back(item);
        }
        return exec_loop(node, kept);
    }

    Flow exec_loop(const Node& node, const ValueList& items) {
        if (items.empty()) return exec(node.else_body);
        int64_t n = int64_t(items.size());
        auto index = std::make_shared<int64_t>(0);  // read by loop.cycle(), one function per loop
        Value cycle = Value::function([index](const CallArgs& a) {
            if (a.positional.empty()) fail("loop.cycle() needs at least one argument");
            return a.positional[size_t(*index) % a.positional.size()];
        });
        for (int64_t k = 0; k < n; ++k) {
            step(node.line);
            *index = k;
            auto frame = std::make_shared<ValueDict>();
            assign(node.targets, items[size_t(k)], *frame);
            ValueDict loop;
            loop.items.reserve(12);
            loop.items.emplace_back("index", Value::integer(k + 1));
            loop.items.emplace_back("index0", Value::integer(k));
            loop.items.emplace_back("revindex", Value::integer(n - k));
            loop.items.emplace_back("revindex0", Value::integer(n - k - 1));
            loop.items.emplace_back("first", Value::boolean(k == 0));
            loop.items.emplace_back("last", Value::boolean(k == n - 1));
            loop.items.emplace_back("length", Value::integer(n));
            loop.items.emplace_back("depth", Value::integer(1));
            loop.items.emplace_back("depth0", Value::integer(0));
            loop.items.emplace_back("cycle", cycle);
            if (k > 0) loop.items.emplace_back("previtem", items[size_t(k - 1)]);
            if (k + 1 < n) loop.items.emplace_back("nextitem", items[size_t(k + 1)]);
            frame->items.emplace_back("loop", Value::make_dict(std::move(loop)));
            scopes_.push_back(frame);
            Flow flow = exec(node.body);
            scopes_.pop_back();
            if (flow == Flow::break_) break;
        }
        return Flow::normal;
    }

    Value make_macro(const Node& node) {
        const Node* macro = &node;
        return Value::function([this, macro](const CallArgs& args) {
            if (args.positional.size() > macro->params.size())
                fail(fmt::format("macro '{}' takes {} arguments, got {}", macro->text, macro->params.size(),
                                 args.positional.size()));
            if (++depth_ > limits_.max_depth) fail("macro recursion too deep");
            auto frame = std::make_shared<ValueDict>();
            std::vector<std::shared_ptr<ValueDict>> saved = scopes_;
            scopes_.resize(1);  // macros see globals and their arguments, not the caller's locals
            scopes_.push_back(frame);
            for (size_t k = 0; k < macro->params.size(); ++k) {
                const auto& [param, def] = macro->params[k];
                const Value* v = args.get(k, param.c_str());
                frame->set(param, v ? *v : (def ? eval(*def) : Value::undefined(param)));
            }
            std::string text = capture(macro->body);
            scopes_ = std::move(saved);
            --depth_;
            return Value::string(text);
        });
    }

    CallArgs eval_args(const Expr& e, size_t first) {
        CallArgs args;
        for (size_t k = first; k < e.args.size(); ++k) args.positional.push_back(eval(*e.args[k]));
        for (const auto& [key, value] : e.kwargs) args.keyword.emplace_back(key, eval(*value));
        return args;
    }

    Value eval(const Expr& e) {
        step(e.line);
        NestingGuard guard(*this);
        switch (e.kind) {
            case Expr::Kind::literal: return e.value;
            case Expr::Kind::name: return lookup(e.name);
            case Expr::Kind::list: {
                ValueList items;
                for (const auto& a : e.args) items.push_back(eval(*a));
                return Value::make_list(std::move(items));
            }
            case Expr::Kind::dict: {
                ValueDict dict;
                for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
                    Value key = eval(*e.args[k]);
                    if (!key.is_string()) fail("dict keys must be strings, found " + type_name(key));
                    dict.set(key.s, eval(*e.args[k + 1]));
                }
                return Value::make_dict(std::move(dict));
            }
            case Expr::Kind::attr: {
                Value obj = eval(*e.args[0]);
                Value v = get_attr(obj, e.name);
                if (v.is_undefined()) v.s = describe(*e.args[0]) + "." + e.name;
                return v;
            }
            case Expr::Kind::subscript: {
                Value obj = eval(*e.args[0]);
                return get_item(obj, eval(*e.args[1]));
            }
            case Expr::Kind::slice: {
                Value obj = eval(*e.args[0]);
                Value parts[3];
                for (int k = 0; k < 3; ++k)
                    if (e.args[size_t(k) + 1]) parts[k] = eval(*e.args[size_t(k) + 1]);
                return get_slice(obj, parts[0], parts[1], parts[2]);
            }
            case Expr::Kind::call: {
                Value fn = eval(*e.args[0]);
                if (fn.is_undefined()) undefined_error(fn);
                if (fn.kind != Value::Kind::function) fail(fmt::format("'{}' is not callable", describe(*e.args[0])));
                CallArgs args = eval_args(e, 1);
                return (*fn.fn)(args);
            }
            case Expr::Kind::filter: {
                Value input = eval(*e.args[0]);
                return apply_filter(e.name, input, eval_args(e, 1));
            }
            case Expr::Kind::test: {
                Value input = eval(*e.args[0]);
                return Value::boolean(apply_test(e.name, input, eval_args(e, 1)) != e.negate);
            }
            case Expr::Kind::unary: {
                Value v = eval(*e.args[0]);
                if (e.name == "not") return Value::boolean(!truthy(v));
                if (v.is_undefined()) undefined_error(v);
                if (!v.is_number()) fail(fmt::format("bad operand type for unary {}: {}", e.name, type_name(v)));
                if (e.name == "+") return is_int_like(v) ? Value::integer(int_of(v)) : v;
                if (is_int_like(v)) return Value::integer(checked(sub_overflow, 0, int_of(v)));
                return Value::floating(-v.f);
            }
            case Expr::Kind::binary: {
                Value a = eval(*e.args[0]);
                if (e.name == "and") return truthy(a) ? eval(*e.args[1]) : a;
                if (e.name == "or") return truthy(a) ? a : eval(*e.args[1]);
                Value b = eval(*e.args[1]);
                if (e.name == "~") {
                    std::string left = to_str(a), right = to_str(b);
                    charge_work(left.size() + right.size());
                    return Value::string(left + right);
                }
                return arithmetic(e.name, a, b);
            }
            case Expr::Kind::compare: {
                Value left = eval(*e.args[0]);
                for (size_t k = 0; k < e.ops.size(); ++k) {
                    Value right = eval(*e.args[k + 1]);
                    const std::string& op = e.ops[k];
                    bool ok;
                    if (op == "==") ok = equals(left, right);
                    else if (op == "!=") ok = !equals(left, right);
                    else if (op == "in") ok = contains(right, left);
                    else if (op == "not in") ok = !contains(right, left);
                    else {
                        if (left.is_undefined()) undefined_error(left);
                        if (right.is_undefined()) undefined_error(right);
                        int c = compare(left, right);
                        ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
                    }
                    if (!ok) return Value::boolean(false);
                    left = std::move(right);
                }
                return Value::boolean(true);
            }
            case Expr::Kind::cond:
                if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
                return e.args[2] ? eval(*e.args[2]) : Value::undefined();
        }
        return Value::undefined();
    }

    // Short source-like description of an expression for error messages.
    static std::string describe(const Expr& e) {
        switch (e.kind) {
            case Expr::Kind::name: return e.name;
            case Expr::Kind::attr: return describe(*e.args[0]) + "." + e.name;
            case Expr::Kind::subscript: return describe(*e.args[0]) + "[...]";
            default: return "expression";
        }
    }
};

}  // namespace

std::string render_nodes(const NodeList& nodes, ValueDict globals, const RenderLimits& limits) {
    return Evaluator(std::move(globals), limits).run(nodes);
}

}  // namespace kvlm::jinja
