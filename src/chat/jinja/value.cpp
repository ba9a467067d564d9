// Python semantics for Jinja values: truthiness, str/repr, equality, ordering and json.dumps.
// Output formats follow CPython (e.g. str(1.0) == "1.0", str(None) == "None", json ", " separators).
#include "chat/jinja/value.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

namespace kvlm::jinja {

void fail(const std::string& message) { throw EvalError(message); }

namespace {

thread_local WorkMeter* current_meter = nullptr;

// 1 + the deepest of the items; fails past kMaxValueDepth.
template <typename Items, typename Get>
int container_depth(const Items& items, Get get) {
    int depth = 0;
    for (const auto& item : items) depth = std::max(depth, get(item).depth);
    if (depth + 1 > kMaxValueDepth) fail(fmt::format("value nested more than {} levels deep", kMaxValueDepth));
    return depth + 1;
}

}  // namespace

WorkMeter::WorkMeter(uint64_t limit) : limit_(limit), previous_(current_meter) { current_meter = this; }
WorkMeter::~WorkMeter() { current_meter = previous_; }

void charge_work(uint64_t bytes) {
    WorkMeter* meter = current_meter;
    if (!meter) return;
    meter->used_ += bytes;
    if (meter->used_ > meter->limit_)
        fail(fmt::format("template exceeded the work limit ({} MiB of values created, copied or scanned)",
                         meter->limit_ >> 20));
}

// The string of `v`, after charging its copy (lists, dicts and functions are shared, not copied).
static const std::string& charged_string(const Value& v) {
    charge_work(sizeof(Value) + v.s.size());
    return v.s;
}

Value::Value(const Value& other)  // every member, as the defaulted copy would
    : kind(other.kind), b(other.b), i(other.i), f(other.f), s(charged_string(other)), list(other.list),
      dict(other.dict), fn(other.fn), depth(other.depth) {}

Value& Value::operator=(const Value& other) {
    if (this != &other) *this = Value(other);  // copy first: `other` may live inside this value's list
    return *this;
}

const Value* CallArgs::get(size_t index, const char* name) const {
    if (index < positional.size()) return &positional[index];
    for (const auto& [key, value] : keyword)
        if (key == name) return &value;
    return nullptr;
}

Value Value::undefined(std::string name) {
    Value v;
    v.s = std::move(name);
    return v;
}
Value Value::none() {
    Value v;
    v.kind = Kind::none;
    return v;
}
Value Value::boolean(bool value) {
    Value v;
    v.kind = Kind::boolean;
    v.b = value;
    return v;
}
Value Value::integer(int64_t value) {
    Value v;
    v.kind = Kind::integer;
    v.i = value;
    return v;
}
Value Value::floating(double value) {
    Value v;
    v.kind = Kind::floating;
    v.f = value;
    return v;
}
Value Value::string(std::string value) {
    charge_work(sizeof(Value) + value.size());
    Value v;
    v.kind = Kind::string;
    v.s = std::move(value);
    return v;
}
Value Value::make_list(ValueList items) {
    charge_work(sizeof(Value) * (items.size() + 1));
    Value v;
    v.kind = Kind::list;
    v.depth = container_depth(items, [](const Value& item) -> const Value& { return item; });
    v.list = std::make_shared<ValueList>(std::move(items));
    return v;
}
Value Value::make_dict(ValueDict items) {
    charge_work(sizeof(Value) * (items.items.size() + 1));
    Value v;
    v.kind = Kind::dict;
    v.depth = container_depth(items.items, [](const auto& item) -> const Value& { return item.second; });
    v.dict = std::make_shared<ValueDict>(std::move(items));
    return v;
}
Value Value::make_namespace(ValueDict items) {
    Value v = make_dict(std::move(items));
    v.kind = Kind::ns;
    return v;
}
Value Value::function(NativeFn fn) {
    Value v;
    v.kind = Kind::function;
    v.fn = std::make_shared<NativeFn>(std::move(fn));
    return v;
}

const Value* ValueDict::find(const std::string& key) const {
    for (const auto& item : items)
        if (item.first == key) return &item.second;
    return nullptr;
}

void ValueDict::set(const std::string& key, Value value) {
    for (auto& item : items)
        if (item.first == key) {
            item.second = std::move(value);
            return;
        }
    items.emplace_back(key, std::move(value));
}

bool truthy(const Value& v) {
    switch (v.kind) {
        case Value::Kind::undefined:
        case Value::Kind::none: return false;
        case Value::Kind::boolean: return v.b;
        case Value::Kind::integer: return v.i != 0;
        case Value::Kind::floating: return v.f != 0;
        case Value::Kind::string: return !v.s.empty();
        case Value::Kind::list: return !v.list->empty();
        case Value::Kind::dict: return !v.dict->items.empty();
        case Value::Kind::ns:
        case Value::Kind::function: return true;
    }
    return false;
}

std::string type_name(const Value& v) {
    switch (v.kind) {
        case Value::Kind::undefined: return "undefined";
        case Value::Kind::none: return "none";
        case Value::Kind::boolean: return "bool";
        case Value::Kind::integer: return "int";
        case Value::Kind::floating: return "float";
        case Value::Kind::string: return "string";
        case Value::Kind::list: return "list";
        case Value::Kind::dict: return "dict";
        case Value::Kind::ns: return "namespace";
        case Value::Kind::function: return "function";
    }
    return "?";
}

static std::string float_str(double f) {
    if (std::isnan(f)) return "nan";
    if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
    std::string s = fmt::format("{}", f);
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return s;
}

static std::string string_repr(const std::string& s) {
    bool has_single = s.find('\'') != std::string::npos;
    bool has_double = s.find('"') != std::string::npos;
    char quote = has_single && !has_double ? '"' : '\'';
    std::string out(1, quote);
    for (unsigned char c : s) {
        if (c == quote || c == '\\') {
            out += '\\';
            out += char(c);
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c < 0x20 || c == 0x7f) {
            out += fmt::format("\\x{:02x}", c);
        } else {
            out += char(c);
        }
    }
    out += quote;
    return out;
}

static std::string str_at(const Value& v, int depth);

static std::string dict_repr(const ValueDict& d, int depth);

// repr() of a value `depth` containers deep. Checked here as well as at construction: a namespace can
// contain itself.
static std::string repr_at(const Value& v, int depth) {
    if (depth > kMaxValueDepth) fail("value nested too deeply to print (a namespace that contains itself?)");
    switch (v.kind) {
        case Value::Kind::string: charge_work(v.s.size()); return string_repr(v.s);
        case Value::Kind::list: {
            std::string out = "[";
            for (size_t k = 0; k < v.list->size(); ++k) out += (k ? ", " : "") + repr_at((*v.list)[k], depth + 1);
            return out + "]";
        }
        case Value::Kind::dict: return dict_repr(*v.dict, depth);
        default: return str_at(v, depth);
    }
}

static std::string dict_repr(const ValueDict& d, int depth) {
    std::string out = "{";
    bool first = true;
    for (const auto& [key, value] : d.items) {
        charge_work(key.size());
        out += (first ? "" : ", ") + string_repr(key) + ": " + repr_at(value, depth + 1);
        first = false;
    }
    return out + "}";
}

static std::string str_at(const Value& v, int depth) {
    switch (v.kind) {
        case Value::Kind::undefined: return "";
        case Value::Kind::none: return "None";
        case Value::Kind::boolean: return v.b ? "True" : "False";
        case Value::Kind::integer: return std::to_string(v.i);
        case Value::Kind::floating: return float_str(v.f);
        case Value::Kind::string: charge_work(v.s.size()); return v.s;
        case Value::Kind::list:
        case Value::Kind::dict: return repr_at(v, depth);
        case Value::Kind::ns: return "<Namespace " + dict_repr(*v.dict, depth) + ">";
        case Value::Kind::function: return "<function>";
    }
    return "";
}

std::string repr(const Value& v) { return repr_at(v, 0); }
std::string to_str(const Value& v) { return str_at(v, 0); }

double as_double(const Value& v) {
    switch (v.kind) {
        case Value::Kind::boolean: return v.b ? 1 : 0;
        case Value::Kind::integer: return double(v.i);
        case Value::Kind::floating: return v.f;
        default: fail("expected a number, found " + type_name(v));
    }
}

// Work charged per comparison of two values, besides the bytes of strings compared.
constexpr uint64_t kCompareCost = 64;

bool equals(const Value& a, const Value& b) {
    charge_work(kCompareCost);
    if (a.is_number() && b.is_number()) {
        if (a.kind != Value::Kind::floating && b.kind != Value::Kind::floating)
            return (a.kind == Value::Kind::boolean ? a.b : a.i) == (b.kind == Value::Kind::boolean ? b.b : b.i);
        return as_double(a) == as_double(b);
    }
    if (a.kind != b.kind) return false;
    switch (a.kind) {
        case Value::Kind::undefined:
        case Value::Kind::none: return true;
        case Value::Kind::string: charge_work(std::min(a.s.size(), b.s.size())); return a.s == b.s;
        case Value::Kind::list: {
            if (a.list->size() != b.list->size()) return false;
            for (size_t k = 0; k < a.list->size(); ++k)
                if (!equals((*a.list)[k], (*b.list)[k])) return false;
            return true;
        }
        case Value::Kind::dict: {
            if (a.dict->items.size() != b.dict->items.size()) return false;
            charge_work(kCompareCost * a.dict->items.size() * a.dict->items.size());  // find() is linear
            for (const auto& [key, value] : a.dict->items) {
                const Value* other = b.dict->find(key);
                if (!other || !equals(value, *other)) return false;
            }
            return true;
        }
        case Value::Kind::ns: return a.dict == b.dict;
        case Value::Kind::function: return a.fn == b.fn;
        default: return false;
    }
}

int compare(const Value& a, const Value& b) {
    charge_work(kCompareCost);
    if (a.is_number() && b.is_number()) {
        double x = as_double(a), y = as_double(b);
        return x < y ? -1 : (x > y ? 1 : 0);
    }
    if (a.is_string() && b.is_string()) {
        charge_work(std::min(a.s.size(), b.s.size()));
        int c = a.s.compare(b.s);
        return c < 0 ? -1 : (c > 0 ? 1 : 0);
    }
    if (a.is_list() && b.is_list()) {
        size_t n = std::min(a.list->size(), b.list->size());
        for (size_t k = 0; k < n; ++k)
            if (int c = compare((*a.list)[k], (*b.list)[k])) return c;
        return a.list->size() < b.list->size() ? -1 : (a.list->size() > b.list->size() ? 1 : 0);
    }
    fail("cannot order " + type_name(a) + " and " + type_name(b));
}

static void json_string(std::string& out, const std::string& s) {
    charge_work(s.size());
    out += '"';
    for (unsigned char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (c < 0x20 || c == 0x7f) out += fmt::format("\\u{:04x}", c);
                else out += char(c);
        }
    }
    out += '"';
}

