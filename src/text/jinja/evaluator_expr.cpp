// text/jinja/evaluator_expr.cpp — expression evaluation with Python operator semantics
// (int/float promotion, floor division and modulo signs, str * int, chained comparisons)
// and Jinja's undefined rules (printing and testing an undefined is fine, computing with
// it raises).
#include <cmath>

#include "text/jinja/error.h"
#include "text/jinja/evaluator.h"
#include "text/jinja/filters.h"
#include "text/jinja/pystr.h"

namespace rill::text::jinja {
namespace {

[[noreturn]] void type_error(const char* op, const Value& a, const Value& b) {
  fail("TypeError: unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name());
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

Value repeat(const Value& seq, int64_t n) {
  if (seq.is_string()) {
    std::string out;
    for (int64_t k = 0; k < n; ++k) out += seq.s;
    return Value::string(out);
  }
  ValueList out;
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
  Value v = Value::make_list(std::move(out));
  v.is_tuple = seq.is_tuple;
  return v;
}

// Python slice.indices(): clamps start/stop for the given length and step.
void slice_indices(int64_t len, const Value& start_v, const Value& stop_v, int64_t step, int64_t& start,
                   int64_t& stop) {
  auto clamp = [&](const Value& v, bool is_start) {
    if (v.is_none() || v.is_undefined()) {
      if (step > 0) return is_start ? int64_t{0} : len;
      return is_start ? len - 1 : int64_t{-1};
    }
    if (!v.is_integral()) fail("TypeError: slice indices must be integers or None");
    int64_t x = v.as_int();
    if (x < 0) {
      x += len;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= len) {
      x = step < 0 ? len - 1 : len;
    }
    return x;
  };
  start = clamp(start_v, true);
  stop = clamp(stop_v, false);
}

}  // namespace

Value Evaluator::eval(const Expr& e, const FramePtr& frame) {
  try {
    return eval_inner(e, frame);
  } catch (const LocatedError&) {
    throw;
  } catch (const RaisedError&) {
    throw;
  } catch (const Error& err) {
    throw LocatedError(fmt::format("template line {}: {}", e.line, err.what()));
  }
}

CallArgs Evaluator::eval_args(const Expr& e, size_t first, const FramePtr& frame) {
  CallArgs args;
  for (size_t k = first; k < e.children.size(); ++k) args.args.push_back(eval(*e.children[k], frame));
  for (const auto& [key, value] : e.kwargs) args.kwargs.emplace_back(key, eval(*value, frame));
  return args;
}

Value Evaluator::eval_inner(const Expr& e, const FramePtr& frame) {
  switch (e.kind) {
    case ExprKind::Const:
      return e.value;
    case ExprKind::Name: {
      const Value* v = frame->find(e.name);
      return v ? *v : Value::undefined(fmt::format("'{}' is undefined", e.name));
    }
    case ExprKind::List:
    case ExprKind::Tuple: {
      ValueList items;
      items.reserve(e.children.size());
      for (const ExprPtr& c : e.children) items.push_back(eval(*c, frame));
      return e.kind == ExprKind::List ? Value::make_list(std::move(items)) : Value::make_tuple(std::move(items));
    }
    case ExprKind::Dict: {
      Value d = Value::make_dict();
      for (size_t k = 0; k + 1 < e.children.size(); k += 2) {
        Value key = eval(*e.children[k], frame);
        d.dict->set(std::move(key), eval(*e.children[k + 1], frame));
      }
      return d;
    }
    case ExprKind::Getattr:
      return get_attribute(eval(*e.children[0], frame), e.name);
    case ExprKind::Getitem: {
      Value obj = eval(*e.children[0], frame);
      return get_item(obj, eval(*e.children[1], frame));
    }
    case ExprKind::Slice:
      return eval_slice(e, frame);
    case ExprKind::Call:
      return eval_call(e, frame, nullptr);
    case ExprKind::Filter: {
      Value input = eval(*e.children[0], frame);
      CallArgs args = eval_args(e, 1, frame);
      return apply_filter(e.builtin, input, args);
    }
    case ExprKind::Test: {
      Value input = eval(*e.children[0], frame);
      CallArgs args = eval_args(e, 1, frame);
      return Value::boolean(apply_test(e.builtin, input, args) != e.negated);
    }
    case ExprKind::Neg:
    case ExprKind::Pos: {
      Value v = eval(*e.children[0], frame);
      if (v.is_undefined()) fail("{}", v.s);
      bool neg = e.kind == ExprKind::Neg;
      if (v.kind == Kind::Float) return Value::floating(neg ? -v.f : v.f);
      if (v.is_integral()) return Value::integer(neg ? -v.as_int() : v.as_int());
      fail("TypeError: bad operand type for unary {}: '{}'", neg ? "-" : "+", v.type_name());
    }
    case ExprKind::Not:
      return Value::boolean(!eval(*e.children[0], frame).truthy());
    case ExprKind::And: {
      Value a = eval(*e.children[0], frame);
      return a.truthy() ? eval(*e.children[1], frame) : a;
    }
    case ExprKind::Or: {
      Value a = eval(*e.children[0], frame);
      return a.truthy() ? a : eval(*e.children[1], frame);
    }
    case ExprKind::Binary: {
      Value a = eval(*e.children[0], frame);
      Value b = eval(*e.children[1], frame);
      return eval_binary(e.name, a, b);
    }
    case ExprKind::Compare:
      return Value::boolean(eval_compare(e, frame));
    case ExprKind::Concat: {
      std::string out;
      for (const ExprPtr& c : e.children) out += eval(*c, frame).str();
      return Value::string(std::move(out));
    }
    case ExprKind::CondExpr:
      if (eval(*e.children[0], frame).truthy()) return eval(*e.children[1], frame);
      if (e.children[2]) return eval(*e.children[2], frame);
      return Value::undefined("the inline if-expression evaluated to false and no else section was defined.");
  }
  return Value::undefined("");
}

Value Evaluator::eval_call(const Expr& e, const FramePtr& frame, const Value* caller) {
  Value callee = eval(*e.children[0], frame);
  CallArgs args = eval_args(e, 1, frame);
  if (caller) args.kwargs.emplace_back("caller", *caller);
  if (callee.is_undefined()) fail("{}", callee.s.empty() ? "undefined value is not callable" : callee.s);
  if (callee.kind != Kind::Function) fail("TypeError: '{}' object is not callable", callee.type_name());
  return callee.fn->call(args);
}

bool Evaluator::eval_compare(const Expr& e, const FramePtr& frame) {
  Value left = eval(*e.children[0], frame);
  for (size_t k = 0; k < e.ops.size(); ++k) {
    Value right = eval(*e.children[k + 1], frame);
    const std::string& op = e.ops[k];
    bool ok;
    if (op == "==") {
      ok = py_equal(left, right);
    } else if (op == "!=") {
      ok = !py_equal(left, right);
    } else if (op == "in" || op == "notin") {
      ok = contains(right, left) == (op == "in");
    } else {
      if (left.is_undefined()) fail("{}", left.s);
      if (right.is_undefined()) fail("{}", right.s);
      if (op == "<") ok = py_less(left, right);
      else if (op == ">") ok = py_less(right, left);
      else if (op == "<=") ok = !py_less(right, left);
      else ok = !py_less(left, right);
    }
    if (!ok) return false;
    left = std::move(right);
  }
  return true;
}

Value Evaluator::eval_binary(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail("{}", a.s);
  if (b.is_undefined()) fail("{}", b.s);
  const bool nums = a.is_number() && b.is_number();
  const bool any_float = a.kind == Kind::Float || b.kind == Kind::Float;
  const char o = op[0];
  if (op == "+") {
    if (nums) return any_float ? Value::floating(a.as_double() + b.as_double()) : Value::integer(a.as_int() + b.as_int());
    if (a.is_string() && b.is_string()) return Value::string(a.s + b.s);
    if (a.is_list() && b.is_list() && a.is_tuple == b.is_tuple) {
      ValueList out = *a.list;
      out.insert(out.end(), b.list->begin(), b.list->end());
      Value v = Value::make_list(std::move(out));
      v.is_tuple = a.is_tuple;
      return v;
    }
    if (a.is_string()) fail("TypeError: can only concatenate str (not \"{}\") to str", b.type_name());
    type_error("+", a, b);
  }
  if (op == "-") {
    if (!nums) type_error("-", a, b);
    return any_float ? Value::floating(a.as_double() - b.as_double()) : Value::integer(a.as_int() - b.as_int());
  }
  if (op == "*") {
    if (nums) return any_float ? Value::floating(a.as_double() * b.as_double()) : Value::integer(a.as_int() * b.as_int());
    if ((a.is_string() || a.is_list()) && b.is_integral()) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && a.is_integral()) return repeat(b, a.as_int());
    type_error("*", a, b);
  }
  if (op == "/") {
    if (!nums) type_error("/", a, b);
    if (b.as_double() == 0.0) fail("ZeroDivisionError: division by zero");
    return Value::floating(a.as_double() / b.as_double());
  }
  if (op == "//") {
    if (!nums) type_error("//", a, b);
    if (b.as_double() == 0.0) fail("ZeroDivisionError: integer division or modulo by zero");
    if (!any_float) return Value::integer(floor_div(a.as_int(), b.as_int()));
    return Value::floating(std::floor(a.as_double() / b.as_double()));
  }
  if (o == '%') {
    if (a.is_string()) {
      CallArgs args;
      if (b.is_list() && b.is_tuple) {
        args.args = *b.list;
      } else if (b.is_dict()) {
        for (const auto& [k, v] : b.dict->items) args.kwargs.emplace_back(k.str(), v);
      } else {
        args.args.push_back(b);
      }
      return apply_filter(filter_index("format"), a, args);
    }
    if (!nums) type_error("%", a, b);
    if (b.as_double() == 0.0) fail("ZeroDivisionError: integer division or modulo by zero");
    if (!any_float) {
      int64_t r = a.as_int() % b.as_int();
      if (r != 0 && ((r < 0) != (b.as_int() < 0))) r += b.as_int();
      return Value::integer(r);
    }
    double r = std::fmod(a.as_double(), b.as_double());
    if (r != 0.0 && ((r < 0) != (b.as_double() < 0))) r += b.as_double();
    return Value::floating(r);
  }
  if (op == "**") {
    if (!nums) type_error("**", a, b);
    if (!any_float && b.as_int() >= 0) {
      int64_t result = 1, base = a.as_int();
      for (int64_t k = 0; k < b.as_int(); ++k) result *= base;
      return Value::integer(result);
    }
    return Value::floating(std::pow(a.as_double(), b.as_double()));
  }
  fail("unknown operator '{}'", op);
}

Value Evaluator::eval_slice(const Expr& e, const FramePtr& frame) {
  Value obj = eval(*e.children[0], frame);
  if (obj.is_undefined()) fail("{}", obj.s);
  auto part = [&](size_t k) { return e.children[k] ? eval(*e.children[k], frame) : Value::none(); };
  Value start_v = part(1), stop_v = part(2), step_v = part(3);
  int64_t step = 1;
  if (!step_v.is_none()) {
    if (!step_v.is_integral()) fail("TypeError: slice indices must be integers or None");
    step = step_v.as_int();
    if (step == 0) fail("ValueError: slice step cannot be zero");
  }
  std::u32string chars;
  int64_t len;
  if (obj.is_string()) {
    chars = utf8_decode(obj.s);
    len = static_cast<int64_t>(chars.size());
  } else if (obj.is_list()) {
    len = static_cast<int64_t>(obj.list->size());
  } else {
    fail("TypeError: '{}' object is not subscriptable", obj.type_name());
  }
  int64_t start, stop;
  slice_indices(len, start_v, stop_v, step, start, stop);
  std::u32string out_chars;
  ValueList out_items;
  for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
    if (obj.is_string())
      out_chars.push_back(chars[static_cast<size_t>(k)]);
    else
      out_items.push_back((*obj.list)[static_cast<size_t>(k)]);
  }
  if (obj.is_string()) return Value::string(utf8_encode(out_chars));
  Value v = Value::make_list(std::move(out_items));
  v.is_tuple = obj.is_tuple;
  return v;
}

}  // namespace rill::text::jinja
