// Filters, tests, attribute access and global functions for the Jinja subset. Unknown names are errors,
// never silently empty, so a template using something unsupported fails loudly at render time.
#include "chat/jinja/builtins.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kvlm::jinja {
namespace {

const char* whitespace = " \t\n\r\v\f";
constexpr int64_t max_range = 100000;  // chat templates loop over messages, not millions

[[noreturn]] void undefined_error(const Value& v) {
    fail(fmt::format("'{}' is undefined", v.s.empty() ? "value" : v.s));
}

std::string arg_str(const CallArgs& args, size_t index, const char* name, const std::string& fallback) {
    const Value* v = args.get(index, name);
    if (!v || v->is_none() || v->is_undefined()) return fallback;
    if (!v->is_string()) fail(fmt::format("argument '{}' must be a string, found {}", name, type_name(*v)));
    return v->s;
}

int64_t arg_int(const CallArgs& args, size_t index, const char* name, int64_t fallback) {
    const Value* v = args.get(index, name);
    if (!v || v->is_none() || v->is_undefined()) return fallback;
    if (v->kind == Value::Kind::boolean) return v->b;
    if (v->kind != Value::Kind::integer) fail(fmt::format("argument '{}' must be an integer, found {}", name, type_name(*v)));
    return v->i;
}

bool arg_bool(const CallArgs& args, size_t index, const char* name, bool fallback) {
    const Value* v = args.get(index, name);
    return v ? truthy(*v) : fallback;
}

std::string strip_chars(const std::string& s, const std::string& chars, bool left, bool right) {
    size_t b = left ? s.find_first_not_of(chars) : 0;
    if (b == std::string::npos) return "";
    size_t e = right ? s.find_last_not_of(chars) : s.size() - 1;
    return s.substr(b, e - b + 1);
}

std::string ascii_map(std::string s, int (*f)(int)) {
    for (char& c : s)
        if (static_cast<unsigned char>(c) < 0x80) c = char(f(static_cast<unsigned char>(c)));
    return s;
}

std::string capitalize(const std::string& s) {
    std::string out = ascii_map(s, [](int c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; });
    if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = char(out[0] - 32);
    return out;
}

// jinja2's title filter: words start after '-', whitespace, '(', '{', '[' or '<'; first letter upper, rest lower.
std::string title_filter(const std::string& s) {
    std::string out = s;
    bool start = true;
    for (char& c : out) {
        bool boundary = std::strchr("-({[< \t\n\r\v\f", c) != nullptr && c != '\0';
        if (!boundary) c = start ? char(std::toupper(static_cast<unsigned char>(c))) : char(std::tolower(static_cast<unsigned char>(c)));
        start = boundary;
    }
    return out;
}

// Python's str.title(): words start after any non-letter.
std::string title(const std::string& s) {
    std::string out = s;
    bool start = true;
    for (char& c : out) {
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        if (alpha) c = start ? char(std::toupper(c)) : char(std::tolower(c));
        start = !alpha && !(c >= '0' && c <= '9') && static_cast<unsigned char>(c) < 0x80;
    }
    return out;
}

ValueList split(const std::string& s, const Value* sep, int64_t maxsplit) {
    ValueList parts;
    if (!sep || sep->is_none()) {  // runs of whitespace, no empty parts
        size_t k = s.find_first_not_of(whitespace);
        while (k != std::string::npos) {
            if (maxsplit >= 0 && int64_t(parts.size()) == maxsplit) {
                parts.push_back(Value::string(strip_chars(s.substr(k), whitespace, false, true)));
                break;
            }
            size_t e = s.find_first_of(whitespace, k);
            parts.push_back(Value::string(s.substr(k, e == std::string::npos ? std::string::npos : e - k)));
            k = e == std::string::npos ? e : s.find_first_not_of(whitespace, e);
        }
        return parts;
    }
    if (!sep->is_string()) fail("split: separator must be a string");
    if (sep->s.empty()) fail("split: empty separator");
    size_t k = 0;
    while (true) {
        size_t e = find_text(s, sep->s, k);
        if (e == std::string::npos || (maxsplit >= 0 && int64_t(parts.size()) == maxsplit)) {
            parts.push_back(Value::string(s.substr(k)));
            return parts;
        }
        parts.push_back(Value::string(s.substr(k, e - k)));
        k = e + sep->s.size();
    }
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
    if (from.empty()) fail("replace: empty search string is not supported");
    std::string out;
    size_t k = 0;
    for (int64_t n = 0; count < 0 || n < count; ++n) {
        size_t e = find_text(s, from, k);
        if (e == std::string::npos) break;
        charge_work(e - k + to.size());  // before growing: replacing with a long string multiplies the size
        out.append(s, k, e - k);
        out += to;
        k = e + from.size();
    }
    return out + s.substr(k);
}

Value string_method(const std::string& s, const std::string& name) {
    auto method = [](auto fn) { return Value::function(fn); };
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
        bool left = name != "rstrip", right = name != "lstrip";
        return method([s, left, right](const CallArgs& a) {
            return Value::string(strip_chars(s, arg_str(a, 0, "chars", whitespace), left, right));
        });
    }
    if (name == "upper") return method([s](const CallArgs&) { return Value::string(ascii_map(s, ::toupper)); });
    if (name == "lower") return method([s](const CallArgs&) { return Value::string(ascii_map(s, ::tolower)); });
    if (name == "title") return method([s](const CallArgs&) { return Value::string(title(s)); });
    if (name == "capitalize") return method([s](const CallArgs&) { return Value::string(capitalize(s)); });
    if (name == "startswith" || name == "endswith") {
        bool starts = name == "startswith";
        return method([s, starts](const CallArgs& a) {
            const Value* p = a.get(0, "prefix");
            if (!p) fail("startswith/endswith: missing argument");
            ValueList options = p->is_list() ? *p->list : ValueList{*p};
            for (const Value& o : options) {
                if (!o.is_string()) fail("startswith/endswith: argument must be a string");
                bool hit = o.s.size() <= s.size() &&
                           (starts ? s.compare(0, o.s.size(), o.s) == 0 : s.compare(s.size() - o.s.size(), o.s.size(), o.s) == 0);
                if (hit) return Value::boolean(true);
            }
            return Value::boolean(false);
        });
    }
    if (name == "split")
        return method([s](const CallArgs& a) { return Value::make_list(split(s, a.get(0, "sep"), arg_int(a, 1, "maxsplit", -1))); });
    if (name == "replace")
        return method([s](const CallArgs& a) {
            return Value::string(replace_all(s, arg_str(a, 0, "old", ""), arg_str(a, 1, "new", ""), arg_int(a, 2, "count", -1)));
        });
    if (name == "find")
        return method([s](const CallArgs& a) {
            size_t k = find_text(s, arg_str(a, 0, "sub", ""));
            return Value::integer(k == std::string::npos ? -1 : int64_t(k));
        });
    if (name == "count")
        return method([s](const CallArgs& a) {
            std::string sub = arg_str(a, 0, "sub", "");
            if (sub.empty()) return Value::integer(utf8_length(s) + 1);
            int64_t n = 0;
            for (size_t k = find_text(s, sub); k != std::string::npos; k = find_text(s, sub, k + sub.size())) ++n;
            return Value::integer(n);
        });
    if (name == "join")
        return method([s](const CallArgs& a) {
            const Value* items = a.get(0, "iterable");
            std::string out;
            bool first = true;
            ValueList storage;
            for (const Value& v : items ? items_of(*items, storage) : storage) {
                if (!v.is_string()) fail("join: sequence item must be a string, found " + type_name(v));
                charge_work(s.size() + v.s.size());
                out += (first ? "" : s) + v.s;
                first = false;
            }
            return Value::string(out);
        });
    return Value::undefined("str." + name);
}