static void json_dump(std::string& out, const Value& v, int indent, bool sort_keys, int depth) {
    if (depth > 100) fail("tojson: value nested too deeply");
    std::string item_sep = indent < 0 ? ", " : ",";
    auto newline = [&](int level) {
        if (indent < 0) return;
        charge_work(size_t(indent) * size_t(level));
        out += "\n" + std::string(size_t(indent) * size_t(level), ' ');
    };
    switch (v.kind) {
        case Value::Kind::none: out += "null"; return;
        case Value::Kind::boolean: out += v.b ? "true" : "false"; return;
        case Value::Kind::integer: out += std::to_string(v.i); return;
        case Value::Kind::floating:
            if (std::isnan(v.f)) out += "NaN";
            else if (std::isinf(v.f)) out += v.f > 0 ? "Infinity" : "-Infinity";
            else out += float_str(v.f);
            return;
        case Value::Kind::string: json_string(out, v.s); return;
        case Value::Kind::list: {
            if (v.list->empty()) {
                out += "[]";
                return;
            }
            out += '[';
            for (size_t k = 0; k < v.list->size(); ++k) {
                if (k) out += item_sep;
                newline(depth + 1);
                json_dump(out, (*v.list)[k], indent, sort_keys, depth + 1);
            }
            newline(depth);
            out += ']';
            return;
        }
        case Value::Kind::dict: {
            if (v.dict->items.empty()) {
                out += "{}";
                return;
            }
            auto items = v.dict->items;
            if (sort_keys)
                std::stable_sort(items.begin(), items.end(),
                                 [](const auto& x, const auto& y) { return x.first < y.first; });
            out += '{';
            for (size_t k = 0; k < items.size(); ++k) {
                if (k) out += item_sep;
                newline(depth + 1);
                json_string(out, items[k].first);
                out += ": ";
                json_dump(out, items[k].second, indent, sort_keys, depth + 1);
            }
            newline(depth);
            out += '}';
            return;
        }
        default: fail("tojson: object of type " + type_name(v) + " is not JSON serializable");
    }
}

