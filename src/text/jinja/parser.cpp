// text/jinja/parser.cpp — Jinja2 grammar (jinja2/parser.py semantics, our own code).
#include "text/jinja/parser.h"

#include <charconv>
#include <cstdlib>
#include <initializer_list>

#include "text/jinja/error.h"
#include "text/jinja/filters.h"

namespace rill::text::jinja {
namespace {

ExprPtr make_expr(ExprKind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

NodePtr make_node(NodeKind kind, int line) {
  auto n = std::make_unique<Node>();
  n->kind = kind;
  n->line = line;
  return n;
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : toks_(tokens) {}

  NodeList parse_template() {
    NodeList body = parse_body({});
    if (cur().type != TokenType::End) error(cur().line, "unexpected token");
    return body;
  }

 private:
  const std::vector<Token>& toks_;
  size_t pos_ = 0;

  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  const Token& next() { return toks_[pos_ < toks_.size() - 1 ? pos_++ : pos_]; }

  [[noreturn]] static void error(int line, const std::string& what) {
    throw LocatedError(fmt::format("template line {}: syntax error: {}", line, what));
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::End: return "end of template";
      case TokenType::BlockEnd: return "end of statement block";
      case TokenType::VarEnd: return "end of print statement";
      case TokenType::String: return "string";
      default: return "'" + t.value + "'";
    }
  }

  bool is_op(const char* op) const { return cur().type == TokenType::Op && cur().value == op; }
  bool is_name(const char* name) const { return cur().type == TokenType::Name && cur().value == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) error(cur().line, fmt::format("expected '{}', got {}", op, describe(cur())));
  }
  std::string expect_name() {
    if (cur().type != TokenType::Name) error(cur().line, fmt::format("expected a name, got {}", describe(cur())));
    return next().value;
  }
  void expect_block_end() {
    if (cur().type != TokenType::BlockEnd)
      error(cur().line, fmt::format("expected end of statement block, got {}", describe(cur())));
    next();
  }

  // ---- statements ----

  // Parses until `{% <one of end_tags>` (left unconsumed) or the end of the tokens.
  NodeList parse_body(std::initializer_list<const char*> end_tags) {
    NodeList body;
    while (true) {
      const Token& t = cur();
      if (t.type == TokenType::End) {
        if (end_tags.size() != 0) {
          std::string expected;
          for (const char* e : end_tags) expected += (expected.empty() ? "'" : ", '") + std::string(e) + "'";
          error(t.line, fmt::format("unexpected end of template, expected one of {}", expected));
        }
        return body;
      }
      if (t.type == TokenType::Text) {
        auto n = make_node(NodeKind::Text, t.line);
        n->text = t.value;
        body.push_back(std::move(n));
        next();
      } else if (t.type == TokenType::VarBegin) {
        auto n = make_node(NodeKind::Output, t.line);
        next();
        n->expr = parse_tuple(false, true, {}, false);
        if (cur().type != TokenType::VarEnd)
          error(cur().line, fmt::format("expected end of print statement, got {}", describe(cur())));
        next();
        body.push_back(std::move(n));
      } else if (t.type == TokenType::BlockBegin) {
        const Token& kw = peek();
        if (kw.type == TokenType::Name)
          for (const char* e : end_tags)
            if (kw.value == e) return body;
        next();
        body.push_back(parse_statement());
      } else {
        error(t.line, "unexpected token " + describe(t));
      }
    }
  }

  // Consumes `{% name` then the block end.
  void expect_end_tag(const char* name) {
    next();  // BlockBegin
    if (!skip_name(name)) error(cur().line, fmt::format("expected '{}'", name));
    expect_block_end();
  }

  NodePtr parse_statement() {
    const Token& t = cur();
    if (t.type != TokenType::Name) error(t.line, "tag name expected");
    const std::string kw = t.value;
    const int line = t.line;
    next();
    if (kw == "if") return parse_if(line);
    if (kw == "for") return parse_for(line);
    if (kw == "set") return parse_set(line);
    if (kw == "macro") return parse_macro(line);
    if (kw == "call") return parse_call_block(line);
    if (kw == "filter") return parse_filter_block(line);
    if (kw == "with") return parse_with(line);
    if (kw == "break" || kw == "continue") {
      auto n = make_node(kw == "break" ? NodeKind::Break : NodeKind::Continue, line);
      expect_block_end();
      return n;
    }
    if (kw == "generation") {
      auto n = make_node(NodeKind::Scope, line);
      expect_block_end();
      n->body = parse_body({"endgeneration"});
      expect_end_tag("endgeneration");
      return n;
    }
    error(line, fmt::format("unknown tag '{}'", kw));
  }