Value dict_items(const Value& d) {
    ValueList items;
    for (const auto& [key, value] : d.dict->items) items.push_back(Value::make_list({Value::string(key), value}));
    return Value::make_list(std::move(items));
}

Value dict_method(const Value& d, const std::string& name) {
    if (name == "items") return Value::function([d](const CallArgs&) { return dict_items(d); });
    if (name == "keys" || name == "values") {
        bool keys = name == "keys";
        return Value::function([d, keys](const CallArgs&) {
            ValueList out;
            for (const auto& [key, value] : d.dict->items) out.push_back(keys ? Value::string(key) : value);
            return Value::make_list(std::move(out));
        });
    }
    if (name == "get")
        return Value::function([d](const CallArgs& a) {
            const Value* key = a.get(0, "key");
            const Value* def = a.get(1, "default");
            const Value* hit = key && key->is_string() ? d.dict->find(key->s) : nullptr;
            return hit ? *hit : (def ? *def : Value::none());
        });
    return Value::undefined();
}

// Shifts a test/filter's own arguments past the leading name argument (select('equalto', x) -> x).
CallArgs drop_args(const CallArgs& args, size_t n) {
    CallArgs out;
    out.positional.assign(args.positional.begin() + std::min(n, args.positional.size()), args.positional.end());
    out.keyword = args.keyword;
    return out;
}

