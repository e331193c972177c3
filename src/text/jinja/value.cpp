// text/jinja/value.cpp — Python-compatible printing, equality and ordering of Values.
#include "text/jinja/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "text/jinja/pystr.h"
#include "text/utf8.h"

namespace rill::text::jinja {

Value Value::undefined(std::string message) {
  Value v;
  v.s = std::move(message);
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::None;
  return v;
}
Value Value::boolean(bool x) {
  Value v;
  v.kind = Kind::Bool;
  v.b = x;
  return v;
}
Value Value::integer(int64_t x) {
  Value v;
  v.kind = Kind::Int;
  v.i = x;
  return v;
}
Value Value::floating(double x) {
  Value v;
  v.kind = Kind::Float;
  v.f = x;
  return v;
}
Value Value::string(std::string x) {
  Value v;
  v.kind = Kind::String;
  v.s = std::move(x);
  return v;
}
Value Value::make_list(ValueList items) {
  Value v;
  v.kind = Kind::List;
  v.list = std::make_shared<ValueList>(std::move(items));
  return v;
}
Value Value::make_tuple(ValueList items) {
  Value v = make_list(std::move(items));
  v.is_tuple = true;
  return v;
}
Value Value::make_dict() {
  Value v;
  v.kind = Kind::Dict;
  v.dict = std::make_shared<Dict>();
  return v;
}
Value Value::function(std::string name, std::function<Value(CallArgs&)> call) {
  Value v;
  v.kind = Kind::Function;
  v.fn = std::make_shared<Function>(Function{std::move(name), std::move(call)});
  return v;
}

bool Value::truthy() const {
  switch (kind) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
      return b;
    case Kind::Int:
      return i != 0;
    case Kind::Float:
      return f != 0.0;
    case Kind::String:
      return !s.empty();
    case Kind::List:
      return !list->empty();
    case Kind::Dict:
      return is_namespace || !dict->items.empty();
    case Kind::Function:
      return true;
  }
  return false;
}

std::string Value::str() const {
  switch (kind) {
    case Kind::Undefined:
      return "";
    case Kind::String:
      return s;
    default:
      return repr();
  }
}

std::string Value::repr() const {
  switch (kind) {
    case Kind::Undefined:
      return "Undefined";
    case Kind::None:
      return "None";
    case Kind::Bool:
      return b ? "True" : "False";
    case Kind::Int:
      return std::to_string(i);
    case Kind::Float:
      return float_repr(f);
    case Kind::String:
      return string_repr(s);
    case Kind::List: {
      std::string out = is_tuple ? "(" : "[";
      for (size_t k = 0; k < list->size(); ++k) {
        if (k) out += ", ";
        out += (*list)[k].repr();
      }
      if (is_tuple && list->size() == 1) out += ",";
      out += is_tuple ? ")" : "]";
      return out;
    }
    case Kind::Dict: {
      std::string out = "{";
      for (size_t k = 0; k < dict->items.size(); ++k) {
        if (k) out += ", ";
        out += dict->items[k].first.repr() + ": " + dict->items[k].second.repr();
      }
      out += "}";
      return is_namespace ? "<Namespace " + out + ">" : out;
    }
    case Kind::Function:
      return "<function " + fn->name + ">";
  }
  return "";
}

std::string Value::type_name() const {
  switch (kind) {
    case Kind::Undefined:
      return "Undefined";
    case Kind::None:
      return "NoneType";
    case Kind::Bool:
      return "bool";
    case Kind::Int:
      return "int";
    case Kind::Float:
      return "float";
    case Kind::String:
      return "str";
    case Kind::List:
      return is_tuple ? "tuple" : "list";
    case Kind::Dict:
      return is_namespace ? "Namespace" : "dict";
    case Kind::Function:
      return "function";
  }
  return "";
}

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : items)
    if (py_equal(k, key)) return &v;
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k.kind == Kind::String && k.s == key) return &v;
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto& [k, v] : items) {
    if (py_equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

bool py_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::Undefined:
    case Kind::None:
      return true;
    case Kind::String:
      return a.s == b.s;
    case Kind::List:
      if (a.is_tuple != b.is_tuple || a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!py_equal((*a.list)[k], (*b.list)[k])) return false;
      return true;
    case Kind::Dict:
      if (a.is_namespace || b.is_namespace) return a.dict == b.dict;
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, v] : a.dict->items) {
        const Value* other = b.dict->find(k);
        if (!other || !py_equal(v, *other)) return false;
      }
      return true;
    case Kind::Function:
      return a.fn == b.fn;
    default:
      return false;
  }
}

bool py_less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.kind == Kind::String && b.kind == Kind::String) return a.s < b.s;
  if (a.kind == Kind::List && b.kind == Kind::List && a.is_tuple == b.is_tuple) {
    size_t n = std::min(a.list->size(), b.list->size());
    for (size_t k = 0; k < n; ++k) {
      const Value& x = (*a.list)[k];
      const Value& y = (*b.list)[k];
      if (!py_equal(x, y)) return py_less(x, y);
    }
    return a.list->size() < b.list->size();
  }
  fail("TypeError: '<' not supported between instances of '{}' and '{}'", a.type_name(), b.type_name());
}

bool py_same(const Value& a, const Value& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::List:
      return a.list == b.list;
    case Kind::Dict:
      return a.dict == b.dict;
    case Kind::Function:
      return a.fn == b.fn;
    default:
      return py_equal(a, b);
  }
}

namespace {
template <typename Json>
Value from_json_impl(const Json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::integer(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return Value::integer(static_cast<int64_t>(j.template get<uint64_t>()));
    case nlohmann::json::value_t::number_float:
      return Value::floating(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value::string(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json_impl(e));
      return Value::make_list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Value d = Value::make_dict();
      d.dict->items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it)
        d.dict->items.emplace_back(Value::string(it.key()), from_json_impl(it.value()));
      return d;
    }
    default:
      fail("chat template: unsupported JSON value type '{}'", j.type_name());
  }
}
}  // namespace

Value from_json(const nlohmann::ordered_json& j) { return from_json_impl(j); }
Value from_json(const nlohmann::json& j) { return from_json_impl(j); }

std::string float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0.0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t epos = sci.find('e');
  std::string digits;
  for (size_t k = 0; k < epos; ++k)
    if (sci[k] != '.') digits += sci[k];
  int exp10 = std::stoi(sci.substr(epos + 1));
  int decpt = exp10 + 1;  // value = 0.digits * 10^decpt
  std::string out = neg ? "-" : "";
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(decpt) - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
  return out + ebuf;
}

std::string string_repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : utf8_decode(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (!py_isprintable(c)) {
      char buf[16];
      if (c < 0x100)
        std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      else if (c < 0x10000)
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      else
        std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(c));
      out += buf;
    } else {
      append_utf8(out, c);
    }
  }
  out += quote;
  return out;
}

}  // namespace rill::text::jinja
