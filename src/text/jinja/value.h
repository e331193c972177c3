// text/jinja/value.h — the dynamic value of the Jinja engine, with Python semantics
// (truthiness, ==, <, str() and repr()) because chat templates are written against Jinja2.
// Lists and dicts are shared by reference like Python objects; a dict keeps insertion order.
// Not responsible for operators or filters (evaluator.cpp, filters.cpp).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace rill::text::jinja {

struct Value;
struct Dict;
struct Function;
using ValueList = std::vector<Value>;

enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Function };

/// Arguments of a call: positional then keyword, in source order.
struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

struct Value {
  Kind kind = Kind::Undefined;
  bool is_tuple = false;      ///< List printed as (a, b) and unequal to lists
  bool is_namespace = false;  ///< Dict created by namespace(): attribute assignment allowed
  bool b = false;
  int64_t i = 0;
  double f = 0.0;
  std::string s;  ///< String payload; for Undefined the message raised when it is used
  std::shared_ptr<ValueList> list;
  std::shared_ptr<Dict> dict;
  std::shared_ptr<Function> fn;

  Value() = default;
  static Value undefined(std::string message);
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value floating(double v);
  static Value string(std::string v);
  static Value make_list(ValueList items = {});
  static Value make_tuple(ValueList items = {});
  static Value make_dict();
  static Value function(std::string name, std::function<Value(CallArgs&)> call);

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_string() const { return kind == Kind::String; }
  bool is_list() const { return kind == Kind::List; }
  bool is_dict() const { return kind == Kind::Dict; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  bool is_integral() const { return kind == Kind::Int || kind == Kind::Bool; }
  int64_t as_int() const { return kind == Kind::Bool ? (b ? 1 : 0) : i; }
  double as_double() const { return kind == Kind::Float ? f : static_cast<double>(as_int()); }

  bool truthy() const;              ///< Python bool(x); undefined is false
  std::string str() const;          ///< Python str(x) (what {{ x }} prints)
  std::string repr() const;         ///< Python repr(x)
  std::string type_name() const;    ///< Python type name: "dict", "str", ...
};

/// Ordered mapping with Python key equality (small dicts: linear search is fastest).
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);
  void set(std::string_view key, Value value) { set(Value::string(std::string(key)), std::move(value)); }
};

struct Function {
  std::string name;
  std::function<Value(CallArgs&)> call;
};

bool py_equal(const Value& a, const Value& b);  ///< Python ==
/// Python <: numbers, strings, sequences; throws rill::Error for unorderable types.
bool py_less(const Value& a, const Value& b);
/// Python "sameas" (identity): scalars by value, containers by object.
bool py_same(const Value& a, const Value& b);

/// Deep conversion from JSON (objects keep their key order for ordered_json).
Value from_json(const nlohmann::ordered_json& j);
Value from_json(const nlohmann::json& j);

/// Python float repr: shortest round-trip digits, "1.0", "1e+16", "inf", "nan".
std::string float_repr(double v);
/// Python repr of a str: quotes chosen as Python does, non-printables escaped.
std::string string_repr(std::string_view s);

}  // namespace rill::text::jinja