std::string to_json(const Value& v, int indent, bool sort_keys) {
    std::string out;
    json_dump(out, v, indent, sort_keys, 0);
    return out;
}

static Value from_json_node(const nlohmann::ordered_json& j, int depth) {
    if (depth > kMaxValueDepth) fail(fmt::format("context nested more than {} levels deep", kMaxValueDepth));
    switch (j.type()) {
        case nlohmann::ordered_json::value_t::null: return Value::none();
        case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
        case nlohmann::ordered_json::value_t::number_integer:
        case nlohmann::ordered_json::value_t::number_unsigned: return Value::integer(j.get<int64_t>());
        case nlohmann::ordered_json::value_t::number_float: return Value::floating(j.get<double>());
        case nlohmann::ordered_json::value_t::string: return Value::string(j.get<std::string>());
        case nlohmann::ordered_json::value_t::array: {
            ValueList items;
            for (const auto& e : j) items.push_back(from_json_node(e, depth + 1));
            return Value::make_list(std::move(items));
        }
        case nlohmann::ordered_json::value_t::object: {
            ValueDict dict;
            for (const auto& [key, value] : j.items()) dict.set(key, from_json_node(value, depth + 1));
            return Value::make_dict(std::move(dict));
        }
        default: return Value::none();
    }
}