  NodePtr parse_if(int line) {
    auto n = make_node(NodeKind::If, line);
    ExprPtr cond = parse_tuple(false, true, {}, false);
    expect_block_end();
    while (true) {
      NodeList body = parse_body({"elif", "else", "endif"});
      n->branches.emplace_back(std::move(cond), std::move(body));
      next();  // BlockBegin
      std::string tag = next().value;
      if (tag == "elif") {
        cond = parse_tuple(false, true, {}, false);
        expect_block_end();
      } else if (tag == "else") {
        expect_block_end();
        NodeList else_body = parse_body({"endif"});
        n->branches.emplace_back(nullptr, std::move(else_body));
        expect_end_tag("endif");
        return n;
      } else {
        expect_block_end();
        return n;
      }
    }
  }

  NodePtr parse_for(int line) {
    auto n = make_node(NodeKind::For, line);
    n->target = parse_assign_target({"in"}, false);
    if (!skip_name("in")) error(cur().line, "expected 'in' in for loop");
    n->expr = parse_tuple(false, false, {"recursive"}, false);
    if (skip_name("if")) n->cond = parse_expression(true);
    if (skip_name("recursive")) n->recursive = true;
    expect_block_end();
    n->body = parse_body({"endfor", "else"});
    next();
    if (next().value == "else") {
      expect_block_end();
      n->else_body = parse_body({"endfor"});
      expect_end_tag("endfor");
    } else {
      expect_block_end();
    }
    return n;
  }

  NodePtr parse_set(int line) {
    ExprPtr target = parse_assign_target({}, true);
    if (skip_op("=")) {
      auto n = make_node(NodeKind::Set, line);
      n->target = std::move(target);
      n->expr = parse_tuple(false, true, {}, false);
      expect_block_end();
      return n;
    }
    auto n = make_node(NodeKind::SetBlock, line);
    n->target = std::move(target);
    while (skip_op("|")) n->filters.push_back(parse_filter_call(nullptr));
    expect_block_end();
    n->body = parse_body({"endset"});
    expect_end_tag("endset");
    return n;
  }

  void parse_signature(Node& n) {
    expect_op("(");
    while (!is_op(")")) {
      if (!n.params.empty()) expect_op(",");
      if (is_op(")")) break;
      n.params.push_back(expect_name());
      n.defaults.push_back(skip_op("=") ? parse_expression(true) : nullptr);
    }
    expect_op(")");
  }

  NodePtr parse_macro(int line) {
    auto n = make_node(NodeKind::Macro, line);
    n->name = expect_name();
    parse_signature(*n);
    expect_block_end();
    n->body = parse_body({"endmacro"});
    expect_end_tag("endmacro");
    return n;
  }

  NodePtr parse_call_block(int line) {
    auto n = make_node(NodeKind::CallBlock, line);
    if (is_op("(")) parse_signature(*n);
    n->expr = parse_expression(true);
    if (n->expr->kind != ExprKind::Call) error(line, "expected call");
    expect_block_end();
    n->body = parse_body({"endcall"});
    expect_end_tag("endcall");
    return n;
  }

  NodePtr parse_filter_block(int line) {
    auto n = make_node(NodeKind::FilterBlock, line);
    n->filters.push_back(parse_filter_call(nullptr));
    while (skip_op("|")) n->filters.push_back(parse_filter_call(nullptr));
    expect_block_end();
    n->body = parse_body({"endfilter"});
    expect_end_tag("endfilter");
    return n;
  }

  NodePtr parse_with(int line) {
    auto n = make_node(NodeKind::With, line);
    while (cur().type != TokenType::BlockEnd) {
      if (!n->assigns.empty()) expect_op(",");
      ExprPtr target = parse_assign_target({}, false);
      expect_op("=");
      n->assigns.emplace_back(std::move(target), parse_expression(true));
    }
    expect_block_end();
    n->body = parse_body({"endwith"});
    expect_end_tag("endwith");
    return n;
  }

