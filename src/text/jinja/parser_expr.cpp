// text/jinja/parser_expr.cpp — expression grammar of the template parser (jinja2/parser.py
// semantics, our own code). See parser_expr.h.
#include "text/jinja/parser_expr.h"

#include <charconv>
#include <cstdlib>

#include "text/jinja/filters.h"

namespace rill::text::jinja {

ExprPtr make_expr(ExprKind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

bool ExprParser::is_tuple_end(std::initializer_list<const char*> extra_end) const {
  const Token& t = cur();
  if (t.type == TokenType::VarEnd || t.type == TokenType::BlockEnd || t.type == TokenType::End) return true;
  if (t.type == TokenType::Op && t.value == ")") return true;
  if (t.type == TokenType::Name)
    for (const char* e : extra_end)
      if (t.value == e) return true;
  return false;
}

ExprPtr ExprParser::parse_tuple(bool simplified, bool with_condexpr, std::initializer_list<const char*> extra_end,
                    bool explicit_parentheses) {
  const int line = cur().line;
  std::vector<ExprPtr> args;
  bool is_tuple = false;
  while (true) {
    if (!args.empty()) expect_op(",");
    if (is_tuple_end(extra_end)) break;
    if (simplified)
      args.push_back(parse_primary());
    else
      args.push_back(parse_expression(with_condexpr));
    if (is_op(","))
      is_tuple = true;
    else
      break;
  }
  if (!is_tuple) {
    if (!args.empty()) return std::move(args[0]);
    if (!explicit_parentheses) error(line, fmt::format("expected an expression, got {}", describe(cur())));
  }
  auto e = make_expr(ExprKind::Tuple, line);
  e->children = std::move(args);
  return e;
}

ExprPtr ExprParser::parse_expression(bool with_condexpr) {
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprPtr ExprParser::parse_condexpr() {
  const int line = cur().line;
  ExprPtr expr1 = parse_or();
  while (skip_name("if")) {
    ExprPtr expr2 = parse_or();
    ExprPtr expr3 = skip_name("else") ? parse_condexpr() : nullptr;
    auto e = make_expr(ExprKind::CondExpr, line);
    e->children.push_back(std::move(expr2));
    e->children.push_back(std::move(expr1));
    e->children.push_back(std::move(expr3));
    expr1 = std::move(e);
  }
  return expr1;
}

ExprPtr ExprParser::binary(ExprKind kind, ExprPtr a, ExprPtr b, int line, std::string op) {
  auto e = make_expr(kind, line);
  e->name = std::move(op);
  e->children.push_back(std::move(a));
  e->children.push_back(std::move(b));
  return e;
}

ExprPtr ExprParser::parse_or() {
  const int line = cur().line;
  ExprPtr left = parse_and();
  while (skip_name("or")) left = binary(ExprKind::Or, std::move(left), parse_and(), line);
  return left;
}

ExprPtr ExprParser::parse_and() {
  const int line = cur().line;
  ExprPtr left = parse_not();
  while (skip_name("and")) left = binary(ExprKind::And, std::move(left), parse_not(), line);
  return left;
}

ExprPtr ExprParser::parse_not() {
  if (is_name("not")) {
    auto e = make_expr(ExprKind::Not, next().line);
    e->children.push_back(parse_not());
    return e;
  }
  return parse_compare();
}

ExprPtr ExprParser::parse_compare() {
  const int line = cur().line;
  ExprPtr expr = parse_math1();
  std::unique_ptr<Expr> cmp;
  while (true) {
    std::string op;
    if (cur().type == TokenType::Op &&
        (cur().value == "==" || cur().value == "!=" || cur().value == "<" || cur().value == "<=" ||
         cur().value == ">" || cur().value == ">=")) {
      op = next().value;
    } else if (skip_name("in")) {
      op = "in";
    } else if (is_name("not") && peek().type == TokenType::Name && peek().value == "in") {
      next();
      next();
      op = "notin";
    } else {
      break;
    }
    if (!cmp) {
      cmp = make_expr(ExprKind::Compare, line);
      cmp->children.push_back(std::move(expr));
    }
    cmp->ops.push_back(op);
    cmp->children.push_back(parse_math1());
  }
  return cmp ? std::move(cmp) : std::move(expr);
}

ExprPtr ExprParser::parse_math1() {
  const int line = cur().line;
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    std::string op = next().value;
    left = binary(ExprKind::Binary, std::move(left), parse_concat(), line, op);
  }
  return left;
}

ExprPtr ExprParser::parse_concat() {
  const int line = cur().line;
  ExprPtr first = parse_math2();
  if (!is_op("~")) return first;
  auto e = make_expr(ExprKind::Concat, line);
  e->children.push_back(std::move(first));
  while (skip_op("~")) e->children.push_back(parse_math2());
  return e;
}

ExprPtr ExprParser::parse_math2() {
  const int line = cur().line;
  ExprPtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    std::string op = next().value;
    left = binary(ExprKind::Binary, std::move(left), parse_pow(), line, op);
  }
  return left;
}

ExprPtr ExprParser::parse_pow() {
  const int line = cur().line;
  ExprPtr left = parse_unary(true);
  while (skip_op("**")) left = binary(ExprKind::Binary, std::move(left), parse_unary(true), line, "**");
  return left;
}

ExprPtr ExprParser::parse_unary(bool with_filter) {
  const int line = cur().line;
  ExprPtr node;
  if (is_op("-") || is_op("+")) {
    bool neg = next().value == "-";
    node = make_expr(neg ? ExprKind::Neg : ExprKind::Pos, line);
    node->children.push_back(parse_unary(false));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr ExprParser::parse_primary() {
  const Token& t = cur();
  const int line = t.line;
  if (t.type == TokenType::Name) {
    const std::string& v = t.value;
    auto e = make_expr(ExprKind::Const, line);
    if (v == "true" || v == "True") {
      e->value = Value::boolean(true);
    } else if (v == "false" || v == "False") {
      e->value = Value::boolean(false);
    } else if (v == "none" || v == "None") {
      e->value = Value::none();
    } else {
      e->kind = ExprKind::Name;
      e->name = v;
    }
    next();
    return e;
  }
  if (t.type == TokenType::String) {
    std::string s = next().value;
    while (cur().type == TokenType::String) s += next().value;
    auto e = make_expr(ExprKind::Const, line);
    e->value = Value::string(std::move(s));
    return e;
  }
  if (t.type == TokenType::Int || t.type == TokenType::Float) {
    auto e = make_expr(ExprKind::Const, line);
    const std::string& text = next().value;
    if (t.type == TokenType::Float) {
      e->value = Value::floating(std::strtod(text.c_str(), nullptr));
    } else {
      int64_t v = 0;
      auto res = std::from_chars(text.data(), text.data() + text.size(), v);
      if (res.ec != std::errc()) error(line, "integer literal out of range: " + text);
      e->value = Value::integer(v);
    }
    return e;
  }
  if (skip_op("(")) {
    ExprPtr e = parse_tuple(false, true, {}, true);
    expect_op(")");
    return e;
  }
  if (skip_op("[")) {
    auto e = make_expr(ExprKind::List, line);
    while (!is_op("]")) {
      if (!e->children.empty()) expect_op(",");
      if (is_op("]")) break;
      e->children.push_back(parse_expression(true));
    }
    expect_op("]");
    return e;
  }
  if (skip_op("{")) {
    auto e = make_expr(ExprKind::Dict, line);
    while (!is_op("}")) {
      if (!e->children.empty()) expect_op(",");
      if (is_op("}")) break;
      e->children.push_back(parse_expression(true));
      expect_op(":");
      e->children.push_back(parse_expression(true));
    }
    expect_op("}");
    return e;
  }
  error(line, fmt::format("unexpected {}", describe(t)));
}

ExprPtr ExprParser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_op(".") || is_op("[")) {
      node = parse_subscript(std::move(node));
    } else if (is_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr ExprParser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (skip_op("|")) {
      node = parse_filter_call(std::move(node));
    } else if (is_name("is")) {
      node = parse_test(std::move(node));
    } else if (is_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr ExprParser::parse_subscript(ExprPtr node) {
  const Token& t = next();
  const int line = t.line;
  if (t.value == ".") {
    if (cur().type == TokenType::Name) {
      auto e = make_expr(ExprKind::Getattr, line);
      e->name = next().value;
      e->children.push_back(std::move(node));
      return e;
    }
    if (cur().type == TokenType::Int) {
      auto e = make_expr(ExprKind::Getitem, line);
      e->children.push_back(std::move(node));
      auto idx = make_expr(ExprKind::Const, line);
      idx->value = Value::integer(std::stoll(next().value));
      e->children.push_back(std::move(idx));
      return e;
    }
    error(line, "expected name or number after '.'");
  }
  // '[' subscript: an expression, a slice, or a tuple of them.
  std::vector<ExprPtr> args;
  while (!is_op("]")) {
    if (!args.empty()) expect_op(",");
    args.push_back(parse_subscribed());
  }
  expect_op("]");
  if (args.empty()) error(line, "empty subscript");
  ExprPtr key;
  if (args.size() == 1) {
    key = std::move(args[0]);
  } else {
    key = make_expr(ExprKind::Tuple, line);
    key->children = std::move(args);
  }
  if (key->kind == ExprKind::Slice) {
    key->children[0] = std::move(node);
    return key;
  }
  auto e = make_expr(ExprKind::Getitem, line);
  e->children.push_back(std::move(node));
  e->children.push_back(std::move(key));
  return e;
}

ExprPtr ExprParser::parse_subscribed() {
  const int line = cur().line;
  ExprPtr start;
  if (!is_op(":")) {
    start = parse_expression(true);
    if (!is_op(":")) return start;
  }
  next();  // ':'
  auto e = make_expr(ExprKind::Slice, line);
  e->children.push_back(nullptr);
  e->children.push_back(std::move(start));
  e->children.push_back(!is_op("]") && !is_op(",") && !is_op(":") ? parse_expression(true) : nullptr);
  ExprPtr step;
  if (skip_op(":") && !is_op("]") && !is_op(",")) step = parse_expression(true);
  e->children.push_back(std::move(step));
  return e;
}

void ExprParser::parse_call_args(Expr& e) {
  expect_op("(");
  bool first = true;
  while (!is_op(")")) {
    if (!first) {
      expect_op(",");
      if (is_op(")")) break;
    }
    first = false;
    if (is_op("*") || is_op("**")) error(cur().line, "*args / **kwargs in calls are not supported");
    if (cur().type == TokenType::Name && peek().type == TokenType::Op && peek().value == "=") {
      std::string key = next().value;
      next();
      e.kwargs.emplace_back(std::move(key), parse_expression(true));
    } else {
      if (!e.kwargs.empty()) error(cur().line, "positional argument after keyword argument");
      e.children.push_back(parse_expression(true));
    }
  }
  expect_op(")");
}

ExprPtr ExprParser::parse_call(ExprPtr callee) {
  auto e = make_expr(ExprKind::Call, cur().line);
  e->children.push_back(std::move(callee));
  parse_call_args(*e);
  return e;
}

std::string ExprParser::dotted_name() {
  std::string name = expect_name();
  while (is_op(".")) {
    next();
    name += "." + expect_name();
  }
  return name;
}

ExprPtr ExprParser::parse_filter_call(ExprPtr input) {
  const int line = cur().line;
  auto e = make_expr(ExprKind::Filter, line);
  e->name = dotted_name();
  e->builtin = filter_index(e->name);
  if (e->builtin < 0) throw LocatedError(fmt::format("template line {}: unknown filter '{}'", line, e->name));
  e->children.push_back(std::move(input));
  if (is_op("(")) parse_call_args(*e);
  return e;
}

ExprPtr ExprParser::parse_test(ExprPtr node) {
  const int line = next().line;  // 'is'
  bool negated = skip_name("not");
  auto e = make_expr(ExprKind::Test, line);
  e->negated = negated;
  e->name = dotted_name();
  e->builtin = test_index(e->name);
  if (e->builtin < 0) throw LocatedError(fmt::format("template line {}: unknown test '{}'", line, e->name));
  e->children.push_back(std::move(node));
  const Token& t = cur();
  if (is_op("(")) {
    parse_call_args(*e);
  } else if ((t.type == TokenType::Name || t.type == TokenType::String || t.type == TokenType::Int ||
              t.type == TokenType::Float || is_op("[") || is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) error(t.line, "you cannot chain multiple tests with is");
    e->children.push_back(parse_postfix(parse_primary()));
  }
  return e;
}

}  // namespace rill::text::jinja