Value select_items(const Value& seq, const CallArgs& args, bool keep, bool by_attr) {
    ValueList out;
    size_t skip = by_attr ? 1 : 0;
    std::string attr = by_attr ? arg_str(args, 0, "attribute", "") : "";
    const Value* test = args.positional.size() > skip ? &args.positional[skip] : nullptr;
    if (test && !test->is_string()) fail("select: test name must be a string");
    CallArgs test_args = drop_args(args, skip + 1);
    test_args.keyword.clear();
    ValueList storage;
    for (const Value& item : items_of(seq, storage)) {
        Value subject = by_attr ? get_attr(item, attr) : item;
        bool hit = test ? apply_test(test->s, subject, test_args) : truthy(subject);
        if (hit == keep) out.push_back(item);
    }
    return Value::make_list(std::move(out));
}

Value sequence_end(const Value& v, bool first) {
    ValueList storage;
    const ValueList& items = items_of(v, storage);
    if (items.empty())
        return Value::undefined(v.is_string() ? "first/last item of empty string" : first ? "first item" : "last item");
    return first ? items.front() : items.back();
}

}  // namespace

int64_t utf8_length(const std::string& s) {
    int64_t n = 0;
    for (unsigned char c : s) n += (c & 0xc0) != 0x80;
    return n;
}

Value get_attr(const Value& obj, const std::string& name) {
    switch (obj.kind) {
        case Value::Kind::undefined: undefined_error(obj);
        case Value::Kind::dict: {
            Value method = dict_method(obj, name);
            if (!method.is_undefined()) return method;
            const Value* v = obj.dict->find(name);
            return v ? *v : Value::undefined(name);
        }
        case Value::Kind::ns: {
            const Value* v = obj.dict->find(name);
            return v ? *v : Value::undefined(name);
        }
        case Value::Kind::string: return string_method(obj.s, name);
        default: return Value::undefined(name);
    }
}

