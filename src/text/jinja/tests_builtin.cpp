// text/jinja/tests_builtin.cpp — Jinja2's builtin tests (`x is defined`, `x is string`, ...)
// with Python's type rules: bool counts as a number but not as an integer; str and dict
// are sequences; an undefined value is iterable (it iterates as empty).
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "text/jinja/filters.h"
#include "text/jinja/pystr.h"

namespace rill::text::jinja {
namespace {

using TestFn = bool (*)(const Value&, CallArgs&);

const Value& arg0(CallArgs& a, const char* name) {
  ArgBinder b(name, a, {"other"});
  if (!b.get(0)) fail("test '{}' needs an argument", name);
  return *b.get(0);
}

bool t_defined(const Value& v, CallArgs&) { return !v.is_undefined(); }
bool t_undefined(const Value& v, CallArgs&) { return v.is_undefined(); }
bool t_none(const Value& v, CallArgs&) { return v.is_none(); }
bool t_boolean(const Value& v, CallArgs&) { return v.kind == Kind::Bool; }
bool t_true(const Value& v, CallArgs&) { return v.kind == Kind::Bool && v.b; }
bool t_false(const Value& v, CallArgs&) { return v.kind == Kind::Bool && !v.b; }
bool t_integer(const Value& v, CallArgs&) { return v.kind == Kind::Int; }
bool t_float(const Value& v, CallArgs&) { return v.kind == Kind::Float; }
bool t_number(const Value& v, CallArgs&) { return v.is_number(); }
bool t_string(const Value& v, CallArgs&) { return v.is_string(); }
bool t_mapping(const Value& v, CallArgs&) { return v.is_dict() && !v.is_namespace; }
bool t_iterable(const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace);
}
bool t_sequence(const Value& v, CallArgs& a) { return t_iterable(v, a); }
// Jinja's Undefined defines __call__ (it raises), so it counts as callable.
bool t_callable(const Value& v, CallArgs&) { return v.kind == Kind::Function || v.is_undefined(); }
bool t_escaped(const Value&, CallArgs&) { return false; }
bool t_sameas(const Value& v, CallArgs& a) { return py_same(v, arg0(a, "sameas")); }
bool t_eq(const Value& v, CallArgs& a) { return py_equal(v, arg0(a, "eq")); }
bool t_ne(const Value& v, CallArgs& a) { return !py_equal(v, arg0(a, "ne")); }
bool t_lt(const Value& v, CallArgs& a) { return py_less(v, arg0(a, "lt")); }
bool t_gt(const Value& v, CallArgs& a) { return py_less(arg0(a, "gt"), v); }
bool t_le(const Value& v, CallArgs& a) {
  const Value& o = arg0(a, "le");
  return py_less(v, o) || py_equal(v, o);
}
bool t_ge(const Value& v, CallArgs& a) {
  const Value& o = arg0(a, "ge");
  return py_less(o, v) || py_equal(v, o);
}
bool t_in(const Value& v, CallArgs& a) { return contains(arg0(a, "in"), v); }
int64_t py_mod(int64_t x, int64_t m) {
  if (m == 0) fail("ZeroDivisionError: integer modulo by zero");
  int64_t r = x % m;
  return (r != 0 && ((r < 0) != (m < 0))) ? r + m : r;
}
bool t_divisibleby(const Value& v, CallArgs& a) {
  const Value& n = arg0(a, "divisibleby");
  if (v.is_integral() && n.is_integral()) return py_mod(v.as_int(), n.as_int()) == 0;
  if (!v.is_number() || !n.is_number()) fail("TypeError: divisibleby needs numbers");
  return std::fmod(v.as_double(), n.as_double()) == 0.0;
}
bool t_odd(const Value& v, CallArgs&) {
  if (!v.is_integral()) fail("TypeError: odd needs an integer, not {}", v.type_name());
  return py_mod(v.as_int(), 2) == 1;
}
bool t_even(const Value& v, CallArgs&) {
  if (!v.is_integral()) fail("TypeError: even needs an integer, not {}", v.type_name());
  return py_mod(v.as_int(), 2) == 0;
}
bool t_lower(const Value& v, CallArgs&) {
  std::string s = v.str();
  return py_lower(s) != py_upper(s) && s == py_lower(s);
}
bool t_upper(const Value& v, CallArgs&) {
  std::string s = v.str();
  return py_lower(s) != py_upper(s) && s == py_upper(s);
}
bool t_filter(const Value& v, CallArgs&) { return v.is_string() && filter_index(v.s) >= 0; }
bool t_test(const Value& v, CallArgs&) { return v.is_string() && test_index(v.s) >= 0; }

struct TestEntry {
  const char* name;
  TestFn fn;
};

constexpr TestEntry kTests[] = {
    {"boolean", t_boolean}, {"callable", t_callable}, {"defined", t_defined}, {"divisibleby", t_divisibleby},
    {"eq", t_eq},           {"equalto", t_eq},        {"==", t_eq},           {"escaped", t_escaped},
    {"even", t_even},       {"false", t_false},       {"filter", t_filter},   {"float", t_float},
    {"ge", t_ge},           {">=", t_ge},             {"gt", t_gt},           {">", t_gt},
    {"greaterthan", t_gt},  {"in", t_in},             {"integer", t_integer}, {"iterable", t_iterable},
    {"le", t_le},           {"<=", t_le},             {"lower", t_lower},     {"lt", t_lt},
    {"<", t_lt},            {"lessthan", t_lt},       {"mapping", t_mapping}, {"ne", t_ne},
    {"!=", t_ne},           {"none", t_none},         {"number", t_number},   {"odd", t_odd},
    {"sameas", t_sameas},   {"sequence", t_sequence}, {"string", t_string},   {"test", t_test},
    {"true", t_true},       {"undefined", t_undefined}, {"upper", t_upper},
};

}  // namespace

int test_index(std::string_view name) {
  for (size_t k = 0; k < std::size(kTests); ++k)
    if (name == kTests[k].name) return static_cast<int>(k);
  return -1;
}

bool apply_test(int index, const Value& input, CallArgs& args) {
  RILL_CHECK(index >= 0 && static_cast<size_t>(index) < std::size(kTests), "bad test index {}", index);
  return kTests[index].fn(input, args);
}

}  // namespace rill::text::jinja
