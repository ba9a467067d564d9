// Dynamic values of the Jinja subset with the Python semantics jinja2 gives them (truthiness, str(),
// repr(), ==, json.dumps). Lists are immutable once built; dicts keep insertion order like Python's.
// During a render every value created or copied is charged to a work budget (WorkMeter), so a template
// cannot use unbounded memory or time in one step; containers nest at most kMaxValueDepth deep.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace kvlm::jinja {

// A runtime failure inside template evaluation; the evaluator adds "chat template: ... line N".
class EvalError : public std::runtime_error {
public:
    explicit EvalError(const std::string& message) : std::runtime_error(message) {}
};
[[noreturn]] void fail(const std::string& message);

// Containers nest at most this deep (messages -> message -> tool_calls -> function -> arguments -> JSON
// schema stays far below); it bounds the recursion of printing, comparing and destroying values.
constexpr int kMaxValueDepth = 100;

// Work accounting of the render running on this thread: values charge the bytes they create or copy and
// builtins the bytes they scan or build, before allocating where they can. Outside a render (no meter
// installed) nothing is counted.
class WorkMeter {
public:
    explicit WorkMeter(uint64_t limit);  // installed for this thread until destroyed
    ~WorkMeter();
    WorkMeter(const WorkMeter&) = delete;
    WorkMeter& operator=(const WorkMeter&) = delete;

private:
    friend void charge_work(uint64_t bytes);
    uint64_t limit_;
    uint64_t used_ = 0;
    WorkMeter* previous_;
};
// Counts `bytes` against the installed meter; throws EvalError once its limit is exceeded.
void charge_work(uint64_t bytes);

struct Value;
struct ValueDict;
using ValueList = std::vector<Value>;

struct CallArgs {
    std::vector<Value> positional;
    std::vector<std::pair<std::string, Value>> keyword;
    // Argument `index` or keyword `name`; nullptr when absent.
    const Value* get(size_t index, const char* name) const;
};
using NativeFn = std::function<Value(const CallArgs&)>;

struct Value {
    enum class Kind { undefined, none, boolean, integer, floating, string, list, dict, ns, function };
    Kind kind = Kind::undefined;
    bool b = false;
    int64_t i = 0;
    double f = 0;
    std::string s;                     // string value; for undefined the missing name (for messages)
    std::shared_ptr<ValueList> list;   // list (tuples are lists too)
    std::shared_ptr<ValueDict> dict;   // dict, or the attributes of a namespace (shared, mutable)
    std::shared_ptr<NativeFn> fn;      // builtin function, bound method or macro
    int depth = 0;                     // list/dict/namespace: 1 + its deepest item when built

    Value() = default;
    Value(const Value& other);  // copies are charged (the string is deep-copied; containers are shared)
    Value& operator=(const Value& other);
    Value(Value&&) noexcept = default;
    Value& operator=(Value&&) noexcept = default;
    ~Value() = default;

    static Value undefined(std::string name = "");
    static Value none();
    static Value boolean(bool value);
    static Value integer(int64_t value);
    static Value floating(double value);
    static Value string(std::string value);  // charged; make_list/dict/namespace also check depth
    static Value make_list(ValueList items);
    static Value make_dict(ValueDict items);
    static Value make_namespace(ValueDict items);
    static Value function(NativeFn fn);

    bool is_undefined() const { return kind == Kind::undefined; }
    bool is_none() const { return kind == Kind::none; }
    bool is_string() const { return kind == Kind::string; }
    bool is_number() const { return kind == Kind::integer || kind == Kind::floating || kind == Kind::boolean; }
    bool is_list() const { return kind == Kind::list; }
    bool is_dict() const { return kind == Kind::dict; }
};

struct ValueDict {
    std::vector<std::pair<std::string, Value>> items;
    const Value* find(const std::string& key) const;
    void set(const std::string& key, Value value);
};

bool truthy(const Value& v);
std::string type_name(const Value& v);      // Python-ish type name for messages
std::string to_str(const Value& v);         // Python str(); undefined prints as ""
std::string repr(const Value& v);           // Python repr()
bool equals(const Value& a, const Value& b);
// <, <=, >, >= on numbers, strings or lists; throws EvalError on other types.
int compare(const Value& a, const Value& b);
double as_double(const Value& v);
// Python json.dumps(v, ensure_ascii=False, indent=indent (<0: None), sort_keys=sort_keys).
std::string to_json(const Value& v, int indent, bool sort_keys = false);
// Parses a JSON document into values (objects keep their key order).
Value from_json(const std::string& text);
// Items of a list, characters of a string, keys of a dict; empty for undefined; throws otherwise.
ValueList iterate(const Value& v);
// The same items without copying a list (lists are immutable): the list itself, or iterate(v) kept in
// `storage`. For what runs once per loop iteration (len, first, last, slices), where a copy makes the render
// quadratic in the number of messages.
const ValueList& items_of(const Value& v, ValueList& storage);
// std::string::find(sub, pos) with its work charged, so pathological searches stop at the budget.
size_t find_text(const std::string& text, const std::string& sub, size_t pos = 0);

}  // namespace kvlm::jinja