Value get_item(const Value& obj, const Value& key) {
    switch (obj.kind) {
        case Value::Kind::undefined: undefined_error(obj);
        case Value::Kind::dict:
        case Value::Kind::ns: {
            if (!key.is_string()) return Value::undefined();
            const Value* v = obj.dict->find(key.s);
            if (v) return *v;
            return obj.kind == Value::Kind::dict ? get_attr(obj, key.s) : Value::undefined(key.s);
        }
        case Value::Kind::list:
        case Value::Kind::string: {
            if (key.is_string()) return get_attr(obj, key.s);
            if (key.kind != Value::Kind::integer) return Value::undefined();
            ValueList storage;
            const ValueList& seq = items_of(obj, storage);
            int64_t n = int64_t(seq.size());
            int64_t k = key.i < 0 ? key.i + n : key.i;
            if (k < 0 || k >= n) return Value::undefined("index " + std::to_string(key.i));
            return seq[size_t(k)];
        }
        default: return Value::undefined();
    }
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
    if (obj.is_undefined()) undefined_error(obj);
    if (!obj.is_list() && !obj.is_string()) fail("cannot slice " + type_name(obj));
    auto as_index = [](const Value& v, const char* what) -> const Value* {
        if (v.is_undefined() || v.is_none()) return nullptr;
        if (v.kind != Value::Kind::integer) fail(fmt::format("slice {} must be an integer", what));
        return &v;
    };
    ValueList storage;
    const ValueList& seq = items_of(obj, storage);
    int64_t n = int64_t(seq.size());
    const Value* st = as_index(step, "step");
    int64_t s = st ? st->i : 1;
    if (s == 0) fail("slice step cannot be zero");
    auto clamp = [&](const Value* v, int64_t def) {
        if (!v) return def;
        int64_t k = v->i < 0 ? v->i + n : v->i;
        return s > 0 ? std::clamp<int64_t>(k, 0, n) : std::clamp<int64_t>(k, -1, n - 1);
    };
    int64_t b = clamp(as_index(start, "start"), s > 0 ? 0 : n - 1);
    int64_t e = clamp(as_index(stop, "stop"), s > 0 ? n : -1);
    ValueList out;
    for (int64_t k = b; s > 0 ? k < e : k > e; k += s) out.push_back(seq[size_t(k)]);
    if (obj.is_list()) return Value::make_list(std::move(out));
    std::string str;
    for (const Value& c : out) str += c.s;
    return Value::string(str);
}

bool apply_test(const std::string& name, const Value& v, const CallArgs& args) {
    using K = Value::Kind;
    auto other = [&]() -> const Value& {
        const Value* o = args.get(0, "other");
        if (!o) fail("test '" + name + "' needs an argument");
        return *o;
    };
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "boolean") return v.kind == K::boolean;
    if (name == "true") return v.kind == K::boolean && v.b;
    if (name == "false") return v.kind == K::boolean && !v.b;
    if (name == "integer") return v.kind == K::integer;
    if (name == "float") return v.kind == K::floating;
    if (name == "number") return v.is_number();
    if (name == "string") return v.is_string();
    if (name == "mapping") return v.is_dict();
    if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
    if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
    if (name == "callable") return v.kind == K::function;
    if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") return equals(v, other());
    if (name == "ne" || name == "!=") return !equals(v, other());
    if (name == "lt" || name == "lessthan" || name == "<") return compare(v, other()) < 0;
    if (name == "le" || name == "<=") return compare(v, other()) <= 0;
    if (name == "gt" || name == "greaterthan" || name == ">") return compare(v, other()) > 0;
    if (name == "ge" || name == ">=") return compare(v, other()) >= 0;
    if (name == "odd" || name == "even" || name == "divisibleby") {
        if (v.kind != K::integer) fail("test '" + name + "' needs an integer, found " + type_name(v));
        if (name == "odd") return v.i % 2 != 0;
        if (name == "even") return v.i % 2 == 0;
        int64_t d = arg_int(args, 0, "num", 1);
        if (d == 0) fail("divisibleby 0");
        return v.i % d == 0;
    }
    if (name == "lower") return v.is_string() && ascii_map(v.s, ::tolower) == v.s;
    if (name == "upper") return v.is_string() && ascii_map(v.s, ::toupper) == v.s;
    if (name == "in") {
        const Value& seq = other();
        if (seq.is_string()) return v.is_string() && find_text(seq.s, v.s) != std::string::npos;
        ValueList storage;
        for (const Value& item : items_of(seq, storage))
            if (equals(item, v)) return true;
        return false;
    }
    fail("unknown test '" + name + "'");
}

