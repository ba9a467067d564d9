// Jinja builtins of the subset: filters, `is` tests, attribute/item access (incl. Python str/dict methods)
// and global functions. Semantics follow jinja2 3.1 in Hugging Face's sandbox (tojson never escapes HTML).
#pragma once
#include <ctime>
#include <string>

#include "chat/jinja/value.h"

namespace kvlm::jinja {

// `value | name(args)`; throws EvalError for unknown filters or bad arguments.
Value apply_filter(const std::string& name, const Value& value, const CallArgs& args);
// `value is name(args)`; throws EvalError for unknown tests.
bool apply_test(const std::string& name, const Value& value, const CallArgs& args);

// obj.name: dict key, namespace attribute or bound str/dict method; undefined when missing.
Value get_attr(const Value& obj, const std::string& name);
// obj[key]: list index (negative from the end), dict key or string character; undefined when missing.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] on lists and strings with Python semantics (null parts are undefined values).
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// Global functions: raise_exception(msg), strftime_now(fmt) evaluated at `now`, namespace(...),
// range(...), dict(...).
ValueDict builtin_globals(std::time_t now);

// Number of UTF-8 code points (Python len(str)).
int64_t utf8_length(const std::string& s);

}  // namespace kvlm::jinja
