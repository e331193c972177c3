// text/jinja/filters.h — Jinja2's builtin filters and tests (plus transformers' `tojson`),
// and the bound methods of str/dict/list values. Names are resolved to indices at parse
// time so an unknown filter or test is a syntax error, as in Jinja.
// Errors are thrown as plain rill::Error; the evaluator adds the template line.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "text/jinja/value.h"

namespace rill::text::jinja {

/// Index of a builtin filter, or -1.
int filter_index(std::string_view name);
Value apply_filter(int index, const Value& input, CallArgs& args);

/// Index of a builtin test, or -1.
int test_index(std::string_view name);
bool apply_test(int index, const Value& input, CallArgs& args);

/// obj.name as a bound method of a str, dict or list (nullopt when there is none).
std::optional<Value> bound_method(const Value& obj, const std::string& name);

/// Jinja's getattr(obj, name): attribute (method) first, then item; Undefined when missing.
/// Throws when obj is itself undefined.
Value get_attribute(const Value& obj, const std::string& name);
/// Jinja's getitem(obj, key): item first, then attribute; Undefined when missing.
Value get_item(const Value& obj, const Value& key);

/// Python iter(x) materialised: list items, dict keys, str code points; undefined is empty.
ValueList iterate(const Value& v);
/// Python `item in container`.
bool contains(const Value& container, const Value& item);

/// Python format(v, spec) for the spec subset templates use: [[fill]align][0][width][.precision][f|d|s].
std::string format_with_spec(const Value& v, std::string_view spec);

/// Binds positional and keyword arguments to parameter names (Python calling rules).
class ArgBinder {
 public:
  ArgBinder(const char* what, CallArgs& args, std::initializer_list<const char*> names);
  const Value* get(size_t index) const;  ///< nullptr when not given
  Value get_or(size_t index, Value fallback) const;
  size_t num_positional() const { return args_.args.size(); }

 private:
  CallArgs& args_;
  std::vector<const char*> names_;
};

}  // namespace rill::text::jinja