Value apply_filter(const std::string& name, const Value& v, const CallArgs& args) {
    using K = Value::Kind;
    if (name == "default" || name == "d") {
        const Value* def = args.get(0, "default_value");
        bool falsy = arg_bool(args, 1, "boolean", false) ? !truthy(v) : v.is_undefined();
        return falsy ? (def ? *def : Value::string("")) : v;
    }
    if (name == "trim") return Value::string(strip_chars(to_str(v), arg_str(args, 0, "chars", whitespace), true, true));
    if (name == "upper") return Value::string(ascii_map(to_str(v), ::toupper));
    if (name == "lower") return Value::string(ascii_map(to_str(v), ::tolower));
    if (name == "capitalize") return Value::string(capitalize(to_str(v)));
    if (name == "title") return Value::string(title_filter(to_str(v)));
    if (name == "string") return Value::string(to_str(v));
    if (name == "safe") return v;
    if (name == "length" || name == "count") {
        if (v.is_string()) return Value::integer(utf8_length(v.s));
        if (v.kind == K::ns) fail("object of type namespace has no len()");
        ValueList storage;
        return Value::integer(int64_t(items_of(v, storage).size()));
    }
    if (name == "tojson") {
        const Value* indent = args.get(0, "indent");
        int n_indent = indent && indent->kind == K::integer ? int(std::clamp<int64_t>(indent->i, 0, 64)) : -1;
        return Value::string(to_json(v, n_indent, arg_bool(args, 3, "sort_keys", false)));
    }
    if (name == "items") {
        if (v.is_undefined()) return Value::make_list({});
        if (!v.is_dict()) fail("items filter needs a mapping, found " + type_name(v));
        return dict_items(v);
    }
    if (name == "first") return sequence_end(v, true);
    if (name == "last") return sequence_end(v, false);
    if (name == "list") return Value::make_list(iterate(v));
    if (name == "reverse") {
        if (v.is_string()) {
            ValueList chars = iterate(v);
            std::string out;
            for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += it->s;
            return Value::string(out);
        }
        ValueList items = iterate(v);
        std::reverse(items.begin(), items.end());
        return Value::make_list(std::move(items));
    }
    if (name == "join") {
        std::string sep = arg_str(args, 0, "d", "");
        std::string attr = arg_str(args, 1, "attribute", "");
        std::string out;
        bool first = true;
        ValueList storage;
        for (const Value& item : items_of(v, storage)) {
            charge_work(sep.size());
            out += (first ? "" : sep) + to_str(attr.empty() ? item : get_attr(item, attr));
            first = false;
        }
        return Value::string(out);
    }
    if (name == "select" || name == "reject") return select_items(v, args, name == "select", false);
    if (name == "selectattr" || name == "rejectattr") return select_items(v, args, name == "selectattr", true);
    if (name == "map") {
        std::string attr = arg_str(args, 99, "attribute", "");
        const Value* def = args.get(99, "default");
        ValueList out, storage;
        for (const Value& item : items_of(v, storage)) {
            if (!attr.empty()) {
                Value got = get_attr(item, attr);
                out.push_back(got.is_undefined() && def ? *def : got);
            } else {
                if (args.positional.empty() || !args.positional[0].is_string()) fail("map: needs a filter name or attribute=");
                out.push_back(apply_filter(args.positional[0].s, item, drop_args(args, 1)));
            }
        }
        return Value::make_list(std::move(out));
    }
    if (name == "unique") {
        ValueList out, storage;
        for (const Value& item : items_of(v, storage))
            if (std::none_of(out.begin(), out.end(), [&](const Value& o) { return equals(o, item); })) out.push_back(item);
        return Value::make_list(std::move(out));
    }
    if (name == "sort") {
        ValueList items = iterate(v);
        bool reverse = arg_bool(args, 0, "reverse", false);
        std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
            return reverse ? compare(b, a) < 0 : compare(a, b) < 0;
        });
        return Value::make_list(std::move(items));
    }
    if (name == "replace")
        return Value::string(replace_all(to_str(v), arg_str(args, 0, "old", ""), arg_str(args, 1, "new", ""),
                                         arg_int(args, 2, "count", -1)));
    if (name == "int") {
        if (v.kind == K::integer || v.kind == K::boolean) return Value::integer(v.kind == K::boolean ? v.b : v.i);
        if (v.kind == K::floating && std::isfinite(v.f) && std::fabs(v.f) < 9e18) return Value::integer(int64_t(v.f));
        if (v.is_string()) {
            std::string s = strip_chars(v.s, whitespace, true, true);
            char* end = nullptr;
            long long n = std::strtoll(s.c_str(), &end, 10);
            if (!s.empty() && end && *end == '\0') return Value::integer(n);
        }
        return Value::integer(arg_int(args, 0, "default", 0));
    }
    if (name == "float") {
        if (v.is_number()) return Value::floating(as_double(v));
        if (v.is_string()) {
            char* end = nullptr;
            double f = std::strtod(v.s.c_str(), &end);
            if (!v.s.empty() && end && *end == '\0') return Value::floating(f);
        }
        return Value::floating(0.0);
    }
    if (name == "abs") {
        if (v.kind == K::integer) return Value::integer(v.i < 0 ? -v.i : v.i);
        return Value::floating(std::fabs(as_double(v)));
    }
    if (name == "indent") {
        int64_t width = arg_int(args, 0, "width", 4);
        std::string pad(size_t(std::clamp<int64_t>(width, 0, 256)), ' ');
        bool first = arg_bool(args, 1, "first", false), blank = arg_bool(args, 2, "blank", false);
        std::string s = to_str(v), out;
        size_t k = 0;
        for (bool line0 = true; k <= s.size(); line0 = false) {
            size_t e = s.find('\n', k);
            std::string line = s.substr(k, e == std::string::npos ? std::string::npos : e - k);
            charge_work(pad.size() + line.size() + 1);
            if ((!line0 || first) && (blank || !line.empty())) out += pad;
            out += line;
            if (e == std::string::npos) break;
            out += '\n';
            k = e + 1;
        }
        return Value::string(out);
    }
    fail("unknown filter '" + name + "'");
}

