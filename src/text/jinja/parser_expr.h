// text/jinja/parser_expr.h — internal to the parser: the token cursor and the expression
// grammar (Jinja2 precedence: or < and < not < compare < +,- < ~ < *,/,//,% < ** < unary,
// with filters, tests and calls binding tightest). parser.cpp adds the statements on top.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

#include "text/jinja/ast.h"
#include "text/jinja/error.h"
#include "text/jinja/lexer.h"

namespace rill::text::jinja {

class ExprParser {
 public:
  explicit ExprParser(const std::vector<Token>& tokens) : toks_(tokens) {}

 protected:
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

  bool is_tuple_end(std::initializer_list<const char*> extra_end) const;
  ExprPtr parse_tuple(bool simplified, bool with_condexpr, std::initializer_list<const char*> extra_end,
                      bool explicit_parentheses);
  ExprPtr parse_expression(bool with_condexpr);
  ExprPtr parse_condexpr();
  ExprPtr binary(ExprKind kind, ExprPtr a, ExprPtr b, int line, std::string op = {});
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_subscribed();
  void parse_call_args(Expr& e);
  ExprPtr parse_call(ExprPtr callee);
  std::string dotted_name();
  ExprPtr parse_filter_call(ExprPtr input);
  ExprPtr parse_test(ExprPtr node);
};

ExprPtr make_expr(ExprKind kind, int line);

}  // namespace rill::text::jinja