Value from_json(const std::string& text) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, false);
    if (j.is_discarded()) fail("context is not valid JSON");
    return from_json_node(j, 0);
}

ValueList iterate(const Value& v) {
    switch (v.kind) {
        case Value::Kind::undefined: return {};
        case Value::Kind::list: return *v.list;
        case Value::Kind::dict: {
            ValueList keys;
            for (const auto& item : v.dict->items) keys.push_back(Value::string(item.first));
            return keys;
        }
        case Value::Kind::string: {
            ValueList chars;  // one item per UTF-8 code point, like Python's str iteration
            for (size_t k = 0; k < v.s.size();) {
                size_t n = 1;
                unsigned char c = static_cast<unsigned char>(v.s[k]);
                if (c >= 0xf0) n = 4;
                else if (c >= 0xe0) n = 3;
                else if (c >= 0xc0) n = 2;
                n = std::min(n, v.s.size() - k);
                chars.push_back(Value::string(v.s.substr(k, n)));
                k += n;
            }
            return chars;
        }
        default: fail("object of type " + type_name(v) + " is not iterable");
    }
}

const ValueList& items_of(const Value& v, ValueList& storage) {
    if (v.is_list()) return *v.list;
    storage = iterate(v);
    return storage;
}

size_t find_text(const std::string& text, const std::string& sub, size_t pos) {
    if (sub.empty()) return pos <= text.size() ? pos : std::string::npos;
    // Like std::string::find: compare `sub` wherever its first byte occurs; each comparison is charged in
    // full, so 'a' * N in 'a' * M stops at the budget instead of running O(N * M).
    for (size_t k = pos; k < text.size() && text.size() - k >= sub.size();) {
        const size_t span = text.size() - sub.size() + 1 - k;
        const void* hit = std::memchr(text.data() + k, sub[0], span);
        if (!hit) {
            charge_work(span);
            return std::string::npos;
        }
        const size_t at = size_t(static_cast<const char*>(hit) - text.data());
        charge_work(at - k + sub.size());
        if (text.compare(at, sub.size(), sub) == 0) return at;
        k = at + 1;
    }
    return std::string::npos;
}

}  // namespace kvlm::jinja