ValueDict builtin_globals(std::time_t now) {
    ValueDict g;
    g.set("raise_exception", Value::function([](const CallArgs& a) -> Value {
              const Value* msg = a.get(0, "message");
              fail("raise_exception: " + (msg ? to_str(*msg) : std::string()));
          }));
    g.set("strftime_now", Value::function([now](const CallArgs& a) {
              std::string format = arg_str(a, 0, "format", "");
              std::tm tm{};
              localtime_r(&now, &tm);
              char buf[512];
              size_t n = format.empty() ? 0 : std::strftime(buf, sizeof buf, format.c_str(), &tm);
              if (n == 0 && !format.empty()) fail("strftime_now: format too long or empty result");
              return Value::string(std::string(buf, n));
          }));
    auto make_dict = [](const CallArgs& a) {
        ValueDict d;
        if (!a.positional.empty()) {
            if (!a.positional[0].is_dict() && a.positional[0].kind != Value::Kind::ns)
                fail("namespace()/dict() positional argument must be a mapping");
            d = *a.positional[0].dict;
        }
        for (const auto& [key, value] : a.keyword) d.set(key, value);
        return d;
    };
    g.set("namespace", Value::function([make_dict](const CallArgs& a) { return Value::make_namespace(make_dict(a)); }));
    g.set("dict", Value::function([make_dict](const CallArgs& a) { return Value::make_dict(make_dict(a)); }));
    g.set("range", Value::function([](const CallArgs& a) {
              int64_t start = 0, stop = 0, step = 1;
              if (a.positional.size() == 1) {
                  stop = arg_int(a, 0, "stop", 0);
              } else {
                  start = arg_int(a, 0, "start", 0);
                  stop = arg_int(a, 1, "stop", 0);
                  step = arg_int(a, 2, "step", 1);
              }
              if (step == 0) fail("range() step must not be zero");
              ValueList out;
              for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
                  if (int64_t(out.size()) >= max_range) fail("range() too long");
                  out.push_back(Value::integer(k));
              }
              return Value::make_list(std::move(out));
          }));
    return g;
}

}  // namespace kvlm::jinja