  // name | name.attr (namespace) | a, b (tuple of names)
  ExprPtr parse_assign_target(std::initializer_list<const char*> extra_end, bool with_namespace) {
    if (with_namespace && cur().type == TokenType::Name && peek().type == TokenType::Op && peek().value == ".") {
      auto e = make_expr(ExprKind::Getattr, cur().line);
      auto obj = make_expr(ExprKind::Name, cur().line);
      obj->name = next().value;
      next();
      e->name = expect_name();
      e->children.push_back(std::move(obj));
      return e;
    }
    ExprPtr target = parse_tuple(true, true, extra_end, false);
    auto check = [&](const Expr& x) {
      if (x.kind != ExprKind::Name) error(x.line, "can't assign to this expression");
    };
    if (target->kind == ExprKind::Tuple)
      for (auto& c : target->children) check(*c);
    else
      check(*target);
    return target;
  }

  // ---- expressions ----

  bool is_tuple_end(std::initializer_list<const char*> extra_end) const {
    const Token& t = cur();
    if (t.type == TokenType::VarEnd || t.type == TokenType::BlockEnd || t.type == TokenType::End) return true;
    if (t.type == TokenType::Op && t.value == ")") return true;
    if (t.type == TokenType::Name)
      for (const char* e : extra_end)
        if (t.value == e) return true;
    return false;
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, std::initializer_list<const char*> extra_end,
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

  ExprPtr parse_expression(bool with_condexpr) {
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
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

  ExprPtr binary(ExprKind kind, ExprPtr a, ExprPtr b, int line, std::string op = {}) {
    auto e = make_expr(kind, line);
    e->name = std::move(op);
    e->children.push_back(std::move(a));
    e->children.push_back(std::move(b));
    return e;
  }

  ExprPtr parse_or() {
    const int line = cur().line;
    ExprPtr left = parse_and();
    while (skip_name("or")) left = binary(ExprKind::Or, std::move(left), parse_and(), line);
    return left;
  }

  ExprPtr parse_and() {
    const int line = cur().line;
    ExprPtr left = parse_not();
    while (skip_name("and")) left = binary(ExprKind::And, std::move(left), parse_not(), line);
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      auto e = make_expr(ExprKind::Not, next().line);
      e->children.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
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

  ExprPtr parse_math1() {
    const int line = cur().line;
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = next().value;
      left = binary(ExprKind::Binary, std::move(left), parse_concat(), line, op);
    }
    return left;
  }

  ExprPtr parse_concat() {
    const int line = cur().line;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = make_expr(ExprKind::Concat, line);
    e->children.push_back(std::move(first));
    while (skip_op("~")) e->children.push_back(parse_math2());
    return e;
  }

  ExprPtr parse_math2() {
    const int line = cur().line;
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = next().value;
      left = binary(ExprKind::Binary, std::move(left), parse_pow(), line, op);
    }
    return left;
  }

  ExprPtr parse_pow() {
    const int line = cur().line;
    ExprPtr left = parse_unary(true);
    while (skip_op("**")) left = binary(ExprKind::Binary, std::move(left), parse_unary(true), line, "**");
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
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

  ExprPtr parse_primary() {
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

  ExprPtr parse_postfix(ExprPtr node) {
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

  ExprPtr parse_filter_expr(ExprPtr node) {
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

  ExprPtr parse_subscript(ExprPtr node) {
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

  // Returns an expression, or a Slice whose children[0] is a placeholder for the object.
  ExprPtr parse_subscribed() {
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

  void parse_call_args(Expr& e) {
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

  ExprPtr parse_call(ExprPtr callee) {
    auto e = make_expr(ExprKind::Call, cur().line);
    e->children.push_back(std::move(callee));
    parse_call_args(*e);
    return e;
  }

  std::string dotted_name() {
    std::string name = expect_name();
    while (is_op(".")) {
      next();
      name += "." + expect_name();
    }
    return name;
  }

  ExprPtr parse_filter_call(ExprPtr input) {
    const int line = cur().line;
    auto e = make_expr(ExprKind::Filter, line);
    e->name = dotted_name();
    e->builtin = filter_index(e->name);
    if (e->builtin < 0) throw LocatedError(fmt::format("template line {}: unknown filter '{}'", line, e->name));
    e->children.push_back(std::move(input));
    if (is_op("(")) parse_call_args(*e);
    return e;
  }

  ExprPtr parse_test(ExprPtr node) {
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
};

}  // namespace

NodeList parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_template(); }

}  // namespace rill::text::jinja
